"""Records → Trace: the cross-record rules of trace format v1 (the per-record rules are
engine/trace/check.py, their column-wise screen engine/trace/screen.py).

`build_trace` takes (location, record) pairs, from any reader (JSONL, Parquet, an importer), and
either returns a Trace or raises TraceError naming the first bad record. It has two ways through that
must agree on every input: a reference pass that checks record by record (the one that words every
error), and a screened pass that checks whole columns at once (`_assemble_screened`) and defers to
the reference pass on any doubt — so a 200k-step trace loads in array time, and an error reads the
same whichever pass met it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np

from engine.metrics import ACCEPTANCE_RATE, summarize_steps, summary_of_columns
from engine.trace.check import (TraceError, check_header, check_request, check_request_end, compare_summary, fail,
                                lacks_of, validate_step)
from engine.trace.model import Trace
from engine.trace.screen import DictColumns, fill_counts, screen_steps


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
    lacks = lacks_of(h, where)  # an imported run's null fields: both passes skip the checks that need them
    if steps_at is None or screened is None:
        values = recs.values if isinstance(recs, Lines) else [d for _, d in recs]  # no location formatted
        steps_at = [i for i, d in enumerate(values) if type(d) is dict and d.get("type") == "step"]
    bad_at, cols = None, screened or {}
    if fast and screened is None:
        steps = _values_at(recs, steps_at)
        j, cols = screen_steps(DictColumns(steps), lacks)
        bad_at = steps_at[j] if j is not None else None
        # Steps before the flagged one are sound and get their counts; the reference names the flagged one.
        fill_counts(steps[:j], {k: v[:j] for k, v in cols.items()}) if j is not None else fill_counts(steps, cols)
    if fast and bad_at is None and steps_at:
        try:
            return _assemble_screened(recs, steps_at, cols, source, lacks)
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
            computed = (_summary(cols, len(trace.ends)) if fast and trace.steps
                        else summarize_steps(trace.steps, len(trace.ends)))
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

    __slots__ = ("name", "values", "unit", "base")

    def __init__(self, name: str, values: list, unit: str = "line", base: int = 1) -> None:
        """`unit` / `base`: how a record is named and numbered ("line" from 1; an importer's "imported record" from 0)."""
        self.name, self.values, self.unit, self.base = name, values, unit, base

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> tuple[str, Any]:
        v = self.values[i]  # IndexError as a list's
        return f"{self.name}: {self.unit} {(i if i >= 0 else i + len(self.values)) + self.base}", v

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


def _summary(c: dict[str, np.ndarray], n_ends: int) -> dict:
    """The footer summary from screened columns; a run whose drafted counts are not all known (an
    import lacking `window`) has no drafted total and no acceptance rate, as `summarize_steps` says."""
    out = summary_of_columns(c, n_ends)
    if "window_known" in c and not c["window_known"].all():
        out["drafted_tokens"] = out[ACCEPTANCE_RATE] = None
    return out


def _assemble_screened(recs: "list | Lines", steps_at: list[int], c: dict[str, np.ndarray], source: str,
                       lacks: frozenset = frozenset()) -> Trace:
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
                check_request(d, where, lacks)
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
    # an import may lack context lengths (or prompts): a step is checked against what is known before it
    known = c.get("context_known", np.ones(len(g), bool))[order]
    prev = np.where(first, "prompt_ids" not in lacks, np.r_[False, known[:-1]])
    if (known & prev & (ctx != want)).any():
        raise _Defer
    steps = _values_at(recs, steps_at)
    lo, hi = np.flatnonzero(first), np.flatnonzero(last) + 1  # group k = order[lo[k]:hi[k]]
    # Every request's output: its steps' emitted tokens end to end, cut from the flat column.
    # (an import's steps may lack their tokens: those count 0 here, and their requests' outputs go unchecked)
    el = c.get("emitted_lens", c["emitted"])
    em = el[order]
    e_off = np.cumsum(em) - em  # em: listed tokens in request order; e_off: where each step's run starts
    src = np.cumsum(el) - el  # where each step's tokens sit in the flat column
    outputs = c["emitted_flat"][np.repeat(src[order] - e_off, em) + np.arange(int(em.sum()))]
    bounds = np.r_[e_off, em.sum()]
    et_known = c.get("emitted_known", np.ones(len(g), bool))[order]
    all_known = np.minimum.reduceat(et_known, lo) if len(lo) else np.zeros(0, bool)
    check_out = "output_ids" not in lacks
    for k, r in enumerate(ids):
        end = trace.ends.get(r)
        if end is None:
            continue
        idx = order[lo[k]:hi[k]]
        if check_out and all_known[k] and end["output_ids"] != outputs[bounds[lo[k]]:bounds[hi[k]]].tolist() or \
                end.get("finished") != steps[idx[-1]].get("finished"):
            raise _Defer
    with_steps = set(ids)
    for r, end in trace.ends.items():  # ends of requests without steps: nothing emitted
        if r not in with_steps and end["output_ids"]:
            raise _Defer
    trace.steps = steps
    computed = _summary(c, len(trace.ends))
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
    ctx = d.get("context_len")  # an imported step may leave out a field its header lacks
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
