"""Downloads and exports without a browser: Perfetto step timings (engine.trace.perfetto and the export CLI),
trace Parquet bytes that load back, and table CSV bytes that read back as the same table
(app.downloads). Runs on the bundled traces in traces/; no torch."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from app import downloads, frames
from engine.trace.format import load_trace, loads_trace
from tests.conftest import REPO



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
    e = frames.make_entry("x", "bundled", trace)
    for table in (e.steps, e.positions, frames.requests_frame(trace, e.steps).drop(columns=["prompt_ids"])):
        back = pd.read_csv(io.BytesIO(downloads.csv_bytes(table)), keep_default_na=False, na_values=[""])
        pd.testing.assert_frame_equal(back, table.reset_index(drop=True), check_dtype=False, check_exact=False,
                                      rtol=1e-12)
    # List cells (token ids) travel as JSON text.
    req = frames.requests_frame(trace, e.steps)
    back = pd.read_csv(io.BytesIO(downloads.csv_bytes(req)))
    assert back["prompt_ids"].map(json.loads).tolist() == req["prompt_ids"].tolist()


def test_stem_makes_safe_file_names():
    assert downloads.stem("uploaded: my run.jsonl") == "uploaded-my-run"
    assert downloads.stem("live: live-A-fixed_4.jsonl") == "live-live-A-fixed_4"
    assert downloads.stem("a/b/c.parquet") == "c"
    assert downloads.stem(":::") == "trace"


def test_a_linked_speedup_is_its_figure_in_the_csv():
    """A table cell shown as a link to its Speedups row (reconcile.figure_link) downloads as the figure."""
    from app import reconcile

    df = pd.DataFrame({"run": ["a", "b"], "×AR": [reconcile.figure_link("p", "r1", 1.104), None]})
    text = downloads.csv_bytes(df).decode()
    assert text.splitlines()[1:] == ["a,1.1", "b,"] and "speedups?" not in text
