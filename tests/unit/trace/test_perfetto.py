"""Downloads and exports without a browser: Perfetto step timings (engine.trace.perfetto and the export CLI),
trace Parquet bytes that load back, and table CSV bytes that read back as the same table
(app.downloads). Runs on the bundled traces in traces/; no torch."""

from __future__ import annotations
import json
import pytest
from engine.trace.perfetto import TRACKS, to_perfetto
from engine.trace.format import load_trace
from tests.conftest import REPO

BUNDLED = ["demo-tiny-fixed4.jsonl", "demo-tiny-heuristic.jsonl", "demo-tiny-rbv-k3-t07.jsonl"]


def complete_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


@pytest.mark.parametrize("name", BUNDLED)
def test_perfetto_has_one_draft_and_one_verify_event_per_step(name):
    trace = load_trace(REPO / "traces" / name)
    doc = json.loads(json.dumps(to_perfetto(trace)))  # what a viewer reads: plain JSON
    events = complete_events(doc)
    for phase in ("draft", "verify"):
        evs = [e for e in events if e["name"] == phase]
        assert len(evs) == len(trace.steps)
        assert {e["tid"] for e in evs} == {TRACKS[phase]}  # one track per phase
        got = {(e["pid"], e["args"]["step"]): e for e in evs}
        assert len(got) == len(trace.steps)  # exactly one event per (request, step)
        for s in trace.steps:
            e = got[(s["request_id"], s["step"])]
            assert e["dur"] == pytest.approx(s[f"t_{phase}_ms"] * 1000, rel=1e-12, abs=1e-9)  # ms → µs
            assert e["args"]["window"] == s["window"] and e["args"]["accepted"] == s["accepted"]
    # Per track (pid, tid): start times follow the step order and events never overlap.
    tracks: dict[tuple[int, int], list[dict]] = {}
    for e in events:
        tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for (pid, tid), evs in tracks.items():
        if tid == TRACKS["prefill"]:
            continue
        steps = [e["args"]["step"] for e in evs]
        assert steps == sorted(steps) == list(range(len(evs)))
        for a, b in zip(evs, evs[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 1e-6
    # Draft then verify within a step; every request gets its own process.
    for e_d, e_v in zip((e for e in events if e["name"] == "draft"), (e for e in events if e["name"] == "verify")):
        assert e_v["ts"] == pytest.approx(e_d["ts"] + e_d["dur"]) and e_v["pid"] == e_d["pid"]
    assert {e["pid"] for e in events} == set(trace.requests)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names[(0, TRACKS["draft"])] == "draft" and names[(0, TRACKS["verify"])] == "verify"
