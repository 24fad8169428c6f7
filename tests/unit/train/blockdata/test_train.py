"""Training a block drafter from feature shards: a run, its trace, kill + resume, bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from engine.train.blockdata.checkpoint import CheckpointError
from engine.train.blockdata.extract import ExtractConfig, extract
from engine.train.blockdata.shards import ShardError
from engine.train.blockdata.train import QwenTrainConfig, train_qwen
from engine.train.dpace.training_trace import load_training_trace
from tests.unit.train.blockdata.toy import LAYERS, MASK, ByteChatTokenizer, save_target, tiny_target, toy_streams


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("blk")
    m = tiny_target()
    cfg = ExtractConfig(out_dir=str(d / "data"), target="toy", layers=LAYERS, heldout=3, heldout_answer_tokens=16,
                        shard_size=6, max_shards=3, max_prompt_tokens=64, max_answer_tokens=40, min_answer_tokens=4,
                        batch_tokens=128, gen_batch=4, dtype="fp32", min_free_gb=0.0)
    extract(cfg, m, ByteChatTokenizer(), toy_streams(), progress=False)
    return d, save_target(m, d / "target")


def _cfg(d, tdir, **kw):
    base = dict(data_dir=str(d / "data"), runs_dir=str(d / "runs"), target="toy", target_dir=str(tdir),
                target_layers=LAYERS, mask_token_id=MASK, block_size=4, heads=4, kv_heads=2, ffn=32, steps=6,
                batch=2, anchors=4, lr=3e-3, log_every=2, eval_every=3, eval_seqs=2, eval_stride=2,
                final_eval_seqs=3, ckpt_minutes=0.0, autocast=False)
    return QwenTrainConfig(**{**base, **kw})


def test_a_run_writes_trace_drafter_and_final(toy_data):
    d, tdir = toy_data
    cfg = _cfg(d, tdir, objective="dflash")
    f = train_qwen(cfg, progress=False)
    run = d / "runs" / cfg.tag
    assert 1.0 <= f["tau_offline"] <= 4.0 and f["steps"] == 6
    tr = load_training_trace(run / "trace.jsonl")
    assert tr.complete and [x["step"] for x in tr.logs] == [2, 4, 6] and [e["step"] for e in tr.evals] == [0, 3, 6]
    assert tr.header["objective"] == "dflash" and tr.header["shards"] == 3
    c = json.loads((run / "drafter" / "config.json").read_text())
    assert c["target_layer_ids"] == list(LAYERS) and c["hidden_size"] == 32 and c["vocab_size"] == 272
    assert (run / "drafter" / "vocab_subset.safetensors").is_file()
    assert not (run / "ckpt.json").exists() and not list(run.glob("ckpt-*.safetensors"))
    assert train_qwen(cfg, progress=False) == f  # finished: skipped


def test_killed_run_resumes_to_the_same_weights(toy_data, monkeypatch):
    from safetensors.torch import load_file

    import engine.train.blockdata.train as T

    d, tdir = toy_data
    ref = _cfg(d, tdir, runs_dir=str(d / "runs-ref"))
    train_qwen(ref, progress=False)
    cfg = _cfg(d, tdir, runs_dir=str(d / "runs-kill"))
    real = T._lr

    def dying(c, step):
        if step == 4:
            raise KeyboardInterrupt  # a kill between step 4's checkpoint and step 5
        return real(c, step)

    monkeypatch.setattr(T, "_lr", dying)
    with pytest.raises(KeyboardInterrupt):
        train_qwen(cfg, progress=False)
    run = d / "runs-kill" / cfg.tag
    st = json.loads((run / "ckpt.json").read_text())
    assert st["step"] == 4 and (run / st["file"]).is_file() and len(list(run.glob("ckpt-*.safetensors"))) == 1
    monkeypatch.setattr(T, "_lr", real)
    f = train_qwen(cfg, progress=False)
    a = load_file(str(d / "runs-ref" / ref.tag / "drafter" / "model.safetensors"))
    b = load_file(str(run / "drafter" / "model.safetensors"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert f["tau_offline"] == json.loads((d / "runs-ref" / ref.tag / "final.json").read_text())["tau_offline"]
    tr = load_training_trace(run / "trace.jsonl")
    assert [x["step"] for x in tr.logs] == [2, 4, 6]


def test_checkpoint_of_another_config_is_refused(toy_data, monkeypatch):
    import engine.train.blockdata.train as T

    d, tdir = toy_data
    cfg = _cfg(d, tdir, runs_dir=str(d / "runs-cfg"))
    real = T._lr
    monkeypatch.setattr(T, "_lr", lambda c, s: (_ for _ in ()).throw(KeyboardInterrupt) if s == 2 else real(c, s))
    with pytest.raises(KeyboardInterrupt):
        train_qwen(cfg, progress=False)
    monkeypatch.setattr(T, "_lr", real)
    run = d / "runs-cfg" / cfg.tag
    before = (run / "ckpt.json").read_text()
    with pytest.raises(CheckpointError, match=r"ckpt.json: checkpoint of another config \(lr = 0.003, this run has "
                                              r"0.001\)"):
        train_qwen(replace(cfg, lr=1e-3), progress=False)  # same tag, other config
    assert (run / "ckpt.json").read_text() == before


def test_shards_of_other_layers_fail_before_any_step(toy_data):
    d, tdir = toy_data
    with pytest.raises(ShardError, match=r"dataset.json: this directory holds features of another kind: layers"):
        train_qwen(_cfg(d, tdir, target_layers=(1, 2), runs_dir=str(d / "runs-x")), progress=False)
    assert not (d / "runs-x").exists()
    with pytest.raises(ShardError, match=r"fewer than the 100000 asked for"):
        train_qwen(_cfg(d, tdir, max_answer_tokens=100_000, runs_dir=str(d / "runs-y")), progress=False)


def test_data_budget_takes_a_prefix_of_the_shards(toy_data):
    from engine.train.blockdata.dataset import ShardData
    from engine.train.blockdata.shards import dataset_spec

    d, _ = toy_data
    spec = dataset_spec(d / "data")
    small = ShardData(d / "data", spec, max_answer_tokens=1)
    full = ShardData(d / "data", spec)
    assert len(small.shards) == 1 and len(full.shards) == 3
    s = full.train[0]
    # target labels: the target's argmax for each answer position; data labels: the answer itself
    assert not torch.equal(s.labels[s.plen:], s.ids[s.plen:])
    assert torch.equal(ShardData(d / "data", spec, labels="data").train[0].labels, s.ids)


def test_trained_drafter_decodes_exactly_through_the_factory(toy_data):
    """A drafter trained from shards, loaded by `block:PATH` against its (tiny random, fp32) target:
    greedy output identical to the target's autoregressive decoding."""
    from engine.core.lm import HFModel
    from engine.decode import DecodeConfig, decode
    from engine.drafters import make_drafter
    from engine.policies.simple import Fixed

    d, tdir = toy_data
    cfg = _cfg(d, tdir, objective="uniform", runs_dir=str(d / "runs-dec"))
    train_qwen(cfg, progress=False)
    lm = HFModel(tiny_target(), name="toy")
    tgt, drafter = make_drafter(f"block:{d / 'runs-dec' / cfg.tag / 'drafter'}", lm)
    prompt = ByteChatTokenizer().apply_chat_template([{"content": "question 3: delta?"}])
    dc = DecodeConfig(max_new_tokens=30)
    ar = [x for r in decode(lm, None, prompt, None, dc) for x in r.emitted_tokens]
    for window in (1, 3):
        recs = list(decode(tgt, drafter, prompt, Fixed(window), dc))
        assert [x for r in recs for x in r.emitted_tokens] == ar


def test_drafter_for_another_target_is_refused_in_one_line(toy_data):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from engine.core.lm import HFModel
    from engine.drafters import make_drafter

    d, tdir = toy_data
    cfg = _cfg(d, tdir, objective="uniform", runs_dir=str(d / "runs-dec"))
    train_qwen(cfg, progress=False)
    path = d / "runs-dec" / cfg.tag / "drafter"
    wide = Qwen2ForCausalLM(Qwen2Config(vocab_size=272, hidden_size=48, intermediate_size=64, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2)).eval()
    with pytest.raises(ValueError, match=r"trained for a target with hidden size 32 and 272 tokens; wide has 48"):
        make_drafter(f"block:{path}", HFModel(wide, name="wide"))
    shallow = Qwen2ForCausalLM(Qwen2Config(vocab_size=272, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2)).eval()
    with pytest.raises(ValueError, match=r"reads target layers \[0, 2\]; shallow has only 2 layers"):
        make_drafter(f"block:{path}", HFModel(shallow, name="shallow"))


def test_reduced_head_tau_equals_the_reference_offline_tau(toy_data):
    """heldout_tau (argmax over the reduced head, no scatter) = features.offline_tau (full-vocabulary
    logits with −inf outside the head) on the same drafter and held-out answers."""
    from engine.drafters.block import BlockLM, load_block_drafter, load_block_vocab
    from engine.train.blockdata.dataset import ShardData, load_embed_head, pad_batch
    from engine.train.blockdata.shards import dataset_spec
    from engine.train.blockdata.train import heldout_tau
    from engine.train.dpace.features import offline_tau

    d, tdir = toy_data
    cfg = _cfg(d, tdir, objective="uniform", runs_dir=str(d / "runs-dec"))
    train_qwen(cfg, progress=False)
    p = d / "runs-dec" / cfg.tag / "drafter"
    emb, head, _ = load_embed_head(tdir)
    lm = BlockLM(load_block_drafter(p), emb, head, load_block_vocab(p))
    data = ShardData(d / "data", dataset_spec(d / "data"))
    ids, _, feats, plen, ln = pad_batch(data.held, data.spec.feat_dim)
    for stride in (1, 2):
        a = heldout_tau(lm, data, len(data.held), stride)
        b = offline_tau(lm, ids, feats, plen, lengths=ln, stride=stride)
        assert a["hist"] == b["hist"] and a["accept_by_pos"] == b["accept_by_pos"]
        assert a["tau_offline"] == pytest.approx(b["tau_offline"])
