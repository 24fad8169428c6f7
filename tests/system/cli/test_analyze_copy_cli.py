"""The copy-drafter step source (engine.offline.copy_source): replaying a model-free drafter over one
greedy autoregressive run through the one `walk` equals real decoding step for step — on the tiny
pair (real `decode` runs), on hand-made sequences with known A(j), and on the bundled Qwen traces of
one bench run (per-request target calls of lookup fixed:10 / matchlen and suffix matchlen)."""

import json
from tests.conftest import REPO

TRACES = REPO / "traces"


def test_analyze_copy_drafter_cli(tmp_path):
    from engine.__main__ import main

    out = tmp_path / "copy"
    paths = [str(TRACES / n) for n in ("qwen-modelfree-ar-t0.jsonl", "qwen-lookup-fixed-10-t0.jsonl",
                                        "qwen-lookup-matchlen-t0.jsonl", "qwen-suffix-matchlen-t0.jsonl")]
    assert main(["analyze", "--copy-drafter", "lookup:n=10,ngram=2", *paths, "--gammas", "1-3,10",
                 "--policies", "matchlen:1,offset=2,max=10;", "--out", str(out)]) == 0
    wt = {r["policy"]: r for r in json.loads((out / "window_table.json").read_text())["rows"] if r["task"] == "all"}
    assert not (out / "confidence_ceiling.json").exists() and not (out / "signals.json").exists()  # no confidence
    assert wt["fixed:10"]["target_calls"] == 271 and wt["matchlen:factor=1,offset=2,max=10"]["target_calls"] == 294
    assert wt["oracle:a"]["wasted_draft"] == 0 and wt["oracle:a"]["target_calls"] == 271
    ratio = json.loads((out / "oracle_ratio.json").read_text())["rows"]
    costs = {r["cost"] for r in ratio}
    assert any(c.startswith("in-run c=0") for c in costs) and "c=0 flat" in costs  # c = 0 for a copy drafter
    assert all(r["c"] == 0 and r["ratio_a"] >= 1 - 1e-9 and r["ratio_c"] >= r["ratio_a"] - 1e-9 for r in ratio)
