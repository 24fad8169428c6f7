"""Training the EAGLE-style head from feature shards: a run learns, writes its curve, head and final;
a killed run resumes to the same weights; shards and checkpoints that do not fit are refused in one line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from engine.train.blockdata.checkpoint import CheckpointError
from engine.train.blockdata.extract import ExtractConfig, extract
from engine.train.blockdata.shards import ShardError
from engine.train.eagle import train as T
from tests.unit.train.blockdata.toy import VOCAB, ByteChatTokenizer, save_target, tiny_target, toy_streams

LAYERS = (0, 1, 2)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    from engine.models.vocab_subset import save_subset

    d = tmp_path_factory.mktemp("eagle")
    m = tiny_target()
    cfg = ExtractConfig(out_dir=str(d / "data"), target="toy", layers=LAYERS, heldout=3, heldout_answer_tokens=24,
                        shard_size=8, max_shards=4, max_prompt_tokens=64, max_answer_tokens=48, min_answer_tokens=4,
                        batch_tokens=256, gen_batch=4, dtype="fp32", min_free_gb=0.0, label_prompt=True)
    extract(cfg, m, ByteChatTokenizer(), toy_streams(40), progress=False)
    save_subset(torch.arange(VOCAB), d / "vocab.safetensors", {})
    return d, save_target(m, d / "target")


def _cfg(d, tdir, **kw):
    base = dict(data_dir=str(d / "data"), runs_dir=str(d / "runs"), target="toy", target_dir=str(tdir),
                vocab_file=str(d / "vocab.safetensors"), target_layers=(0, 2), intermediate_size=32, epochs=3.0,
                batch_tokens=256, lr=3e-3, warmup=0.05, curve=(300, 900), eval_seqs=3, ckpt_minutes=10.0,
                autocast=False, threads=1)
    return T.EagleTrainConfig(**{**base, **kw})


def test_a_run_learns_and_writes_curve_head_final(toy):
    d, tdir = toy
    f = T.train(_cfg(d, tdir, tag="a"), progress=False)
    run = d / "runs" / "a"
    assert [e["positions"] for e in f["curve"]][:1] == [0] and len(f["curve"]) >= 3
    assert f["curve"][0]["tau"] == pytest.approx(1.0, abs=0.3)
    recs = [json.loads(l) for l in (run / "trace.jsonl").read_text().splitlines()]
    logs = [r["loss"] for r in recs if r["type"] == "log"]
    assert logs and logs[-1] < logs[0]  # it learns the tiny target's argmax
    assert f["tau"] > f["curve"][0]["tau"]
    assert recs[0]["type"] == "header" and recs[-1]["type"] == "footer"
    c = json.loads((run / "head" / "config.json").read_text())
    assert c["target_layers"] == [0, 2] and c["hidden_size"] == 32 and c["vocab_size"] == VOCAB
    assert not (run / "ckpt.json").exists()
    assert T.train(_cfg(d, tdir, tag="a"), progress=False)["tau"] == f["tau"]  # a finished run is not retrained


def test_killed_run_resumes_to_the_same_weights(toy, monkeypatch):
    from safetensors.torch import load_file

    d, tdir = toy
    ref = T.train(_cfg(d, tdir, tag="ref", unroll=2), progress=False)
    calls = {"n": 0}
    real = T.step_loss

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return real(*a, **k)

    cfg = _cfg(d, tdir, tag="killed", unroll=2, ckpt_minutes=0.0)  # a checkpoint after every step
    monkeypatch.setattr(T, "step_loss", dying)
    with pytest.raises(KeyboardInterrupt):
        T.train(cfg, progress=False)
    assert (d / "runs" / "killed" / "ckpt.json").is_file()
    monkeypatch.setattr(T, "step_loss", real)
    (d / "runs" / "killed" / "lock").unlink(missing_ok=True)
    f = T.train(cfg, progress=False)
    assert f["steps"] == ref["steps"] and f["tau"] == pytest.approx(ref["tau"])
    a = load_file(str(d / "runs" / "ref" / "head" / "model.safetensors"))
    b = load_file(str(d / "runs" / "killed" / "head" / "model.safetensors"))
    assert all(torch.allclose(a[k].float(), b[k].float(), atol=1e-2) for k in a)
    steps = [json.loads(l)["step"] for l in (d / "runs" / "killed" / "trace.jsonl").read_text().splitlines()
             if '"log"' in l]
    assert steps == sorted(set(steps))  # the records after the checkpoint were dropped, not repeated


def test_refusals(toy):
    d, tdir = toy
    with pytest.raises(ShardError, match=r"reads target layers \[0, 5\].*missing \[5\]"):
        T.train(_cfg(d, tdir, tag="x", target_layers=(0, 5)), progress=False)
    with pytest.raises(ShardError, match="features of target 'toy'"):
        T.train(_cfg(d, tdir, tag="y", target="qwen2.5-coder-1.5b"), progress=False)
    cfg = _cfg(d, tdir, tag="z", ckpt_minutes=0.0)
    T.train(replace(cfg, epochs=0.2), progress=False)  # leaves a finished run: final.json
    run = d / "runs" / "z"
    (run / "final.json").unlink()
    (run / "ckpt.json").write_text(json.dumps({"schema": "speclab.block_ckpt", "step": 1, "file": "x",
                                               "config": {"lr": 1.0}}))
    with pytest.raises(CheckpointError, match="checkpoint of another config"):
        T.train(cfg, progress=False)


def test_features_of_another_hidden_size_are_refused(toy, tmp_path):
    d, _ = toy
    other = save_target(tiny_target_wide(), tmp_path / "wide")
    with pytest.raises(ShardError, match="hidden size 32 .* has 48"):
        T.train(_cfg(d, other, tag="w"), progress=False)
    assert not (d / "runs" / "w" / "trace.jsonl").exists()


def tiny_target_wide():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    c = Qwen2Config(vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                    tie_word_embeddings=False)
    return Qwen2ForCausalLM(c).eval()
