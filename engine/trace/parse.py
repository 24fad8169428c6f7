"""Bytes → (location, record) pairs: the JSON parsing under every trace reader, and the refusals that
come before any rule (binary data, a line too long or too deep, invalid JSON, NaN). A cut-off last
line — the run was killed while writing it — is dropped with a warning.

It only parses JSON: nothing is executed or unpickled. The fast chunked reader (engine/trace/jsonl.py)
and the Parquet reader (engine/trace/parquet.py) use the same helpers, so a refusal reads the same
whichever reader met it.
"""

from __future__ import annotations

import gc
import json
from contextlib import contextmanager
from typing import Any, Iterator

from engine.trace.check import MAX_DEPTH, MAX_LINE, TraceError, check_depth
from engine.trace.model import Progress

try:  # ~3x faster than the standard library on trace lines; optional (pyproject lists it)
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only where orjson is missing
    _orjson = None


def _loads(raw: bytes) -> Any:
    if _orjson is not None:
        return _orjson.loads(raw)  # refuses NaN/Infinity, depth > 1024 and invalid UTF-8 itself
    return json.loads(raw, parse_constant=_reject_constant)


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name} is not allowed")


def _parse_error(raw: bytes, e: BaseException) -> str:
    """The parser's complaint in one line; the stdlib's wording where it names the problem better
    (orjson calls NaN an 'unexpected character')."""
    if _orjson is not None:
        try:
            json.loads(raw, parse_constant=_reject_constant)
        except RecursionError:
            return f"nested deeper than {MAX_DEPTH} levels"
        except ValueError as e2:
            if "non-finite" in str(e2):
                return _first_line(e2)
        except Exception:  # noqa: BLE001
            pass
    return _first_line(e)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


def _refuse_binary(data: bytes, name: str) -> None:
    """Random bytes or an image are refused as such, not as 'invalid JSON on line 1'."""
    head = data[: 1 << 16]
    try:
        head.decode("utf-8")
        text = True
    except UnicodeDecodeError as e:
        text = e.start >= len(head) - 3 and len(data) > len(head)  # a character cut by the 64 KiB window
    if not text or b"\x00" in head:
        raise TraceError(f"{name}: not a JSONL or Parquet trace (binary data)")


def parse_jsonl(data: bytes, name: str, warnings: list[str], progress: Progress | None = None,
                strict: bool = False) -> list:
    """(location, record) pairs of a JSONL trace; a cut-off last line is dropped with a warning, or with
    `strict` (a file complete by construction: prompts, a reference, a training trace) refused like any other.

    The garbage collector is paused while parsing: 200k freshly parsed dicts would otherwise trigger
    dozens of full collections over a growing heap (measured: 13 s → 4.5 s with the stdlib parser)."""
    _refuse_binary(data, name)
    lines = data.split(b"\n")
    ends_clean = lines[-1] == b""
    if ends_clean:
        lines.pop()
    n, out = len(lines), []
    tick = max(1, n // 40)
    was = gc.isenabled()
    gc.disable()
    try:
        for i, raw in enumerate(lines, start=1):
            if progress is not None and i % tick == 0:
                progress(0.8 * i / n, f"read {i:,} of {n:,} lines")
            where = f"{name}: line {i}"
            if len(raw) > MAX_LINE:
                raise TraceError(f"{where}: record of {len(raw)} bytes exceeds the {MAX_LINE}-byte limit")
            if not raw or raw.isspace():
                continue
            try:
                d = _loads(raw)
            except RecursionError:  # the stdlib parser on [[[[…]]]]; orjson stops at depth 1024 itself
                raise TraceError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
            except Exception as e:  # noqa: BLE001 - any parser failure is this line's one-line error
                if i == n and not ends_clean and not strict:
                    warnings.append(f"line {i} is cut off (the run was killed while writing it); dropped")
                    break
                raise TraceError(f"{where}: invalid JSON ({_parse_error(raw, e)})") from None
            check_depth(raw, d, where)
            out.append((where, d))
    finally:
        if was:
            gc.enable()
    return out


def read_jsonl(path, warnings: list[str] | None = None, strict: bool = False) -> list:
    """The records of a JSONL file (any, not only traces) through `parse_jsonl`'s refusals, each a one-line
    TraceError naming the file and line; a cut-off last line is dropped (noted in `warnings` if given), or
    with `strict` refused. The one JSONL reader: traces, prompts, references, training logs and traces."""
    from pathlib import Path

    p = Path(path)
    return [d for _, d in parse_jsonl(p.read_bytes(), p.name, [] if warnings is None else warnings, strict=strict)]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector paused while a large file becomes objects (its passes over millions of
    fresh, acyclic records made a 650k-step import superlinear), then resumed as `_resume_gc` does."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _resume_gc(was)


def _resume_gc(was_enabled: bool) -> None:
    """Re-enable the collector without making it scan what was just loaded.

    A 200k-step trace is ~1.6M lists and dicts, all still in the youngest generation after a load
    with the collector paused; the first allocation after `gc.enable()` would scan them all (~0.8 s
    on a small CPU) only to promote them. `freeze` + `unfreeze` moves every tracked object straight
    to the oldest generation (a list splice, no scan), where the next full collection sees them as
    usual. Skipped when something else has frozen objects on purpose."""
    if not was_enabled:
        return
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
    gc.enable()
