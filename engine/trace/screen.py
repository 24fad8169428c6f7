"""Whole-column screening of step records: `engine.trace.check.validate_step`, vectorised.

Why: a 200k-step trace has ~5M field values. Checking them one `isinstance` at a time in Python
costs ~10 s on a small CPU; gathering each field into one array and range-checking it with numpy
costs a fraction of that. The screen only says *which step is the first bad one*; the loader then
runs the reference `validate_step` on that step for the exact one-line message, so messages stay
defined in one place (engine/trace/check.py).

Column sources feed the same rules: `DictColumns` here (steps parsed from JSONL: every value's type
is checked); `ArrowColumns` in engine/trace/parquet.py (a Parquet table whose schema already fixes
the types: values are checked straight from Arrow's buffers, with no Python object per value); the
chunks gathered while JSONL is parsed, engine/trace/chunks.py.

The screen must reject at least what `validate_step` rejects; tests/unit/trace/test_fuzz.py checks that
the screened and the reference paths agree on random mutations.
"""

from __future__ import annotations

from itertools import chain, repeat
from operator import is_, itemgetter

import numpy as np

from engine.trace.check import (FINISHED, INT_FIELDS, LACKABLE, MAX_ENTROPY, MAX_MS, MAX_WINDOW, STEP_DEFAULTS,
                                TIME_FIELDS, TOKEN_MAX, _LACKABLE, validate_step)

_MISSING = object()
_FINISHED = set(FINISHED)
LIST_LIMITS = {"draft_tokens": (0, MAX_WINDOW), "emitted_tokens": (1, MAX_WINDOW + 1)}
VALUE_LISTS = {"q_draft": 1.0, "p_target": 1.0, "accept_probs": 1.0, "draft_entropy": MAX_ENTROPY}


def _types_bad(col: list, allowed: tuple[type, ...]) -> np.ndarray | None:
    """None when every value's exact type is allowed (one C-level pass), else a per-row bad mask."""
    ok = frozenset(allowed)
    if set(map(type, col)) <= ok:
        return None
    return ~np.fromiter(map(ok.__contains__, map(type, col)), bool, len(col))  # C-level maps, no genexpr


def _as_int64(vals: list) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, bad mask) of a list of Python ints; ints beyond int64 are bad (out of any range)."""
    try:
        return np.array(vals, dtype=np.int64), np.zeros(len(vals), bool)
    except OverflowError:
        ok = np.fromiter((-(1 << 63) <= x < (1 << 63) for x in vals), bool, len(vals))
        return np.fromiter((x if o else 0 for x, o in zip(vals, ok)), np.int64, len(vals)), ~ok


def _as_float64(vals: list) -> np.ndarray:
    try:
        return np.array(vals, dtype=np.float64)
    except OverflowError:  # an int too large for a double
        return np.fromiter((float(x) if abs(x) < 1e300 else np.inf for x in vals), np.float64, len(vals))


class DictColumns:
    """Columns of step dicts parsed from JSON: types are checked value by value (in bulk)."""

    # Fields every step has: gathered in one pass over the dicts (one itemgetter call per step, then
    # transposed), ~2.5× faster than a pass per field because each dict is visited once. The fields
    # writers always add are gathered in the same pass when every step has them.
    CORE = (*INT_FIELDS, "draft_tokens", "emitted_tokens", *VALUE_LISTS, *TIME_FIELDS, "correction", "bonus",
            "finished", "stop_reason")
    USUAL = ("window", "emitted", "t_rule_ms", "policy_fields", "all_drafts", "chosen", "decisions")

    def __init__(self, steps: list[dict]) -> None:
        self.steps, self.n = steps, len(steps)
        self._cols: dict[str, tuple] = {}
        for keys in ((*self.CORE, *self.USUAL), self.CORE):
            try:
                if steps:
                    self._cols = dict(zip(keys, zip(*map(itemgetter(*keys), steps))))
                break
            except KeyError:  # some step lacks a field: per-field gathering finds which
                self._cols = {}

    def objects(self, k: str) -> list:
        if k in self._cols:
            return self._cols[k]
        try:
            return list(map(itemgetter(k), self.steps))
        except KeyError:  # rare: some step lacks the field
            return [s.get(k, _MISSING) for s in self.steps]

    def absent(self, k: str) -> np.ndarray:
        """Rows where `k` is null or missing (an imported trace's lacking field)."""
        return _absent_mask(self.objects(k), self.n)

    def number(self, k: str, integer: bool, optional: bool, nullable: bool = True
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values with bad/absent rows as 0, present mask, bad mask). A missing key is absent; so is
        None unless not `nullable` (then None is a bad value)."""
        col = self.objects(k)
        if not nullable:
            nulls = np.fromiter((x is None for x in col), bool, self.n) if None in col else None
            if nulls is not None:
                col = [_MISSING if x is None else x for x in col]
                a, present, bad = self.number.__func__(_Fixed(col, self.n), k, integer, optional)
                return a, present | nulls, bad | nulls
        absent = _absent_mask(col, self.n)
        if absent.all():  # a column an import leaves null throughout
            return np.zeros(self.n, np.int64 if integer else np.float64), ~absent, np.full(self.n, not optional)
        bad = _types_bad(col, (int,) if integer else (int, float))
        if bad is None and not absent.any():
            vals = col
            bad = np.zeros(self.n, bool)
        else:
            bad = (bad if bad is not None else np.zeros(self.n, bool)) & ~absent
            vals = [x if ok else 0 for x, ok in zip(col, (~(bad | absent)).tolist())]
        if integer:
            a, over = _as_int64(vals)
            bad |= over
        else:
            a = _as_float64(vals)
        if not optional:
            bad |= absent
        return a, ~absent, bad

    def lists(self, k: str, integer: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(lengths, flat values, row of each flat value, bad mask) of a list column (never null)."""
        col = self.objects(k)
        if col.count(None) == self.n:  # a list an import leaves null throughout (bad unless it lacks it)
            e = np.zeros(0, np.int64 if integer else np.float64)
            return np.zeros(self.n, np.int64), e, np.zeros(0, np.int64), np.ones(self.n, bool)
        bad = _types_bad(col, (list,))
        if bad is not None:
            col = [x if ok else [] for x, ok in zip(col, (~bad).tolist())]
        else:
            bad = np.zeros(self.n, bool)
        lens = np.fromiter(map(len, col), np.int64, self.n)
        flat = list(chain.from_iterable(col))
        rows = np.repeat(np.arange(self.n), lens)
        tbad = _types_bad(flat, (int,) if integer else (int, float))
        if tbad is not None:
            bad[rows[tbad]] = True
            flat = [0 if b else x for x, b in zip(flat, tbad)]
        if integer:
            vals, over = _as_int64(flat)
            bad[rows[over]] = True
        else:
            vals = _as_float64(flat)
        return lens, vals, rows, bad

    def rare(self) -> np.ndarray:
        """Rows with multi-draft fields, checked by the reference itself (they are few and short)."""
        try:  # the usual single-draft trace: all null, chosen 0 — decided with C-level scans
            alt, dec, ch = map(self.objects, ("all_drafts", "decisions", "chosen"))
            if alt.count(None) == self.n and dec.count(None) == self.n and set(map(type, ch)) == {int} \
                    and not any(ch):
                return np.zeros(self.n, bool)
        except KeyError:
            pass
        bad = np.zeros(self.n, bool)
        for i, s in enumerate(self.steps):
            if s.get("all_drafts") is not None or s.get("decisions") is not None or \
                    type(s.get("chosen", 0)) is not int or s.get("chosen", 0) != 0:
                try:
                    validate_step(dict(s), "")
                except ValueError:
                    bad[i] = True
        return bad

    def policy_fields_bad(self) -> np.ndarray:
        col = self.objects("policy_fields")
        if set(map(type, col)) == {dict}:
            return np.zeros(self.n, bool)
        return np.fromiter((type(x) is not dict and x is not _MISSING for x in col), bool, self.n)

    def finished(self) -> tuple[np.ndarray, np.ndarray]:
        """(bad mask, null-or-absent mask) of `finished`."""
        fin = self.objects("finished")
        try:
            if set(fin) <= _FINISHED:  # equal to None or one of the two strings: exactly those values
                return np.zeros(self.n, bool), np.fromiter(map(is_, fin, repeat(None)), bool, self.n)
        except TypeError:  # an unhashable value (a list, an object): the scan below flags it
            pass
        ok = np.fromiter((type(x) in (str, type(None)) and x in FINISHED or x is _MISSING for x in fin), bool, self.n)
        return ~ok, np.fromiter((x is None or x is _MISSING for x in fin), bool, self.n)

    def stop_reason_bad(self) -> np.ndarray:
        stop = self.objects("stop_reason")
        if set(map(type, stop)) == {str} and max(map(len, stop)) <= 64:
            return np.zeros(self.n, bool)
        return np.fromiter((type(x) is not str or len(x) > 64 for x in stop), bool, self.n)


def _absent_mask(col: list, n: int) -> np.ndarray:
    """Rows whose value is null or missing, from C-level scans (no per-row Python call)."""
    nones, missing = col.count(None), col.count(_MISSING)
    if nones == n or missing == n:
        return np.ones(n, bool)
    if not nones and not missing:
        return np.zeros(n, bool)
    return np.fromiter(map(is_, col, repeat(None)), bool, n) | np.fromiter(map(is_, col, repeat(_MISSING)), bool, n)


class _Fixed(DictColumns):
    """A DictColumns over one already-extracted column (for `number`'s null handling)."""

    def __init__(self, col: list, n: int) -> None:
        self.col, self.n = col, n

    def objects(self, k: str) -> list:
        return self.col


def screen_steps(cols: "DictColumns | ArrowColumns", lacks: frozenset = frozenset()
                 ) -> tuple[int | None, dict[str, np.ndarray]]:
    """(index of the first step `validate_step(…, lacks)` would refuse, or None; numeric columns of the
    steps: request_id, step, context_len, window_cap, accepted, window, emitted, t_*_ms, and the masks
    of what is known where an imported trace (header `imported.lacks`) leaves fields null).

    `lacks` follows validate_step: a LACKABLE field it names may be null (or absent) on a step, and every
    check that needs it is skipped there; whatever is present is checked as usual."""
    n = cols.n
    if n == 0:
        return None, {}
    lk = lacks & _LACKABLE if lacks else frozenset()
    none = np.zeros(n, bool)
    gone = {k: (cols.absent(k) if k in lk else none) for k in LACKABLE}
    bad = np.zeros(n, bool)
    out: dict[str, np.ndarray] = {}
    for k, (lo, hi) in INT_FIELDS.items():
        v, present, b = cols.number(k, True, k in lk)
        bad |= b | (present & ((v < lo) | (v > hi)))
        out[k] = v
        if k == "context_len":
            out["context_known"] = present
        elif k == "window_cap":
            cap_known = present
    lists = {}
    for k, (lo, hi) in LIST_LIMITS.items():
        lens, flat, rows, b = cols.lists(k, True)
        fb = (flat < 0) | (flat >= TOKEN_MAX)
        bad |= (b | (lens < lo) | (lens > hi)) & ~gone[k]
        bad[rows[fb]] = True
        lists[k] = (lens, flat, rows)
    wl, el = lists["draft_tokens"][0], lists["emitted_tokens"][0]  # list lengths (0 where a list is gone)
    d_known, et_known = ~gone["draft_tokens"], ~gone["emitted_tokens"]
    # window: counted from draft_tokens, else stated; stated and counted must agree
    v, present, b = cols.number("window", True, True, nullable="window" not in lk)
    bad |= present & (b | (v < 0) | (v > MAX_WINDOW) | (d_known & (v != wl)))
    bad |= ~d_known & ~present & ~gone["window"]  # no draft_tokens and no window
    w_known = d_known | present
    w = np.where(d_known, wl, np.where(present, v, 0))
    # emitted: counted from emitted_tokens, else the stated count is all a step keeps
    v, present, b = cols.number("emitted", True, True, nullable=False)
    bad |= et_known & present & (b | (v != el))
    bad |= ~et_known & (~present | b | (v < 1) | (v > MAX_WINDOW + 1))
    e = np.where(et_known, el, np.where(b, 0, v))
    out["window"], out["emitted"], out["window_known"], out["emitted_known"] = w, e, w_known, et_known
    out["emitted_flat"] = lists["emitted_tokens"][1]  # every step's emitted_tokens, end to end
    out["emitted_lens"] = el
    acc = out["accepted"]
    bad |= (w_known & cap_known & (w > out["window_cap"])) | (w_known & (acc > w)) | (e > acc + 1)
    for k, hi in VALUE_LISTS.items():
        lens, flat, rows, b = cols.lists(k, False)
        with np.errstate(invalid="ignore"):
            fb = ~np.isfinite(flat) | (flat < -1e-6) | (flat > hi + 1e-6)
        bad |= ~gone[k] & (b | ~w_known | (lens != w))
        bad[rows[fb]] = True
    for k in TIME_FIELDS:
        v, _, b = cols.number(k, False, False)
        with np.errstate(invalid="ignore"):
            bad |= b | ~np.isfinite(v) | (v < 0) | (v > MAX_MS)
        out[k] = np.where(bad, 0.0, v)
    bad |= (out["step"] > 0) & (out["t_prefill_ms"] != 0)
    v, present, b = cols.number("t_rule_ms", False, True)
    with np.errstate(invalid="ignore"):
        bad |= present & (b | ~np.isfinite(v) | (v < 0) | (v > MAX_MS) | (v > out["t_verify_ms"] + 1e-3))
    c_val, has_c, bc = cols.number("correction", True, True)
    b_val, has_b, bb = cols.number("bonus", True, True)
    bad |= (has_c & (bc | (c_val < 0) | (c_val >= TOKEN_MAX))) | (has_b & (bb | (b_val < 0) | (b_val >= TOKEN_MAX)))
    told = ~(gone["correction"] & gone["bonus"])  # an import that lacks both says nothing of either
    bad |= told & ((has_c == has_b) | (w_known & (has_b != (acc == w))))
    # The accepted prefix: emitted_tokens[:m] == draft_tokens[:m] with m = min(accepted, emitted), and the
    # last emitted token is the bonus / correction when all accepted + 1 tokens were emitted.
    (_, d_flat, _), (_, e_flat, _) = lists["draft_tokens"], lists["emitted_tokens"]
    d_off, e_off = np.cumsum(wl) - wl, np.cumsum(el) - el
    m = np.where(bad | ~d_known | ~et_known, 0, np.minimum(acc, e))
    r = np.repeat(np.arange(n), m)
    j = np.arange(len(r)) - np.repeat(np.cumsum(m) - m, m)
    if len(r):
        bad[r[d_flat[d_off[r] + j] != e_flat[e_off[r] + j]]] = True
    full = ~bad & told & et_known & (e == acc + 1) & (e > 0)
    last = np.where(full, e_flat[np.where(full, e_off + e - 1, 0)] if len(e_flat) else -1, -1)
    bad |= full & (last != np.where(has_b, b_val, c_val))
    fin_bad, fin_none = cols.finished()
    bad |= fin_bad | (et_known & (e < acc + 1) & fin_none)
    out["finished"] = ~fin_none
    bad |= cols.stop_reason_bad()
    bad |= cols.policy_fields_bad() | cols.rare()
    first = int(np.argmax(bad)) if bad.any() else None
    return first, out


def fill_counts(steps: list[dict], cols: dict[str, np.ndarray]) -> None:
    """Set `window` / `emitted` on steps that do not state them (the screen checked those that do),
    and the optional fields' defaults (STEP_DEFAULTS), so every loaded step has every key."""
    if not steps:
        return
    try:  # every step has every key (what writers produce), none null: nothing to fill, one C-level pass to know
        list(map(itemgetter("window", "emitted", *STEP_DEFAULTS), steps))  # a KeyError where a key is left out
        if None not in map(itemgetter("window"), steps) and None not in map(itemgetter("emitted"), steps):
            return
    except KeyError:
        pass
    if not all(s.get("window") is not None and s.get("emitted") is not None for s in steps):
        # a count left out, or null (a Parquet column is null where a row did not state it): the screen's count
        known = cols["window_known"].tolist() if "window_known" in cols else [True] * len(steps)
        for s, wi, ei, k in zip(steps, cols["window"].tolist(), cols["emitted"].tolist(), known):
            if s.get("window") is None:
                s["window"] = wi if k else None  # an import that lacks the window: unknown, as the reference
            if s.get("emitted") is None:
                s["emitted"] = ei
    for k, v in STEP_DEFAULTS.items():
        if not all(k in s for s in steps):
            for s in steps:
                if k not in s:
                    s[k] = v() if callable(v) else v
