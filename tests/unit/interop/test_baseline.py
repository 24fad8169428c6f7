"""×AR against an imported AR baseline and "why is acceptance low" (engine.interop.baseline), on the committed
AIPerf and vLLM fixtures: the figure follows the files' timings on a stated basis, a baseline that drafted
or comes from another engine is refused in one line, and totals-only runs get no per-step figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.interop import baseline, formats
from engine.interop.baseline import BaselineError, first_rejection, times_ar, why_low
from tests.aiperf_runs import ar_of

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
AIPERF = (FIX / "aiperf-vllm-k3.jsonl").read_bytes()


def test_times_ar_from_the_files_wall_times():
    run = formats.loads_peer(AIPERF, "run.jsonl")
    ar = formats.loads_peer(ar_of(AIPERF, 2.5), "ar.jsonl")
    x = times_ar(run, ar, "ar.jsonl")
    assert x["basis"] == "wall" and x["x_ar"] == pytest.approx(2.5)
    assert x["shared"]["requests"] == 4 and x["shared"]["x_ar"] == pytest.approx(2.5)
    assert "concurrency" in x["basis_text"]  # the basis is stated with the figure


def test_a_baseline_that_drafted_or_is_another_engine_is_refused():
    run = formats.loads_peer(AIPERF, "run.jsonl")
    with pytest.raises(BaselineError, match=r"^run2\.jsonl: not an autoregressive run \(\d+ steps drafted\)"):
        times_ar(run, formats.loads_peer(AIPERF, "run2.jsonl"), "run2.jsonl")
    ll = formats.loads_peer((FIX / "llamacpp-ar.jsonl").read_bytes(), "ll.jsonl")
    with pytest.raises(BaselineError, match="the baseline must be the same engine"):
        times_ar(run, ll, "ll.jsonl")


def test_no_timings_no_figure_and_the_reason():
    recs = [json.loads(x) for x in AIPERF.decode().splitlines()]
    for r in recs:
        r["metrics"] = {k: v for k, v in r["metrics"].items() if k not in ("request_latency", "time_to_first_token")}
    bare = ("\n".join(map(json.dumps, recs)) + "\n").encode()
    x = times_ar(formats.loads_peer(bare, "run.jsonl"), formats.loads_peer(ar_of(AIPERF, 2.0), "ar.jsonl"), "ar.jsonl")
    assert x["x_ar"] is None and "no timings in the run" in x["why_none"]


def test_first_rejection_and_position_drop_follow_the_per_step_counts():
    t = formats.loads_peer(AIPERF, "run.jsonl")
    fr = first_rejection(t)
    spec = [s for s in t.steps if s["window"]]
    want_all = sum(1 for s in spec if s["accepted"] == s["window"]) / len(spec)
    assert fr["shares"]["all"] == pytest.approx(want_all)
    assert fr["shares"]["1"] == pytest.approx(sum(1 for s in spec if s["accepted"] == 0) / len(spec))
    assert sum(fr["shares"].values()) == pytest.approx(1.0)
    pp = why_low(t)["per_position"]
    assert pp["rates"][0] == pytest.approx(1 - fr["shares"]["1"])


def test_by_task_lowest_first_when_the_file_has_categories():
    recs = [json.loads(x) for x in AIPERF.decode().splitlines()]
    for i, r in enumerate(recs):
        r["metadata"]["category"] = "coding" if i % 2 else "rag"
    t = formats.loads_peer(("\n".join(map(json.dumps, recs)) + "\n").encode(), "cat.jsonl")
    rows = baseline.by_task(t)
    assert {r["task"] for r in rows} == {"coding", "rag"}
    assert rows[0]["token_weighted_acceptance_length"] <= rows[1]["token_weighted_acceptance_length"]
    assert sum(r["steps"] for r in rows) == sum(1 for s in t.steps if s["window"])
    assert baseline.by_task(formats.loads_peer(AIPERF, "run.jsonl")) == []  # no labels: no table


def test_totals_only_runs_get_no_per_step_figures():
    t = formats.loads_peer((FIX / "llamacpp-speculative-simple-k4.log").read_bytes(), "ll.log")
    w = why_low(t)
    assert w["first_rejection"]["shares"] is None and "totals only" in w["first_rejection"]["why"]
    assert w["per_position"]["rates"] is None
    assert any("first rejection: —" in x for x in baseline.format_why(w))


def test_windows_split_from_totals_give_no_first_rejection():
    t = formats.loads_peer((FIX / "llamacpp-draft-k4.jsonl").read_bytes(), "ll.jsonl")  # exact histogram, no windows
    fr = first_rejection(t)
    assert fr["shares"] is None and "windows not known" in fr["why"]
    assert why_low(t)["per_position"]["rates"] is not None  # the per-position counts are the server's own
