"""The bench's rows and tables (engine.bench.bench_report): ratio-of-means speedups, the wall split, the table."""

import pytest

from engine.bench.bench_report import aggregate, format_table
from engine.bench.runner import RunResult

COSTS = {"t_draft_ms": 10.0, "t_target_ms": {1: 100.0, 2: 110.0, 4: 130.0}}


def test_aggregate_ratio_of_means():
    rs = [RunResult("ar", 0.0, "qa", 1, 10, 1.0, 10), RunResult("ar", 0.0, "qa", 2, 10, 0.5, 10),
          RunResult("fixed:2", 0.0, "qa", 1, 10, 0.5, 4, 8, 6), RunResult("fixed:2", 0.0, "qa", 2, 10, 0.25, 5, 10, 5)]
    rows = {(r["task"], r["config"]): r for r in aggregate(rs)}
    f = rows[("overall", "fixed:2")]
    assert f["tokens_per_s"] == 30.0 and f["speedup_vs_ar"] == 2.0  # mean(20, 40) / mean(10, 20)
    assert f["mean_emitted_per_call_incl_bonus"] == 20 / 9 and f["draft_acceptance_rate"] == 11 / 18
    assert f["wasted_drafts"] == 18 - 11
    trim = aggregate(rs[:2] + [RunResult("confidence:0.5,trim=1", 0.0, "qa", 1, 10, 0.5, 8, 2, 1, dropped=6)])
    assert [r["wasted_drafts"] for r in trim if r["config"] != "ar"] == [1 + 6] * 2  # rejected + dropped


def test_rows_split_their_wall_time_into_prefill_and_draft_catch_up():
    """prefill_share = Σ prefill_s ÷ Σ wall_s; draft_catchup_share = Σ timed draft prefill ÷ Σ wall_s, or for runs
    that did not time it Σ draft-prefill tokens × t_prefill ÷ Σ wall_s (None without a probe); AR catches nothing up;
    the table shows both."""
    costs = {**COSTS, "t_draft_prefill_ms": 2.0, "c": 0.1, "verify_growth": {1: 1.0}}
    ar = RunResult("ar", 0.0, "rag", 1, 10, 4.0, 10, windows={0: 10}, prefill_s=1.0)
    fixed = RunResult("fixed:1", 0.0, "rag", 1, 10, 3.0, 5, drafted=5, accepted=5, draft_calls=5, windows={1: 5},
                      prefill_s=1.2, draft_prefill_tokens=300)
    rows = {r["config"]: r for r in aggregate([ar, fixed], costs) if r["task"] == "overall"}
    assert rows["ar"]["prefill_share"] == pytest.approx(0.25) and rows["ar"]["draft_catchup_share"] == 0.0
    assert rows["fixed:1"]["prefill_share"] == pytest.approx(0.4)
    assert rows["fixed:1"]["draft_catchup_share"] == pytest.approx(300 * 2.0 / 3000)
    assert aggregate([ar, fixed], COSTS)[1]["draft_catchup_share"] is None  # no prefill probe: unknown, not 0
    table = format_table({"rows": list(rows.values()), "costs": {**costs, "t_target_ms": {1: 100.0}},
                          "greedy_mismatches": []})
    assert "| 40 % · 20 % |" in table and "| 25 % · 0 % |" in table
    # runs that timed their catch-ups: the measured seconds, not the probe's price (which a short catch-up defeats)
    timed = RunResult("fixed:1", 0.0, "rag", 1, 10, 3.0, 5, drafted=5, accepted=5, draft_calls=5, windows={1: 5},
                      prefill_s=1.2, draft_prefill_tokens=300, draft_prefill_s=0.9)
    row = [r for r in aggregate([ar, timed], costs) if r["task"] == "overall" and r["config"] == "fixed:1"][0]
    assert row["draft_catchup_share"] == pytest.approx(0.9 / 3.0)
    assert [r for r in aggregate([ar, timed], COSTS) if r["config"] == "fixed:1"][0]["draft_catchup_share"] == \
        pytest.approx(0.3)  # no probe needed when timed
