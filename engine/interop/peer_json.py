"""Reading a serving engine's report as JSON that can be trusted: the hardened layer under every peer importer.

A report is JSONL, or one JSON list (or object), as saved API responses come. What is refused, each with one
line naming the file, the line or record, and the field: NaN, Infinity and literals that overflow to them
(1e400), nesting deeper than engine.trace.check allows (5,000-deep keys once crashed the parser), lone
surrogate escapes (they cannot be written back as UTF-8), binary data, non-UTF-8 bytes, and a second header
line (two runs pasted into one file). A byte-order mark is dropped; CRLF is whitespace. `first_json` finds the
first record for format detection however long it is, so detection accepts what the importers accept.
"""

from __future__ import annotations

import json
import math
from typing import Any

from engine.trace.check import TraceError, check_depth

HEADER = "speclab.peer_header"  # the optional first line scripts/peers/run_vllm.py writes (versions, models)


class PeerError(TraceError):
    """A malformed peer report; one line naming the file, record and field."""


def json_lines(data: bytes, name: str, what: str) -> list[tuple[str, dict]]:
    """A JSONL file, or one JSON list (or object) — how saved API responses come — as (where, object)
    pairs. NaN / Infinity are refused (a report with them cannot be trusted); a cut-off file is an error
    here, not a warning: an import is all or nothing."""
    text = _text(data, name)
    body = text.strip()
    if not body:
        raise PeerError(f"{name}: empty file (no {what})")
    if body[0] == "[":
        items = _loads(body, f"{name}: line 1")
        out = [(f"{name}: record {i}", x) for i, x in enumerate(items)] if isinstance(items, list) else [
            (f"{name}: line 1", items)]
        for where, d in out[1:]:
            if isinstance(d, dict) and d.get("type") == HEADER:
                raise PeerError(f"{where}: field 'type': a second {HEADER} record (one run per file)")
        return out
    out = []
    for i, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            out.append((f"{name}: line {i}", _loads(line, f"{name}: line {i}")))
    for where, d in out[1:]:  # a header mid-file: two reports pasted together, two runs posing as one
        if isinstance(d, dict) and d.get("type") == HEADER:
            raise PeerError(f"{where}: field 'type': a second {HEADER} line (two files concatenated? one run per file)")
    return out


def _text(data: bytes, name: str) -> str:
    """UTF-8 text of a report; a byte-order mark (Windows editors write one) is dropped, CRLF is
    whitespace to JSON and to the line readers alike."""
    if b"\0" in data[:65536]:
        raise PeerError(f"{name}: not a text report (binary data)")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise PeerError(f"{name}: not UTF-8 text (byte {e.start})") from None


def _reject_constant(c: str):
    raise ValueError(f"{c} is not a number a report may hold")


def _finite(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):  # 1e400 parses to inf: as untrustworthy as a literal Infinity
        raise ValueError(f"{s[:20]} is not a finite number")
    return v


def _loads(s: str, where: str) -> Any:
    """One JSON value of a report: no NaN / Infinity / overflowing literals, nested at most MAX_DEPTH
    levels, no lone surrogate escapes (they cannot be written back as UTF-8)."""
    try:
        v = json.loads(s, parse_constant=_reject_constant, parse_float=_finite)
    except RecursionError:
        raise PeerError(f"{where}: nested too deeply") from None
    except ValueError as e:
        raise PeerError(f"{where}: invalid JSON ({getattr(e, 'msg', e)}; a cut-off file?)") from None
    try:
        check_depth(s, v, where)
    except TraceError as e:
        raise PeerError(str(e)) from None
    if "\\ud" in s or "\\uD" in s:
        bad = _surrogate(v)
        if bad is not None:
            raise PeerError(f"{where}: field '{bad}': a lone surrogate escape (not a character)")
    return v


def _surrogate(v: Any) -> str | None:
    """The key path of the first string holding a lone surrogate, or None (iterative: no recursion)."""
    stack = [("", v)]
    while stack:
        path, x = stack.pop()
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                return path or "(value)"
        elif isinstance(x, dict):
            for k, y in x.items():
                if isinstance(k, str) and any("\ud800" <= ch <= "\udfff" for ch in k):
                    return f"{path}.{k!r}".lstrip(".")
                stack.append((f"{path}.{k}".lstrip("."), y))
        elif isinstance(x, list):
            stack.extend((f"{path}[{i}]", y) for i, y in enumerate(x) if isinstance(y, (str, dict, list)))
    return None


def first_json(data: bytes) -> Any:
    """The first JSON record of a file — its first non-blank line (after a peer header line), or the
    first element of a JSON list — or None. Reads only as far as that record, so it may be given the
    whole file: a first record over any fixed head size is still found (detection must accept what
    the importers accept). A cut multi-byte character at the end of a head is ignored."""
    text = data.decode("utf-8", errors="ignore").removeprefix("\ufeff").lstrip()
    dec = json.JSONDecoder()
    try:
        if text.startswith("["):
            rest = text[1:].lstrip()
            v, end = dec.raw_decode(rest)
            if isinstance(v, dict) and v.get("type") == HEADER:  # a header element: the records follow it
                rest = rest[end:].lstrip().removeprefix(",").lstrip()
                v = dec.raw_decode(rest)[0]
            return v
        pos, first = 0, True
        while pos < len(text):
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            line = text[pos:end].strip()
            pos = end + 1
            if not line:
                continue
            v = json.loads(line)
            if first and isinstance(v, dict) and v.get("type") == HEADER:
                first = False  # the run scripts' header line: the records follow it
                continue
            return v
    except (ValueError, RecursionError):
        return None
    return None
