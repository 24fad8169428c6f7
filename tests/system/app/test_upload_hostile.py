"""Hostile uploads through the app (AppTest): one-line errors that name the file only, random bytes
called binary, a killed run's file shown as a yellow warning saying what was kept, a clear size
limit, progress while parsing — and fuzzed traces that the loader accepts render on every page."""

from __future__ import annotations

import json
import random

import pytest
from streamlit.testing.v1 import AppTest

from app import site_map, traces
from engine.trace.format import TraceError, loads_trace
from engine.trace.loadbench import synthetic_records
from tests.conftest import MAIN, TIMEOUT
from tests.trace_mutations import POOL, mutate


def trace_bytes(n_steps: int = 12, per_request: int = 4) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in synthetic_records(n_steps, per_request)).encode()


@pytest.fixture()
def app(tmp_path, monkeypatch):
    d = tmp_path / "traces"
    d.mkdir()
    (d / "small.jsonl").write_bytes(trace_bytes())
    monkeypatch.setenv(traces.TRACES_ENV, str(d))
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    assert not at.exception
    at.switch_page(site_map.file("upload")).run()
    return at


def upload(at: AppTest, *files: tuple[str, bytes]) -> AppTest:
    at.file_uploader(key="upload_files").set_value([(n, b, "application/octet-stream") for n, b in files]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_random_bytes_are_called_binary(app):
    noise = random.Random(0).randbytes(4096)
    at = upload(app, ("noise.jsonl", noise), ("noise.parquet", noise))
    assert [e.value for e in at.error] == ["noise.jsonl: not a JSONL or Parquet trace (binary data)",
                                           "noise.parquet: not a JSONL or Parquet trace (binary data)"]


def test_errors_name_the_file_never_a_server_path(app):
    """Uploads used to go through a temporary file whose full path leaked into some messages."""
    at = upload(app, ("empty.jsonl", b""), ("half.jsonl", trace_bytes()[:40]))
    msgs = [e.value for e in at.error]
    assert msgs[0] == "empty.jsonl: empty file (no header)"
    assert len(msgs) == 2 and all("/" not in m and "\n" not in m for m in msgs), msgs


def test_killed_run_is_a_yellow_warning_saying_what_was_kept(app):
    raw = trace_bytes()
    lines = raw.split(b"\n")
    cut = b"\n".join(lines[:9]) + b"\n" + lines[9][:30]  # header, request, 4 steps, end, request, 1 step, half a line
    at = upload(app, ("killed.jsonl", cut))
    assert not at.error and not at.success
    (w,) = [w.value for w in at.warning]
    assert w.startswith("**killed.jsonl** is from an interrupted run: kept 5 verify steps of 2 prompts (1 finished)")
    assert "Line 10 is cut off" in w


def test_a_file_over_the_limit_is_refused_on_the_page_in_text(app, monkeypatch):
    """The uploader takes in more than the limit (traces.RECEIVE_MB), so a file over it reaches the page and
    is refused with a visible line saying how to shrink it, not by the browser with a tooltip on a chip."""
    monkeypatch.setattr(traces, "MAX_UPLOAD_MB", 1)
    big = trace_bytes(2000, 200)
    at = upload(app, ("big.jsonl", big))
    assert [e.value for e in at.error] == [traces.size_message("big.jsonl", len(big))] and not at.success
    assert "uploaded: big.jsonl" not in traces.uploads()
    assert at.get("file_uploader")[0].proto.max_upload_size_mb == traces.RECEIVE_MB > 1


def test_size_limit_message(monkeypatch):
    """Every path (the Upload page, AppTest, the Live page's own traces) reaches add_trace_bytes, which says
    how to get under the limit."""
    monkeypatch.setattr(traces, "MAX_UPLOAD_MB", 1)
    big = trace_bytes(2000, 200)
    assert len(big) > 1 << 20
    label, msg = traces.add_trace_bytes("/srv/tmp/big.jsonl", big)
    assert label is None
    assert msg.startswith(f"big.jsonl: {len(big) / 1e6:.1f} MB exceeds the 1 MB upload limit; convert it to Parquet")
    assert "python -m engine export big.jsonl big.parquet" in msg


def test_progress_is_reported_while_parsing_and_cleared_after(app):
    seen: list[tuple[float, str]] = []
    t = loads_trace(trace_bytes(400, 100), "p.jsonl", progress=lambda f, text: seen.append((f, text)))
    fracs = [f for f, _ in seen]
    assert len(t.steps) == 400 and fracs == sorted(fracs) and fracs[-1] == 1.0 and len(fracs) > 10
    at = upload(app, ("p.jsonl", trace_bytes(400, 100)))
    assert any("p.jsonl" in s.value for s in at.success) and not at.get("progress")  # the bar is gone


def accepted_mutants(n: int, seed: int = 7, kinds=("delete", "set", "set_elem", "dup", "swap", "drop")
                     ) -> list[bytes]:
    """The first n distinct random mutations (same vocabulary as the fuzz test) that the loader accepts."""
    rng, out = random.Random(seed), []

    def op():
        k, a, b, c = rng.choice(kinds), *(rng.randrange(10_000) for _ in range(3))
        p = rng.randrange(len(POOL))
        return {"delete": (k, a, b), "set": (k, a, b, p), "set_elem": (k, a, b, c, p), "dup": (k, a, b),
                "swap": (k, a, b), "drop": (k, a), "cut": (k, rng.random())}[k]

    while len(out) < n:
        ops = [op() for _ in range(rng.randint(1, 2))]
        raw = mutate(ops)
        try:
            loads_trace(raw, "m.jsonl")
        except TraceError:
            continue
        if raw not in out:
            out.append(raw)
    return out


def test_fuzzed_traces_that_load_render_on_every_page(app):
    mutants = accepted_mutants(4) + accepted_mutants(1, kinds=("cut",))  # field edits, and a killed run
    at = upload(app, *[(f"m{i}.jsonl", raw) for i, raw in enumerate(mutants)])
    assert not at.error
    for page in ("overview", "compare", "upload", "windows", "sweeps", "dpace", "audit"):  # Live: its own runs
        at.switch_page(site_map.file(page)).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    at.switch_page(site_map.file("replay")).run()
    for i in range(len(mutants)):
        at.session_state["replay_trace"] = f"uploaded: m{i}.jsonl"
        at.run()
        assert not at.exception, (i, [e.value for e in at.exception])
