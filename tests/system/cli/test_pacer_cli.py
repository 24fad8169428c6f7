"""PACER: pre-verifier, stop rule, data recording, packed training, weights I/O (tiny models only)."""

import json

import pytest
import torch

from engine.decode import DecodeConfig, decode
from engine.core.lm import HFModel
from engine.policies.pacer import Pacer, PreVerifier, PreVerifierConfig, save_weights
from engine.train.pacer.fit import PacerTrainConfig, train
from tests.conftest import greedy_reference, record_pacer_shards

H = 32  # tiny_llama hidden size


def tiny_mb(seed=0, **kw) -> PreVerifier:
    torch.manual_seed(seed)
    return PreVerifier(PreVerifierConfig(hidden_size=H, d_model=16, heads=2, ff=32, **kw)).eval()


def test_train_then_decode_and_sweep(recorded, tiny_target, tiny_draft, tmp_path, capsys):
    from engine.__main__ import main

    root, _ = recorded
    w = tmp_path / "m.safetensors"
    out = train(PacerTrainConfig(data_dir=str(root), out=str(w), run_dir=str(tmp_path / "run"), steps=6,
                                 batch_rows=2, pack_len=24, eval_every=3, d_model=16), progress=False)
    assert 0 <= out["heldout"]["ece"] <= 1 and out["params"] > 0
    assert (tmp_path / "m.summary.json").exists() and (tmp_path / "run" / "ckpt.safetensors").exists()
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    pol = Pacer(block=2, weights=str(w), max_window=6)
    steps = list(decode(target, draft, [3, 17, 5], pol, DecodeConfig(max_new_tokens=20)))
    assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tiny_target, [3, 17, 5], 20)
    # CLI: resume-safe retrain with a card, then the offline sweep
    card = tmp_path / "card.md"
    assert main(["pacer", "train", "--data-dir", str(root), "--out", str(tmp_path / "c.safetensors"), "--run-dir",
                 str(tmp_path / "run2"), "--steps", "4", "--batch-rows", "2", "--pack-len", "24", "--eval-every",
                 "2", "--d-model", "16", "--use-pos", "false", "--card", str(card)]) == 0
    assert "AUC" in card.read_text() and "Retrain" in card.read_text()
    sweep_json = tmp_path / "sweep.json"
    assert main(["pacer", "sweep", "--data-dir", str(root), "--weights", str(w), "--variant",
                 f"nope={tmp_path / 'c.safetensors'}", "--what-if-c", "0.05", "--out", str(sweep_json)]) == 0
    res = json.loads(sweep_json.read_text())
    for split in res["splits"].values():
        for row in split["ceiling"] + split["what_if_flat"]:  # same windows as the oracle, plus the lost draft
            assert row["perfect_preverifier"] <= row["oracle"] + 1e-9
        assert [r["c"] for r in split["what_if_flat"]] == [0.05]
    assert "nope (best)" in res["splits"]["all"]["ablations"]
    assert "oracle (exact)" in res["splits"]["all"]["baselines"]
    ev = tmp_path / "eval.json"  # `pacer eval` = the training summary's held-out evaluation, from the CLI
    assert main(["pacer", "eval", "--data-dir", str(root), "--weights", str(w), "--out", str(ev)]) == 0
    got = next(iter(json.loads(ev.read_text())["weights"].values()))
    assert got["auc"] == pytest.approx(out["heldout"]["auc"]) and got["ece"] == pytest.approx(out["heldout"]["ece"])
    assert "sim. speedup vs AR" in capsys.readouterr().out


def test_cli_decode_with_pacer(model_dirs, tmp_path):
    from engine.__main__ import main
    from engine.trace.format import load_trace

    t, d, prompts = model_dirs
    w = tmp_path / "w.safetensors"
    save_weights(tiny_mb(), w)
    out = tmp_path / "trace.jsonl"
    assert main(["decode", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--dtype", "fp32",
                 "--max-new-tokens", "16", "--policy", f"pacer:b=2,t=0.5,rho=1.1,max=8,weights={w}",
                 "--out", str(out)]) == 0
    tr = load_trace(out)
    assert tr.header["policy"]["name"] == "pacer"
    assert all("blocks" in s["policy_fields"] for s in tr.steps)
    # `pacer eval --traces`: M_B's share of decode time and the stop reasons, summed from the steps
    ev = tmp_path / "eval.json"
    assert main(["pacer", "eval", "--traces", str(out), "--out", str(ev)]) == 0
    got = json.loads(ev.read_text())["traces"][str(out)]
    mb = sum(s["policy_fields"]["mb_ms"] for s in tr.steps)
    assert got["mb_ms"] == pytest.approx(mb) and 0 < got["mb_share"] < 1
    assert sum(got["stops"].values()) == len(tr.steps) == got["steps"]
    assert main(["decode", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--out",
                 str(tmp_path / "x.jsonl"), "--policy", f"pacer:weights={tmp_path / 'nope.safetensors'}"]) == 2


def test_cli_bench_with_pacer_variant(model_dirs, tmp_path):
    from engine.__main__ import main

    t, d, prompts = model_dirs
    w = tmp_path / "w.safetensors"
    save_weights(tiny_mb(), w)
    out, md = tmp_path / "b.json", tmp_path / "b.md"
    assert main(["pacer", "bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
                 "--max-new-tokens", "10", "--configs", "ar;fixed:2;pacer-tiny:b=2,t=0.5,max=6", "--variant",
                 f"tiny={w}", "--temperatures", "0,0.7", "--dtype", "fp32", "--warmup", "0", "--out", str(out),
                 "--markdown", str(md)]) == 0
    res = json.loads(out.read_text())
    assert not res["greedy_mismatches"] and res["question_ids"] == [81, None]
    assert {r["config"] for r in res["rows"]} == {"ar", "fixed:2", "pacer-tiny:b=2,t=0.5,max=6"}
    assert "pacer-tiny" in md.read_text()
