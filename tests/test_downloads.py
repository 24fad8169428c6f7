"""Downloads and exports without a browser: Perfetto step timings (engine.trace.perfetto and the export CLI),
trace Parquet bytes that load back, and table CSV bytes that read back as the same table
(app.downloads). Runs on the bundled traces in traces/; no torch."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

from app import data, downloads
from engine.trace.perfetto import TRACKS, to_perfetto
from engine.trace.format import load_trace, loads_trace

REPO = Path(__file__).resolve().parent.parent
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


def test_export_cli_picks_the_format_by_suffix(tmp_path, capsys):
    from engine.__main__ import main

    src = REPO / "traces" / "demo-tiny-fixed2.jsonl"
    out = tmp_path / "run.perfetto.json"
    assert main(["export", str(src), str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(json.dumps(to_perfetto(load_trace(src))))
    pq = tmp_path / "run.parquet"
    assert main(["export", str(src), str(pq)]) == 0 and load_trace(pq).steps == load_trace(src).steps
    assert main(["export", str(src), str(tmp_path / "run.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: run.txt: export writes Parquet (.parquet)")
    assert main(["export", str(tmp_path / "missing.jsonl"), str(out)]) == 2
    assert "no such trace file" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["demo-tiny-heuristic.jsonl", "demo-tiny-rbv-k3-t07.jsonl"])
def test_parquet_bytes_load_back_as_the_same_trace(name):
    trace = load_trace(REPO / "traces" / name)
    back = loads_trace(downloads.parquet_bytes(trace), name="x.parquet")
    assert back.header == trace.header and back.requests == trace.requests and back.ends == trace.ends
    assert back.steps == trace.steps and back.footer == trace.footer
    assert back.summary == trace.summary


def test_parquet_bytes_of_an_interrupted_trace(tmp_path):
    lines = (REPO / "traces" / "demo-tiny-fixed4.jsonl").read_bytes().split(b"\n")
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"\n".join(ln for ln in lines if b'"type": "footer"' not in ln))
    trace = load_trace(cut)
    back = loads_trace(downloads.parquet_bytes(trace), name="cut.parquet")
    assert not back.complete and back.steps == trace.steps


def test_csv_bytes_read_back_as_the_same_table():
    trace = load_trace(REPO / "traces" / "demo-tiny-fixed4.jsonl")
    e = data.make_entry("x", "bundled", trace)
    for table in (e.steps, e.positions, data.requests_frame(trace, e.steps).drop(columns=["prompt_ids"])):
        back = pd.read_csv(io.BytesIO(downloads.csv_bytes(table)), keep_default_na=False, na_values=[""])
        pd.testing.assert_frame_equal(back, table.reset_index(drop=True), check_dtype=False, check_exact=False,
                                      rtol=1e-12)
    # List cells (token ids) travel as JSON text.
    req = data.requests_frame(trace, e.steps)
    back = pd.read_csv(io.BytesIO(downloads.csv_bytes(req)))
    assert back["prompt_ids"].map(json.loads).tolist() == req["prompt_ids"].tolist()


def test_stem_makes_safe_file_names():
    assert downloads.stem("uploaded: my run.jsonl") == "uploaded-my-run"
    assert downloads.stem("live: live-A-fixed_4.jsonl") == "live-live-A-fixed_4"
    assert downloads.stem("a/b/c.parquet") == "c"
    assert downloads.stem(":::") == "trace"
