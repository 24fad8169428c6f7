"""Bytes → Trace: the entry points that load a JSONL or Parquet trace from a file or an upload
(`engine.trace.format` names them too).

The steps: bytes → records (engine/trace/parse.py; for the common clean JSONL shape, step columns
via engine/trace/jsonl.py; Parquet via engine/trace/parquet.py), then records → Trace
(engine/trace/assemble.py). It only parses JSON (or Parquet columns) — it never executes or unpickles
anything.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from engine.trace.assemble import build_trace
from engine.trace.check import TraceError
from engine.trace.model import Progress, Trace
from engine.trace.parse import _resume_gc
from engine.trace.screen import screen_steps


def load_trace(path: str | os.PathLike, progress: Progress | None = None) -> Trace:
    """Load and validate a JSONL or Parquet trace; raises TraceError with a one-line message that
    names the file (never its directory), the line or row, and the field."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p.name}: no such trace file")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise TraceError(f"{p.name}: cannot read ({e.strerror or e})") from None
    t = loads_trace(data, p.name, progress=progress)
    t.source = str(p)
    return t


def loads_trace(data: bytes, name: str = "upload.jsonl", progress: Progress | None = None) -> Trace:
    """Load from bytes (app uploads): same validation as `load_trace`. Parquet is recognised by its
    magic bytes, whatever the name says. JSONL steps arrive as columns from engine.trace.jsonl when
    the file has the common clean shape; a flagged step, or any other shape, is screened from its
    dict, so the first error is worded by the same rules either way."""
    name = Path(name).name
    if data[:4] == b"PAR1" or (name.endswith(".parquet") and not data.startswith(b"{")):
        t = _load_parquet(data, name)
    else:
        from engine.trace.jsonl import read_jsonl

        warnings: list[str] = []
        was = gc.isenabled()
        gc.disable()
        try:
            recs, steps_at, cols = read_jsonl(data, name, warnings, progress, lazy=True)
            if progress is not None:
                progress(0.85, f"checking {len(recs):,} records")
            screened = None
            if cols is not None and steps_at:
                j, screened = screen_steps(cols)
                screened = None if j is not None else screened  # the dict screen names the flagged step
            t = build_trace(recs, source=name, screened=screened, steps_at=steps_at if screened else None)
        finally:
            _resume_gc(was)
        t.warnings[:0] = warnings
    t.source = name
    if progress is not None:
        progress(1.0, f"{len(t.steps):,} steps")
    return t



def _load_parquet(data: bytes, name: str) -> Trace:
    from engine.trace.parquet import load_parquet

    return load_parquet(data, name)
