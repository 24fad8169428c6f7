"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import re
from pathlib import Path
import pytest
from streamlit.testing.v1 import AppTest

from app import traces
from tests.conftest import MAIN, REPO, TIMEOUT
from tests.system.app.conftest import goto


def broken_trace(trace_dir: Path) -> tuple[bytes, int]:
    """A valid trace with one step's `accepted` pushed past its window; returns (bytes, 1-based line)."""
    lines = (trace_dir / "demo-tiny-fixed4.jsonl").read_bytes().split(b"\n")
    i = next(k for k, ln in enumerate(lines) if b'"type": "step"' in ln)
    lines[i] = re.sub(rb'"accepted": \d+', b'"accepted": 99', lines[i], count=1)
    return b"\n".join(lines), i + 1


def test_malformed_upload_shows_one_line_error_and_nothing_else_breaks(app, trace_dir):
    at = goto(app, "upload")
    raw, line = broken_trace(trace_dir)
    at.file_uploader(key="upload_files").set_value(("broken.jsonl", raw, "application/json")).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].startswith(f"broken.jsonl: line {line}: field 'accepted'")
    good = (trace_dir / "demo-tiny-heuristic.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(
        [("broken.jsonl", raw, "application/json"), ("mine.jsonl", good, "application/json")]).run()
    assert any("mine.jsonl" in s.value for s in at.success)
    for page in ("overview", "replay", "compare"):  # the upload is visible everywhere, the bad file nowhere
        goto(at, page)
    goto(at, "replay")  # its options read "title · label"
    assert any(o.endswith(" · uploaded: mine.jsonl") for o in at.selectbox(key="replay_trace").options)
    assert not any("broken" in o for o in at.selectbox(key="replay_trace").options)


def test_parquet_upload(app, trace_dir, tmp_path):
    from engine.trace.format import load_trace, to_parquet

    pq = tmp_path / "t.parquet"
    to_parquet(load_trace(trace_dir / "demo-tiny-fixed2.jsonl"), pq)
    at = goto(app, "upload")
    at.file_uploader(key="upload_files").set_value(("t.parquet", pq.read_bytes(), "application/octet-stream")).run()
    assert not at.error and any("t.parquet" in s.value for s in at.success)
    at.file_uploader(key="upload_files").set_value(("junk.parquet", b"not parquet", "application/octet-stream")).run()
    assert len(at.error) == 1 and at.error[0].value.startswith("junk.parquet: not a readable Parquet file")


def test_reference_upload_reaches_windows(app, trace_dir):
    at = goto(app, "upload")
    ref = (trace_dir / "demo-tiny-reference.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(("my-ref.jsonl", ref, "application/json")).run()
    assert not at.error and any("1 reference runs" in m.value for m in at.subheader)
    bad = ref.replace(b'"mode": "greedy"', b'"mode": "fast"', 1)
    at.file_uploader(key="upload_files").set_value(("bad-ref.jsonl", bad, "application/json")).run()
    assert len(at.error) == 1 and at.error[0].value.startswith("bad-ref.jsonl: line 1")
    at = goto(at, "windows")
    assert "uploaded: my-ref.jsonl" in at.multiselect(key="win_refs").options


# ---------------------------------------------------------------- pure helpers


def test_add_trace_bytes_limits(monkeypatch):
    monkeypatch.setattr(traces, "MAX_UPLOAD_MB", 0)
    label, err = traces.add_trace_bytes("x.jsonl", b"{}")
    assert label is None and "exceeds the 0 MB upload limit" in err
    monkeypatch.setattr(traces, "MAX_UPLOAD_MB", 50)
    assert "expected a .jsonl or .parquet" in traces.add_trace_bytes("x.csv", b"a,b")[1]
    cfg = (REPO / ".streamlit" / "config.toml").read_text()
    # the server takes in more than the limit, so an over-limit file reaches the page and is refused in text
    assert f"maxUploadSize = {traces.RECEIVE_MB}" in cfg and traces.RECEIVE_MB > traces.MAX_UPLOAD_MB
