"""llama.cpp's speculative statistics lines (engine.interop.llamastats): cumulative counters differenced
into requests, per-position counts recovered only where the printed rates pin them, totals-only runs
marked as such, and hostile variants refused in one line or imported with the file's own totals."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.interop import formats, llamastats
from engine.interop.diagnose import acceptance_lengths, diagnose, peer_metrics
from engine.interop.peer import PER_STEP, PeerError
from tests.peer_mutations import stats_mutants

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "peers" / "llamacpp-stats.log"
DATA = FIX.read_bytes()
LINE = ("statistics draft: #calls(b,g,a) = {b} {a} {a}, #gen drafts = {a}, #acc drafts = {ad}, #gen tokens = {gt}, "
        "#acc tokens = {at}, #mean acc len = {m:.2f}, #acc rate/pos = ({r})\n")


def line(b, a, ad, gt, at, rates):
    return LINE.format(b=b, a=a, ad=ad, gt=gt, at=at, m=1 + at / a, r=", ".join(f"{x:.3f}" for x in rates))


def test_detected_differenced_and_exact_per_position():
    assert formats.detect(DATA) == "llamacpp-stats"
    t = formats.loads_peer(DATA, FIX.name)
    reqs = {}
    for s in t.steps:
        reqs.setdefault(s["request_id"], []).append(s)
    # request 1: 52 calls, 104 drafted, 66 accepted; request 2: the difference 36 / 72 / 52
    assert [(len(v), sum(s["window"] for s in v), sum(s["accepted"] for s in v)) for v in reqs.values()] == \
        [(52, 104, 66), (36, 72, 52)]
    assert PER_STEP not in t.header["imported"]["lacks"]  # rates × calls pin every position's count
    pos = peer_metrics(t)["pooled"]["num_accepted_tokens_per_pos"]
    assert pos == [75, 43]  # 0.852 × 88, 0.489 × 88
    al = acceptance_lengths(t)
    assert al["per_request_mean"] == pytest.approx((1 + 66 / 52 + 1 + 52 / 36) / 2)
    assert al["token_weighted"] == pytest.approx(1 + 118 / 88)


def test_rates_that_do_not_pin_counts_leave_a_totals_only_run():
    # 3001 calls: a 3-decimal rate is ±1.5 calls, so the per-position counts are not known
    text = line(1, 3001, 2500, 6002, 4000, [2500 / 3001, 1500 / 3001])
    t = formats.loads_peer(text.encode(), "s.log")
    assert PER_STEP in t.header["imported"]["lacks"]
    m = peer_metrics(t)["pooled"]
    assert m["num_accepted_tokens_per_pos"] is None and m["acceptance_histogram"] is None  # never drawn as measured
    assert t.header["imported"]["per_position"]["rates"] == [0.833, 0.5]  # the engine's own, kept as printed
    assert "totals" in m["per_position_basis"]
    d = diagnose(t, 0.3)
    assert d["metrics"]["num_spec_steps"] == 3001


def test_a_restart_starts_counting_again():
    text = line(1, 10, 8, 20, 12, [0.8, 0.4]) + line(1, 5, 4, 10, 6, [0.8, 0.4])
    t = formats.loads_peer(text.encode(), "s.log")
    assert len({s["request_id"] for s in t.steps}) == 2 and len(t.steps) == 15
    assert any("restart" in n for n in t.header["imported"]["notes"])


@pytest.mark.parametrize("text, field", [
    (line(1, 10, 8, 20, 12, [0.8, 0.4]).replace("2.20", "2.90"), "#mean acc len"),
    (line(1, 10, 8, 20, 12, [0.8, 0.9]), "#acc rate/pos"),
    (line(1, 10, 8, 20, 25, [0.8, 0.4]), "#acc tokens"),
    (line(1, 10, 8, 20, 12, [0.8, 0.4]).split(", #gen tokens")[0] + "\n", "statistics"),
])
def test_inconsistent_lines_are_refused_naming_the_line_and_field(text, field):
    with pytest.raises(PeerError, match=rf"^s\.log: line 1: field '{field.replace('(', '[(]')}"):
        formats.loads_peer(text.encode(), "s.log")


def test_no_mutant_is_accepted_and_wrong():
    seen = {"refused": 0, "imported": 0}
    for label, name, data in stats_mutants(FIX.name, DATA):
        try:
            t = formats.loads_peer(data, name, "llamacpp-stats")
        except PeerError as e:
            assert "\n" not in str(e) and str(e).startswith(name), (label, e)
            seen["refused"] += 1
            continue
        rows = llamastats._parse(data.decode("utf-8-sig", errors="replace"), name)
        # the oracle: the steps add up to the counters of the lines, restarts included
        total, prev = {"a": 0, "gt": 0, "at": 0}, None
        for _, c in rows:
            if prev is not None and any(c[k] < prev[k] for k in llamastats.COUNTERS):
                prev = None
            for k in total:
                total[k] += c[k] - (prev[k] if prev else 0)
            prev = c
        assert len(t.steps) == total["a"], label
        assert sum(s["accepted"] for s in t.steps) == total["at"], label
        assert sum(s["window"] for s in t.steps) == total["gt"], label
        seen["imported"] += 1
    assert seen["refused"] > 30 and seen["imported"] >= 3, seen
