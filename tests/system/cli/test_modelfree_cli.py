"""Model-free drafters (engine.drafters.lookup / suffix): exact proposals on hand-made sequences, HF
parity, spans that point at the copied tokens, the suffix trie's per-token cost bound, greedy
exactness on the tiny pair, and χ² losslessness of the real loop with a one-hot q."""

import json
import pytest
import torch

from engine.decode import keep_for
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig


def draft(drafter, seq, cap=16, policy="fixed:16"):
    drafter.reset(seq[:1])
    prop = drafter.draft(seq, cap, keep_for(parse_policy(policy)), SamplingConfig(), torch.Generator())
    return prop.tokens[0], prop.fields.get("drafter", {}), prop


# ---------------------------------------------------------------- first-class: CLI and trace


@pytest.mark.parametrize("spec,policy", [("lookup:n=4", "fixed:4"), ("suffix:n=8", "matchlen:1,offset=2")])
def test_decode_cli_with_a_model_free_draft(model_dirs, tmp_path, spec, policy):
    from engine.__main__ import main
    from engine.trace.format import load_trace

    t, _, prompts = model_dirs
    out = tmp_path / "mf.jsonl"
    assert main(["decode", "--target", str(t), "--draft", spec, "--policy", policy, "--prompts", str(prompts),
                 "--max-new-tokens", "12", "--dtype", "fp32", "--out", str(out)]) == 0
    tr = load_trace(out)
    assert tr.complete and tr.header["draft"]["name"].startswith(spec.split(":")[0])
    assert tr.header["policy"]["spec"].startswith(policy.split(":")[0])
    assert all("drafter" in s["policy_fields"] for s in tr.steps)
    json.dumps(tr.steps[0]["policy_fields"])
    assert main(["decode", "--target", str(t), "--draft", spec, "--policy", "fixed:3", "--verifier", "rbv",
                 "--k", "2", "--prompts", str(prompts), "--out", str(tmp_path / "no.jsonl")]) == 2


def test_bench_cli_with_a_model_free_draft(model_dirs, tmp_path):
    from engine.__main__ import main

    t, _, prompts = model_dirs
    out = tmp_path / "bench.json"
    assert main(["bench", "--target", str(t), "--draft", "suffix:n=8", "--prompts", str(prompts),
                 "--per-category", "1", "--max-new-tokens", "10", "--configs", "ar;fixed:4;matchlen:1,offset=2",
                 "--temperatures", "0,0.7", "--warmup", "0", "--dtype", "fp32", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["complete"] and res["greedy_mismatches"] == [] and res["draft"].startswith("suffix")
    assert {r["config"] for r in res["runs"]} == {"ar", "fixed:4", "matchlen:1,offset=2"}
