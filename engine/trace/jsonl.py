"""Reading a large JSONL trace fast: parse in small chunks and gather the step columns while hot.

Why: at 200k steps the loader's time went to touching objects, not to checking them. Parsing makes
~6M Python objects (~1.4 s with orjson on a small shared CPU); gathering the steps' fields into
columns afterwards walks all of them again once they have left the CPU cache (~2.5 s). Here each
chunk of ~64 KB of lines (~95 step lines) is cut from the file, parsed, and its steps are converted
to columns at once (engine.trace.chunks.StepChunks), while the chunk is still cached.

A chunk is parsed with one parser call: its lines joined into one JSON array with a marker string
between every two lines (`_joined`, which says why that gives exactly each line's own value, and
declines on any doubt). Lines are never all split out of the file at once: 137 MB of line copies
alive together cost page faults, and the next chunk reuses the memory of the last one's.

`read_jsonl` gives exactly what `engine.trace.parse.parse_jsonl` gives — the same records, warnings and
first error — plus the step columns when the file has the common clean shape. It never words an
error itself: on anything unexpected (a line that does not parse, a blank line, a deep value, an
over-long line) it hands the whole file to `parse_jsonl`, which names the first problem.

Depth: `parse_jsonl` counts brackets on every line. The columns already prove that a step's fields
are flat (numbers, lists of numbers, short strings), so here only the steps StepChunks marks as
`deep` (a non-empty policy_fields, keys beyond the writer's) and the other records are checked: by
the exact nesting walk of the parsed value (what the bracket count bounds from above), or by
`check_depth` where the line's bytes are at hand.
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import eq, not_
from typing import Any

from engine.trace.assemble import Lines
from engine.trace.model import Progress
from engine.trace.parse import _orjson, _refuse_binary, parse_jsonl
from engine.trace.check import MAX_DEPTH, MAX_LINE, TraceError, check_depth, depth
from engine.trace.chunks import StepChunks, _ChunkColumns

NL = b"\n"
REGION = 1 << 16  # bytes of lines per chunk (~95 step lines): their objects stay in cache between parsing and gathering
# Between two lines of a chunk's joined document: a marker element no backslash-free line can spell (_joined).
_SEP = b'\n,"\\b"\n,'
_MARK = "\b"


class _Fallback(Exception):
    """Something parse_jsonl must word; it re-reads the file from the start."""


def read_jsonl(data: bytes, name: str, warnings: list[str], progress: Progress | None = None, lazy: bool = False
               ) -> tuple[list[tuple[str, Any]] | Lines, list[int] | None, _ChunkColumns | None]:
    """(records as (location, value) pairs, record index of each step, the steps' columns); the last
    two are None when the steps are to be screened from their dicts. Same records, warnings and
    errors as `parse_jsonl`. `lazy`: the pairs as `engine.trace.assemble.Lines` (each made when read) where
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
    # The file's lines are data[:end].split(b"\n"), as parse_jsonl splits them (a final newline ends
    # the last line); they are cut out a chunk at a time, never all at once.
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    cut = None
    if end == len(data):
        k = data.rfind(b"\n")
        if data[k + 1:].strip():
            try:
                loads(data[k + 1:])
            except Exception:  # noqa: BLE001 - a run killed mid-line: parse_jsonl drops it with this warning
                cut = f"line {data.count(NL) + 1} is cut off (the run was killed while writing it); dropped"
                end = k
    if end <= 0:
        raise _Fallback  # nothing but a cut line, or an empty file: parse_jsonl says so
    n_lines = data.count(b"\n", 0, end) + 1 if progress is not None else 0
    recs: list[Any] = []  # the values; record i is line i + 1 (a blank line fell back above)
    steps_at: list[int] = []
    chunks: StepChunks | None = StepChunks()
    size = max(1, min(REGION, end // 40))  # a small file still reports progress ~40 times
    tick = max(1, end // 40)
    report, s = tick, 0
    while s < end:
        if progress is not None and s >= report:
            progress(0.8 * s / end, f"read {len(recs):,} of {n_lines:,} lines")
            report += tick
        e = data.find(b"\n", s + size, end)
        if e < 0:
            e = end
        start, region, s = s, data[s:e], e + 1
        vals = _joined(region, loads)
        block = None
        if vals is None:
            block = region.split(NL)
            if len(region) > MAX_LINE and max(map(len, block)) > MAX_LINE:
                raise _Fallback
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
            _depth(vals[j])
        if chunks is not None:
            first, d0 = chunks.n, len(chunks.deep)
            # No `true` / `false` on a step line: no JSON boolean hides among the ints (struct "q" takes bools).
            if ((b"true" in region or b"false" in region) and _bools(block or region.split(NL), at)) or \
                    not chunks.add(list(compress(vals, is_step))):
                chunks = None  # the dict screen takes over; the steps so far get their depth counted
                done = data[:start].split(NL) if steps_at else []
                for i in steps_at:
                    _depth(recs[i], done[i])
            else:
                for k in chunks.deep[d0:]:
                    _depth(vals[at[k - first]])
        if chunks is None and at:
            block = block or region.split(NL)
            for j in at:
                _depth(vals[j], block[j])
        steps_at += map(len(recs).__add__, at)
        recs += vals
    if cut is not None:
        warnings.append(cut)
    if chunks is None or not chunks.n:
        return Lines(name, recs), None, None
    return Lines(name, recs), steps_at, chunks.columns()


def _joined(region: bytes, loads) -> list | None:
    """The values of a chunk's lines, parsed as one document (one parser call per chunk instead of
    one per line); None (parse the lines one by one) on any doubt. The lines are joined into one JSON
    array with the marker string "\\b" (a backspace) as an element between every two.

    Why this is exact: a JSON string cannot hold a raw newline, so no string of one line runs into
    the next and each separator's marker is read as a string token of its own; and without a
    backslash in the chunk no line can spell the marker. So when the array holds the n lines' n - 1
    markers at every second place, each marker is an element of the top-level array, every line
    sits between two of that array's commas — a line that opened a bracket it did not close (or
    closed one it did not open, or held two values) would have moved a marker off the top level or
    off every second place — and each line is one whole JSON value, the one a parse of that line
    alone gives. Plain commas between the lines would not do: `[1` / `2]` / `3,4` pair up into three
    elements from three lines of which two are no JSON at all."""
    if len(region) > MAX_LINE or b"\\" in region:
        return None
    doc = b"[" + region.replace(NL, _SEP) + b"]"
    n = (len(doc) - len(region) - 2) // (len(_SEP) - 1) + 1  # lines: one more than the separators put in
    try:
        top = loads(doc)
    except Exception:  # noqa: BLE001 - some line is not JSON: the line-by-line parse finds which
        return None
    if len(top) != 2 * n - 1 or top[1::2].count(_MARK) != n - 1:
        return None
    return top[::2]


def _bools(block: list[bytes], at: list[int]) -> bool:
    raw = b"\n".join([block[j] for j in at])
    return b"true" in raw or b"false" in raw


def _depth(value: Any, raw: bytes | None = None) -> None:
    """Too deep: parse_jsonl words it, with the line. Without the line's bytes the exact walk runs
    at once (check_depth's bracket count is only a cheap upper bound of it)."""
    if raw is None:
        if depth(value) > MAX_DEPTH:
            raise _Fallback
        return
    try:
        check_depth(raw, value, "")
    except TraceError:
        raise _Fallback from None
