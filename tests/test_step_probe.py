"""The step probe times every condition on real (tiny) models and leaves both caches empty."""

import pytest

from engine.step_probe import KS, probe


def test_probe_reports_every_condition(pair):
    target, draft = pair
    res = probe(target, draft, [3, 17, 5, 9, 11, 2], [4, 8, 15, 16, 23], repeats=2)
    names = {r["condition"] for r in res["rows"]}
    assert names == ({f"{c} k={k}" for c in ("alone/repeat", "alone/distinct", "after-draft") for k in KS}
                     | {"draft alone", "draft-after-target"})
    assert all(r["median_ms"] > 0 and r["n"] >= 2 for r in res["rows"])
    assert {r["ratio"] for r in res["rows"] if r["condition"].startswith("alone/repeat")} == {1.0}
    assert target.length == 0 and draft.length == 0


def test_probe_needs_enough_distinct_tokens(pair):
    with pytest.raises(ValueError, match="at least"):
        probe(*pair, [3, 17, 5], [4, 8], repeats=1)
