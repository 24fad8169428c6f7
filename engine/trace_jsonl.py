"""Reading a large JSONL trace fast: parse in small chunks and gather the step columns while hot.

Why: at 200k steps the loader's time went to touching objects, not to checking them. Parsing makes
~6M Python objects (~1.4 s with orjson on a small shared CPU); gathering the steps' fields into
columns afterwards walks all of them again once they have left the CPU cache (~2.5 s). Here each
chunk of a few hundred lines is parsed and its steps are converted to columns at once
(engine.trace_screen.StepChunks), while the chunk is still cached — about a third of the cost.

`read_jsonl` gives exactly what `engine.trace.parse_jsonl` gives — the same records, warnings and
first error — plus the step columns when the file has the common clean shape. It never words an
error itself: on anything unexpected (a line that does not parse, a blank line, a deep value, an
over-long line) it hands the whole file to `parse_jsonl`, which names the first problem.

Depth: `parse_jsonl` counts brackets on every line. The columns already prove that a step's fields
are flat (numbers, lists of numbers, short strings), so here only the steps StepChunks marks as
`deep` (a non-empty policy_fields, keys beyond the writer's) and the other records are counted.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import eq, not_
from typing import Any

from engine.trace import Lines, Progress, _orjson, _refuse_binary, parse_jsonl
from engine.trace_check import MAX_LINE, TraceError, check_depth
from engine.trace_screen import StepChunks, _ChunkColumns

CHUNK = 256  # lines per chunk: their objects (~1 MB) stay in cache between parsing and gathering


class _Fallback(Exception):
    """Something parse_jsonl must word; it re-reads the file from the start."""


def read_jsonl(data: bytes, name: str, warnings: list[str], progress: Progress | None = None, lazy: bool = False
               ) -> tuple[list[tuple[str, Any]] | Lines, list[int] | None, _ChunkColumns | None]:
    """(records as (location, value) pairs, record index of each step, the steps' columns); the last
    two are None when the steps are to be screened from their dicts. Same records, warnings and
    errors as `parse_jsonl`. `lazy`: the pairs as `engine.trace.Lines` (each made when read) where
    the fast reader produced them."""
    _refuse_binary(data, name)
    try:
        recs, steps_at, cols = _read(data, name, warnings, progress)
        return (recs if lazy else list(recs)), steps_at, cols
    except _Fallback:
        return parse_jsonl(data, name, warnings, progress), None, None


def _read(data: bytes, name: str, warnings: list[str], progress: Progress | None):
    if _orjson is None:
        raise _Fallback
    loads = _orjson.loads
    lines = data.split(b"\n")
    ends_clean = lines[-1] == b""
    if ends_clean:
        lines.pop()
    if not lines or (len(data) > MAX_LINE and max(map(len, lines)) > MAX_LINE):
        raise _Fallback
    cut = None
    if not ends_clean and lines[-1].strip():
        try:
            loads(lines[-1])
        except Exception:  # noqa: BLE001 - a run killed mid-line: parse_jsonl drops it with this warning
            cut = f"line {len(lines)} is cut off (the run was killed while writing it); dropped"
            lines.pop()
    n = len(lines)
    has_bool = b"true" in data or b"false" in data  # else no line needs looking at for booleans
    recs: list[Any] = []  # the values; record i is line i + 1 (a blank line fell back above)
    steps_at: list[int] = []
    chunks: StepChunks | None = StepChunks()
    size = max(1, min(CHUNK, n // 40))  # a small file still reports progress ~40 times
    tick, report = max(1, n // 40), max(1, n // 40)
    for a in range(0, n, size):
        if progress is not None and a >= report:
            progress(0.8 * a / n, f"read {a:,} of {n:,} lines")
            report += tick
        block = lines[a:a + size]
        try:
            vals = list(map(loads, block))  # a blank line fails here too: parse_jsonl skips it
        except Exception:  # noqa: BLE001
            raise _Fallback from None
        try:  # C-level when every value is an object (dict.get refuses anything else)
            is_step = list(map(eq, map(dict.get, vals, repeat("type")), repeat("step")))
        except TypeError:
            is_step = [type(v) is dict and v.get("type") == "step" for v in vals]
        at = list(compress(range(len(vals)), is_step))
        for j in compress(range(len(vals)), map(not_, is_step)):
            _depth(block[j], vals[j])
        if chunks is not None:
            first, d0 = chunks.n, len(chunks.deep)
            # No `true` / `false` on a step line: no JSON boolean hides among the ints (struct "q" takes bools).
            if (has_bool and _bools(block, at)) or not chunks.add(list(compress(vals, is_step))):
                chunks = None  # the dict screen takes over; the steps so far get their depth counted
                for i in steps_at:
                    _depth(lines[i], recs[i])
            else:
                for k in chunks.deep[d0:]:
                    j = at[k - first]
                    _depth(block[j], vals[j])
        if chunks is None:
            for j in at:
                _depth(block[j], vals[j])
        steps_at += map(len(recs).__add__, at)
        recs += vals
    if cut is not None:
        warnings.append(cut)
    if chunks is None or not chunks.n:
        return Lines(name, recs), None, None
    return Lines(name, recs), steps_at, chunks.columns()


def _bools(block: list[bytes], at: list[int]) -> bool:
    raw = b"\n".join([block[j] for j in at])
    return b"true" in raw or b"false" in raw


def _depth(raw: bytes, value: Any) -> None:
    try:
        check_depth(raw, value, "")  # too deep: parse_jsonl words it, with the line
    except TraceError:
        raise _Fallback from None
