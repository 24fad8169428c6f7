"""Trace format v1: one JSONL file per run (schema in docs/trace-format.md).

    {"type": "header", "schema": "speclab.trace", "version": 1, ...}     run configuration
    {"type": "request", "request_id": 0, "prompt_ids": [...], ...}         one per prompt
    {"type": "step", "request_id": 0, "step": 0, ...}                      one per verify call
    {"type": "request_end", "request_id": 0, "output_ids": [...], ...}     one per finished prompt
    {"type": "footer", "summary": {...}}                                   written on a clean finish

This is the only module that knows the on-disk form of a StepRecord. Records are flushed one line
at a time, so a killed run leaves a loadable file (no footer; the loader says so); a write that fails
(disk full, permissions) stops the writer with one line, and what was flushed still loads. The loader
only parses JSON (or Parquet columns) — it never executes or unpickles anything — recomputes every
derived field, and rejects malformed input with one line naming the file, line and field. The rules
are engine/trace/check.py, their column-wise form engine/trace/screen.py, fast JSONL reading
engine/trace/jsonl.py, Parquet engine/trace/parquet.py.

Counting convention: `accepted` excludes the bonus/correction token, `emitted` includes it.
"""

from __future__ import annotations

import copy
import gc
import json
import os
from dataclasses import asdict, dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from engine.trace.check import (LACKABLE, MAX_DEPTH, MAX_LINE, MAX_WINDOW, SCHEMA,  # noqa: F401 (re-exported)
                                TOKEN_MAX, VERSION, TraceError, check_depth, check_header, check_request,
                                check_request_end, compare_summary, fail, lacks_of, validate_step)
from engine.trace.screen import DictColumns, fill_counts, screen_steps

try:  # ~3x faster than the standard library on trace lines; optional (pyproject lists it)
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised only where orjson is missing
    _orjson = None

Progress = Callable[[float, str], None]  # (fraction done, what is happening)


class TraceWriteError(ValueError):
    """The trace could not be written (disk full, permissions); one line. What was flushed before
    the failure loads as an interrupted run."""


# ------------------------------------------------------------------ writing


def step_to_dict(rec) -> dict[str, Any]:
    d = asdict(rec)
    d["type"] = "step"
    d["window"] = len(rec.draft_tokens)
    d["emitted"] = len(rec.emitted_tokens)
    for k in ("t_draft_ms", "t_verify_ms", "t_prefill_ms", "t_rule_ms"):
        d[k] = round(d[k], 4)
    for k in ("q_draft", "p_target", "accept_probs", "draft_entropy"):
        d[k] = [round(float(x), 7) for x in d[k]]
    return d


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
    """Run summary from step dicts. Every count says whether it includes the bonus token.

    Computed on columns (one pass over the dicts, then numpy): ~10x faster than a loop at 200k steps,
    and the pages ask for it on every trace they load. Float sums use `cumsum` (strictly left to
    right, like Python's `sum`), so the figures are the same to the last bit as a loop's."""
    if not steps:
        return _summary_of_columns(None, len(ends or []))
    rid, win, acc, emi, td, tv, tp = zip(*map(itemgetter("request_id", "window", "accepted", "emitted", "t_draft_ms",
                                                         "t_verify_ms", "t_prefill_ms"), steps))
    # Imported runs (engine.interop) may not know how much was drafted: then neither do we.
    drafted_known = None not in win
    c = {"request_id": np.array(rid), "window": np.array(win if drafted_known else [w or 0 for w in win], np.int64),
         "accepted": np.array(acc, np.int64), "emitted": np.array(emi, np.int64),
         "t_draft_ms": np.array(td, np.float64), "t_verify_ms": np.array(tv, np.float64),
         "t_prefill_ms": np.array(tp, np.float64)}
    out = _summary_of_columns(c, len(ends or []))
    if not drafted_known:
        out["drafted_tokens"] = out["draft_acceptance_rate"] = None
    return out


def _sum(a: np.ndarray) -> float:
    """Left-to-right float sum (numpy's `sum` adds pairwise: other last bits than Python's `sum`)."""
    return float(np.cumsum(a)[-1]) if len(a) else 0.0


def _summary_of_columns(c: dict[str, np.ndarray] | None, n_ends: int) -> dict[str, Any]:
    """`summarize` from step columns (request_id, window, accepted, emitted, t_*_ms): the loader's
    screened columns, or those `summarize` gathers."""
    if c is None or not len(c["accepted"]):
        return {"requests": 0, "requests_finished": n_ends, "target_calls": 0, "new_tokens": 0, "drafted_tokens": 0,
                "accepted_tokens_excl_bonus": 0, "mean_emitted_per_call_incl_bonus": 0.0,
                "mean_accepted_per_call_excl_bonus": 0.0, "draft_acceptance_rate": 0.0, "tokens_per_s": 0.0,
                "tokens_per_s_mean_over_requests": 0.0, "decode_ms": 0, "draft_ms": 0, "verify_ms": 0,
                "accepted_histogram": {}}
    n = len(c["accepted"])
    w, a, e = int(c["window"].sum()), int(c["accepted"].sum()), int(c["emitted"].sum())
    t = c["t_draft_ms"] + c["t_verify_ms"] + c["t_prefill_ms"]
    t_ms = _sum(t)
    # Requests in order of first appearance, each summed left to right (as a loop over the steps would).
    _, first, inv = np.unique(c["request_id"], return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first, kind="stable"), kind="stable")
    g = rank[inv]
    tok = np.bincount(g, weights=c["emitted"].astype(np.float64))
    ms = np.bincount(g, weights=t)
    tps = tok[ms > 0] / (ms[ms > 0] / 1e3)
    vals, counts = np.unique(c["accepted"], return_counts=True)
    return {
        "requests": len(first), "requests_finished": n_ends, "target_calls": n, "new_tokens": e,
        "drafted_tokens": w, "accepted_tokens_excl_bonus": a,
        "mean_emitted_per_call_incl_bonus": e / n, "mean_accepted_per_call_excl_bonus": a / n,
        "draft_acceptance_rate": a / w if w else 0.0, "tokens_per_s": e / (t_ms / 1e3) if t_ms > 0 else 0.0,
        "tokens_per_s_mean_over_requests": _sum(tps) / len(tps) if len(tps) else 0.0,
        "decode_ms": t_ms, "draft_ms": _sum(c["t_draft_ms"]), "verify_ms": _sum(c["t_verify_ms"]),
        "accepted_histogram": {str(int(v)): int(k) for v, k in zip(vals, counts)},
    }


# ------------------------------------------------------------------ loading


@dataclass
class Trace:
    header: dict[str, Any]
    requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)
    footer: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    source: str = ""

    # The loader's summary (from the columns it screened), kept with the step list and counts it was
    # computed for: pages ask for a trace's summary on every load, and a 200k-step trace has one.
    _summary: tuple[tuple, dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        return self.footer is not None

    @property
    def summary(self) -> dict[str, Any]:
        key = (id(self.steps), len(self.steps), len(self.ends))
        if self._summary is None or self._summary[0] != key:
            self._summary = (key, summarize(self.steps, list(self.ends.values())))
        return copy.deepcopy(self._summary[1])



# ------------------------------------------------------------------ validation (rules: engine.trace.check)


def build_trace(records: Iterable[tuple[str, Any]], source: str = "", fast: bool = True,
                screened: dict[str, np.ndarray] | None = None, steps_at: list[int] | None = None) -> Trace:
    """Validate (location, record) pairs into a Trace; TraceError names the first bad record.

    `fast` screens the steps' fields as whole columns (engine.trace.screen) and runs the per-record
    reference check only on the step it flags; `fast=False` checks every step one by one (the
    reference the tests compare against). Both report the same first error. `screened`: the steps'
    columns when the caller has already screened them (the Parquet and chunked-JSONL fast paths)."""
    recs = records if isinstance(records, (list, Lines)) else list(records)
    if not recs:
        raise TraceError(f"{Path(source).name or 'trace'}: empty file (no header)")
    where, h = recs[0]
    if type(h) is not dict:
        raise TraceError(f"{where}: expected a JSON object, got {type(h).__name__}")
    if h.get("type") != "header":
        fail(where, "type", f"first record must be the header, got {str(h.get('type'))[:40]!r}")
    check_header(h, where)
    lacks = lacks_of(h, where)
    fast = fast and not lacks  # imported runs (few steps, null fields) take the reference path
    if steps_at is None or screened is None:
        steps_at = [i for i, (_, d) in enumerate(recs) if type(d) is dict and d.get("type") == "step"]
    bad_at, cols = None, screened or {}
    if fast and screened is None:
        steps = _values_at(recs, steps_at)
        j, cols = screen_steps(DictColumns(steps))
        bad_at = steps_at[j] if j is not None else None
        # Steps before the flagged one are sound and get their counts; the reference names the flagged one.
        fill_counts(steps[:j], {k: v[:j] for k, v in cols.items()}) if j is not None else fill_counts(steps, cols)
    if fast and bad_at is None and steps_at:
        try:
            return _assemble_screened(recs, steps_at, cols, source)
        except _Defer:  # some cross-record rule fails: the reference pass finds and names the first one
            return build_trace(recs, source, fast=False)
    trace = Trace(header=h, source=source)
    state: dict[int, list] = {}  # request -> [next step, next context_len, finished, emitted tokens]
    for i in range(1, len(recs)):
        where, d = recs[i]
        if type(d) is not dict:
            raise TraceError(f"{where}: expected a JSON object, got {type(d).__name__}")
        if trace.footer is not None:
            fail(where, "type", "record after the footer")
        kind = d.get("type")
        if kind == "step":
            if not fast or i == bad_at:
                validate_step(d, where, lacks)
                if i == bad_at:  # the screen flagged a step the reference accepts: trust the reference
                    return build_trace(recs, source, fast=False)
            _step_in_context(trace, state, d, where)
            trace.steps.append(d)
        elif kind == "request":
            check_request(d, where, lacks)
            rid = d["request_id"]
            if rid in trace.requests:
                fail(where, "request_id", f"duplicate request {rid}")
            trace.requests[rid] = d
            state[rid] = [0, None if "prompt_ids" in lacks else len(d["prompt_ids"]), None, []]
        elif kind == "request_end":
            check_request_end(d, where)
            _end_in_context(trace, state, d, where, lacks)
            trace.ends[d["request_id"]] = d
        elif kind == "footer":
            if type(d.get("summary")) is not dict:
                fail(where, "summary", "expected an object")
            missing = sorted(set(trace.requests) - set(trace.ends))
            if missing:
                fail(where, "type", f"footer of a finished run, but request {missing[0]} has no request_end")
            computed = (_summary_of_columns(cols, len(trace.ends)) if fast and trace.steps
                        else summarize(trace.steps, list(trace.ends.values())))
            compare_summary(d["summary"], computed, where)
            trace.footer = d
        else:
            fail(where, "type", f"unknown record type {str(kind)[:40]!r}")
    if trace.footer is None:
        trace.warnings.append("no footer: the run was interrupted; steps up to the last complete line are kept")
    return trace


class Lines:
    """The (location, record) pairs of a JSONL file whose record i is its line i + 1, each pair made
    when it is read: the fast reader (engine.trace.jsonl) keeps only the parsed values, because a
    location is only ever read on the way to an error or for the few records that are not steps —
    formatting 200k of them up front cost ~0.05 s of a 200k-step load."""

    __slots__ = ("name", "values")

    def __init__(self, name: str, values: list) -> None:
        self.name, self.values = name, values

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> tuple[str, Any]:
        v = self.values[i]  # IndexError as a list's
        return f"{self.name}: line {(i if i >= 0 else i + len(self.values)) + 1}", v

    def __iter__(self):
        return map(self.__getitem__, range(len(self.values)))

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, (list, Lines)) else NotImplemented


def _values_at(recs: "list | Lines", at: list[int]) -> list:
    """The records at indices `at`, without their locations."""
    if isinstance(recs, Lines):
        return list(map(recs.values.__getitem__, at))
    return [recs[i][1] for i in at]


class _Defer(Exception):
    """The screened assembly met something to refuse; the reference pass words the error."""


def _assemble_screened(recs: "list | Lines", steps_at: list[int], c: dict[str, np.ndarray], source: str) -> Trace:
    """The cross-record rules of `build_trace`'s reference pass, as array operations over steps whose
    fields are already screened: each step belongs to a request opened before it and not yet ended,
    steps count 0, 1, … per request, only a request's last step may finish it, context_len grows by
    the tokens emitted, and request ends / the footer agree with the steps. Raises _Defer on any
    doubt, never TraceError, so error messages come from one place."""
    h = recs[0][1]
    trace = Trace(header=h, source=source)
    n_rec, pos = len(recs), np.asarray(steps_at)
    is_step = np.zeros(n_rec, bool)
    is_step[pos] = True
    req_pos: dict[int, int] = {}
    end_pos: dict[int, int] = {}
    try:
        for i in np.flatnonzero(~is_step)[1:].tolist():
            where, d = recs[i]
            if type(d) is not dict or trace.footer is not None:
                raise _Defer
            kind = d.get("type")
            if kind == "request":
                check_request(d, where)
                if d["request_id"] in trace.requests:
                    raise _Defer
                trace.requests[d["request_id"]], req_pos[d["request_id"]] = d, i
            elif kind == "request_end":
                check_request_end(d, where)
                if d["request_id"] not in trace.requests or d["request_id"] in trace.ends:
                    raise _Defer
                trace.ends[d["request_id"]], end_pos[d["request_id"]] = d, i
            elif kind == "footer" and type(d.get("summary")) is dict:
                trace.footer = d
            else:
                raise _Defer
    except TraceError:
        raise _Defer from None
    if trace.footer is not None and (recs[-1][1] is not trace.footer or set(trace.requests) - set(trace.ends)):
        raise _Defer
    uniq, inv = np.unique(c["request_id"], return_inverse=True)
    ids = uniq.tolist()
    big = n_rec + 1
    if (np.array([req_pos.get(r, big) for r in ids])[inv] > pos).any() or \
            (np.array([end_pos.get(r, big) for r in ids])[inv] < pos).any():
        raise _Defer  # a step of an unknown request, or after its request_end
    order = np.argsort(inv, kind="stable")
    g = inv[order]
    first = np.r_[True, g[1:] != g[:-1]]
    last = np.r_[g[1:] != g[:-1], True]
    start = np.maximum.accumulate(np.where(first, np.arange(len(g)), 0))
    if (c["step"][order] != np.arange(len(g)) - start).any():
        raise _Defer
    if (c["finished"][order] & ~last).any():
        raise _Defer  # a step after the one that finished its request
    ctx, em = c["context_len"][order], c["emitted"][order]
    prompt_len = np.array([len(trace.requests[r]["prompt_ids"]) for r in ids])
    want = np.where(first, prompt_len[g], np.r_[0, ctx[:-1] + em[:-1]])
    if (ctx != want).any():
        raise _Defer
    steps = _values_at(recs, steps_at)
    lo, hi = np.flatnonzero(first), np.flatnonzero(last) + 1  # group k = order[lo[k]:hi[k]]
    # Every request's output: its steps' emitted tokens end to end, cut from the flat column.
    e_off = np.cumsum(em) - em  # em: emitted counts in request order; e_off: where each step's run starts
    src = np.cumsum(c["emitted"]) - c["emitted"]  # where each step's tokens sit in the flat column
    outputs = c["emitted_flat"][np.repeat(src[order] - e_off, em) + np.arange(int(em.sum()))]
    bounds = np.r_[e_off, em.sum()]
    for k, r in enumerate(ids):
        end = trace.ends.get(r)
        if end is None:
            continue
        idx = order[lo[k]:hi[k]]
        if end["output_ids"] != outputs[bounds[lo[k]]:bounds[hi[k]]].tolist() or \
                end.get("finished") != steps[idx[-1]].get("finished"):
            raise _Defer
    with_steps = set(ids)
    for r, end in trace.ends.items():  # ends of requests without steps: nothing emitted
        if r not in with_steps and end["output_ids"]:
            raise _Defer
    trace.steps = steps
    computed = _summary_of_columns(c, len(trace.ends))
    trace._summary = ((id(steps), len(steps), len(trace.ends)), computed)
    if trace.footer is not None:
        try:
            compare_summary(trace.footer["summary"], computed, "footer")
        except TraceError:
            raise _Defer from None
    else:
        trace.warnings.append("no footer: the run was interrupted; steps up to the last complete line are kept")
    return trace


def _step_in_context(trace: Trace, state: dict, d: dict, where: str) -> None:
    """What one step must agree with: its request, the step before it and the context it grew."""
    rid = d["request_id"]
    st = state.get(rid)
    if st is None:
        fail(where, "request_id", f"step for unknown request {rid}")
    if rid in trace.ends:
        fail(where, "request_id", f"step after request {rid} ended")
    if d["step"] != st[0]:
        fail(where, "step", f"expected step {st[0]} of request {rid}, got {d['step']}")
    if st[2] is not None:
        fail(where, "finished", f"request {rid} already finished ({st[2]}) on the step before")
    ctx = d["context_len"]
    if st[1] is not None and ctx is not None and ctx != st[1]:
        fail(where, "context_len", f"{ctx}, but the prompt and earlier steps give {st[1]}")
    st[0] += 1
    st[1] = None if ctx is None else ctx + d["emitted"]
    st[2] = d.get("finished")
    if d.get("emitted_tokens") is None:
        st[3] = None  # an imported step without ids: the request's output cannot be recomputed
    elif st[3] is not None:
        st[3].extend(d["emitted_tokens"])


def _end_in_context(trace: Trace, state: dict, d: dict, where: str, lacks: frozenset) -> None:
    rid = d["request_id"]
    if rid not in trace.requests:
        fail(where, "request_id", f"request_end for unknown request {rid}")
    if rid in trace.ends:
        fail(where, "request_id", f"duplicate request_end for request {rid}")
    st = state[rid]
    if st[3] is not None and "output_ids" not in lacks and d["output_ids"] != st[3]:
        fail(where, "output_ids", f"{len(d['output_ids'])} ids differ from the {len(st[3])} tokens its steps emitted")
    if st[0] and d.get("finished") != st[2]:
        fail(where, "finished", f"{d.get('finished')!r}, but the request's last step says {st[2]!r}")


# ------------------------------------------------------------------ reading bytes


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


def parse_jsonl(data: bytes, name: str, warnings: list[str], progress: Progress | None = None) -> list:
    """(location, record) pairs of a JSONL trace; a cut-off last line is dropped with a warning.

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
                if i == n and not ends_clean:
                    warnings.append(f"line {i} is cut off (the run was killed while writing it); dropped")
                    break
                raise TraceError(f"{where}: invalid JSON ({_parse_error(raw, e)})") from None
            check_depth(raw, d, where)
            out.append((where, d))
    finally:
        if was:
            gc.enable()
    return out


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


# ------------------------------------------------------------------ Parquet (engine/trace/parquet.py)


def to_parquet(trace: Trace, path: str | os.PathLike) -> None:
    """Steps become columns; header/requests/ends/footer ride along as JSON in file metadata."""
    from engine.trace.parquet import to_parquet as write

    write(trace, path)


def _load_parquet(data: bytes, name: str) -> Trace:
    from engine.trace.parquet import load_parquet

    return load_parquet(data, name)
