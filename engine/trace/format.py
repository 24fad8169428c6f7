"""Trace format v1: one JSONL file per run (schema in docs/trace-format.md).

    {"type": "header", "schema": "speclab.trace", "version": 1, ...}     run configuration
    {"type": "request", "request_id": 0, "prompt_ids": [...], ...}         one per prompt
    {"type": "step", "request_id": 0, "step": 0, ...}                      one per verify call
    {"type": "request_end", "request_id": 0, "output_ids": [...], ...}     one per finished prompt
    {"type": "footer", "summary": {...}}                                   written on a clean finish

This is the only module that knows the on-disk form of a StepRecord, and the public face of the
trace package: write (TraceWriter), summarise, load (load_trace / loads_trace) and convert
(to_parquet) are all reached from here. Records are flushed one line at a time, so a killed run
leaves a loadable file (no footer; the loader says so); a write that fails (disk full, permissions)
stops the writer with one line, and what was flushed still loads. The loader only parses JSON (or
Parquet columns) — it never executes or unpickles anything — recomputes every derived field, and
rejects malformed input with one line naming the file, line and field.

Where the rest lives (each imported here, none importing this module: the package has no import
cycle): the Trace object engine/trace/model.py; loading engine/trace/read.py, which turns bytes into
records (engine/trace/parse.py; fast JSONL engine/trace/jsonl.py; Parquet engine/trace/parquet.py)
and records into a Trace (engine/trace/assemble.py); the per-record rules engine/trace/check.py and
their column-wise form engine/trace/screen.py.

Counting convention: `accepted` excludes the bonus/correction token, `emitted` includes it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from engine.metrics import summarize_steps
from engine.trace.check import (LACKABLE, MAX_DEPTH, MAX_LINE, MAX_NEW_TOKENS, MAX_WINDOW,  # noqa: F401 (re-exported)
                                SCHEMA, TOKEN_MAX, VERSION, TraceError)
from engine.trace.model import Progress, Trace  # noqa: F401 (re-exported)
from engine.trace.parquet import to_parquet  # noqa: F401 (re-exported)
from engine.trace.read import load_trace, loads_trace  # noqa: F401 (re-exported)


class TraceWriteError(ValueError):
    """The trace could not be written (disk full, permissions); one line. What was flushed before
    the failure loads as an interrupted run."""


# ------------------------------------------------------------------ writing


def step_to_dict(rec) -> dict[str, Any]:
    d = asdict(rec)
    d.pop("shadow", None)  # paired-verification results (engine.verify.shadow) are bench data, not trace format v1
    d["type"] = "step"
    d["window"] = len(rec.draft_tokens)
    d["emitted"] = len(rec.emitted_tokens)
    for k in ("t_draft_ms", "t_verify_ms", "t_prefill_ms", "t_rule_ms"):
        d[k] = round(d[k], 4)
    for k in ("q_draft", "p_target", "accept_probs", "draft_entropy"):
        d[k] = [round(float(x), 7) for x in d[k]]
    return d


def request_record(request_id: int, prompt_ids: list[int], prompt_text: str = "", category: str = "",
                   question_id: Any = None, **extra: Any) -> dict[str, Any]:
    """A request's opening record (before its steps): the one place its shape is written."""
    return {"type": "request", "request_id": request_id, "prompt_ids": list(prompt_ids), "prompt_text": prompt_text,
            "category": category, "question_id": question_id, **extra}


def request_end_record(request_id: int, output_ids: list[int], finished: str | None, wall_ms: float | None,
                       output_text: str = "", new_tokens: int | None | str = "count", **extra: Any) -> dict[str, Any]:
    """A request's closing record. `wall_ms`: wall-clock ms spent decoding it (None: unknown), never a
    sum of step times. `new_tokens` counts `output_ids` unless given (None: omitted, for imports whose
    output ids are unknown)."""
    d = {"type": "request_end", "request_id": request_id, "output_ids": list(output_ids), "output_text": output_text,
         "finished": finished}
    if new_tokens is not None:
        d["new_tokens"] = len(output_ids) if new_tokens == "count" else new_tokens
    return {**d, "wall_ms": wall_ms, **extra}


class TraceWriter:
    """Append records to a JSONL trace, flushing each line. Use as a context manager."""

    def __init__(self, path: str | os.PathLike, header: dict[str, Any]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "w", encoding="utf-8")
        except OSError as e:
            raise TraceWriteError(f"cannot write trace {self.path}: {e.strerror or e}") from None
        self._steps: list[dict] = []
        self._ends: list[dict] = []
        self.summary: dict[str, Any] | None = None
        self.write({"type": "header", "schema": SCHEMA, "version": VERSION, **header})

    def write(self, record: dict[str, Any]) -> None:
        # One write() per full line keeps a crash from leaving half a record in most cases.
        line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
        try:
            self._f.write(line)
            self._f.flush()
        except OSError as e:
            # Disk full / revoked permission: stop writing for good, so no later record lands after a
            # half-written one; the loader keeps everything up to the last complete line.
            try:
                self._f.close()
            except OSError:
                pass
            raise TraceWriteError(f"cannot write trace {self.path.name}: {e.strerror or e}; the trace up to its "
                                  f"last complete line still loads (as an interrupted run)") from None
        if record["type"] == "step":
            self._steps.append(record)
        elif record["type"] == "request_end":
            self._ends.append(record)

    def step(self, rec) -> dict[str, Any]:
        d = step_to_dict(rec)
        self.write(d)
        return d

    def request(self, request_id: int, prompt_ids: list[int], prompt_text: str = "", category: str = "",
                question_id: Any = None, **extra: Any) -> None:
        self.write(request_record(request_id, prompt_ids, prompt_text, category, question_id, **extra))

    def request_end(self, request_id: int, output_ids: list[int], finished: str | None, wall_ms: float | None,
                    output_text: str = "", **extra: Any) -> None:
        """`wall_ms`: wall-clock ms spent decoding the request (rounded to µs), never a sum of step times."""
        self.write(request_end_record(request_id, output_ids, finished,
                                      None if wall_ms is None else round(wall_ms, 3), output_text, **extra))

    def close(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        summary = summarize(self._steps, self._ends)
        self.write({"type": "footer", "summary": summary, **(extra or {})})
        self.summary = summary
        self._f.close()
        return summary

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            self.close()
        elif not self._f.closed:  # interrupted: leave the file without a footer, as a killed run would
            try:
                self._f.close()
            except OSError:  # the flush of a full disk: the lines before it are already on disk
                pass


# ------------------------------------------------------------------ summary


def summarize(steps: list[dict], ends: list[dict] | None = None) -> dict[str, Any]:
    """Run summary from step dicts: the one summary, engine.metrics (its names are the one metric
    vocabulary; every count says whether it includes the bonus token)."""
    return summarize_steps(steps, len(ends or []))

