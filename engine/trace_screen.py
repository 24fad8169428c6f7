"""Whole-column screening of step records: `engine.trace_check.validate_step`, vectorised.

Why: a 200k-step trace has ~5M field values. Checking them one `isinstance` at a time in Python
costs ~10 s on a small CPU; gathering each field into one list, asking for the set of its types
(one C call) and range-checking it as a numpy array costs well under a second. The screen only says
*which step is the first bad one*; the loader then runs the reference `validate_step` on that step
for the exact one-line message, so messages stay defined in one place (engine/trace_check.py).

The screen must reject at least what `validate_step` rejects. Rules that are cheap per row but
awkward as columns (multi-draft blocks, decisions, the accepted prefix) run as plain comprehensions.
"""

from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np

from engine.trace_check import (FINISHED, INT_FIELDS, MAX_ENTROPY, MAX_MS, MAX_WINDOW, TIME_FIELDS, TOKEN_MAX,
                                validate_step)

_MISSING = object()


def _col(steps: list[dict], k: str) -> list:
    try:
        return list(map(itemgetter(k), steps))
    except KeyError:  # rare: some step lacks the field; those rows are flagged by their type check
        return [s.get(k, _MISSING) for s in steps]


def _types_ok(col: list, allowed: tuple[type, ...]) -> np.ndarray | None:
    """None when every value's exact type is allowed (the common case, one C-level pass), else a
    per-row bad mask."""
    if set(map(type, col)) <= set(allowed):
        return None
    return np.fromiter((type(x) not in allowed for x in col), bool, len(col))


def _ints(col: list, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(bad mask, values as int64 with bad rows zeroed) for an integer column bounded to [lo, hi]."""
    n = len(col)
    bad = _types_ok(col, (int,))
    if bad is None:
        try:
            a = np.array(col, dtype=np.int64)
            bad = (a < lo) | (a > hi)
            return bad, np.where(bad, 0, a)
        except OverflowError:  # an int beyond int64: certainly out of range; fall through per row
            bad = np.zeros(n, bool)
    ok = ~bad & np.fromiter((type(x) is int and lo <= x <= hi for x in col), bool, n)
    a = np.fromiter((x if o else 0 for x, o in zip(col, ok)), np.int64, n)
    return ~ok, a


def _flat(col: list, lengths: np.ndarray) -> tuple[list, np.ndarray]:
    return list(chain.from_iterable(col)), np.repeat(np.arange(len(col)), lengths)


def _row_any(flat_bad: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, bool)
    out[rows[flat_bad]] = True
    return out


def _lists(col: list) -> tuple[np.ndarray, np.ndarray]:
    """(bad mask for non-lists, lengths with non-lists as 0)."""
    n = len(col)
    bad = _types_ok(col, (list,))
    if bad is None:
        return np.zeros(n, bool), np.fromiter(map(len, col), np.int64, n)
    return bad, np.fromiter((len(x) if type(x) is list else 0 for x, b in zip(col, bad)), np.int64, n)


def _token_lists(col: list, max_len: int, min_len: int = 0) -> tuple[np.ndarray, np.ndarray]:
    bad, lens = _lists(col)
    bad |= (lens > max_len) | (lens < min_len)
    lens = np.where(bad, 0, lens)
    flat, rows = _flat([c if not b else [] for c, b in zip(col, bad)] if bad.any() else col, lens)
    fbad, _ = _ints(flat, 0, TOKEN_MAX - 1)
    return bad | _row_any(fbad, rows, len(col)), lens


def _num_lists(col: list, lens: np.ndarray, hi: float) -> np.ndarray:
    n = len(col)
    bad, got = _lists(col)
    bad |= got != lens
    use = [c if not b else [] for c, b in zip(col, bad)] if bad.any() else col
    flat, rows = _flat(use, np.where(bad, 0, got))
    tbad = _types_ok(flat, (int, float))
    if tbad is not None:
        bad |= _row_any(tbad, rows, n)
        flat = [x if not b else 0.0 for x, b in zip(flat, tbad)]
    try:
        a = np.array(flat, dtype=np.float64)
    except OverflowError:  # an int too large for a double: find it per value
        a = np.fromiter((float(x) if abs(x) < 1e300 else np.inf for x in flat), np.float64, len(flat))
    with np.errstate(invalid="ignore"):
        vbad = ~np.isfinite(a) | (a < -1e-6) | (a > hi + 1e-6)
    return bad | _row_any(vbad, rows, n)


def _times(col: list) -> tuple[np.ndarray, np.ndarray]:
    n = len(col)
    bad = _types_ok(col, (int, float))
    vals = col if bad is None else [x if not b else 0.0 for x, b in zip(col, bad)]
    bad = np.zeros(n, bool) if bad is None else bad
    try:
        a = np.array(vals, dtype=np.float64)
    except OverflowError:
        a = np.fromiter((float(x) if abs(x) < 1e300 else np.inf for x in vals), np.float64, n)
    with np.errstate(invalid="ignore"):
        bad |= ~np.isfinite(a) | (a < 0) | (a > MAX_MS)
    return bad, np.where(bad, 0.0, a)


def screen_steps(steps: list[dict]) -> tuple[int | None, dict[str, np.ndarray]]:
    """(index of the first step `validate_step` would refuse, or None; numeric columns of the steps).

    On success the columns (request_id, step, context_len, window, accepted, emitted, t_* in ms) feed
    the vectorised summary and the cross-record checks; `window` / `emitted` are filled in the dicts."""
    n = len(steps)
    if n == 0:
        return None, {}
    bad = np.zeros(n, bool)
    cols: dict[str, np.ndarray] = {}
    if _types_ok(steps, (dict,)) is not None:  # callers pass dicts; a guard, not a path
        return int(np.argmax(_types_ok(steps, (dict,)))), {}
    for k, (lo, hi) in INT_FIELDS.items():
        b, cols[k] = _ints(_col(steps, k), lo, hi)
        bad |= b
    draft = _col(steps, "draft_tokens")
    b, w = _token_lists(draft, MAX_WINDOW)
    bad |= b
    emitted_tokens = _col(steps, "emitted_tokens")
    b, e = _token_lists(emitted_tokens, MAX_WINDOW + 1, min_len=1)
    bad |= b
    cols["window"], cols["emitted"] = w, e
    for k, counted, hi in (("window", w, MAX_WINDOW), ("emitted", e, MAX_WINDOW + 1)):
        stated = [s.get(k, _MISSING) for s in steps] if any(k not in s for s in steps) else _col(steps, k)
        present = np.fromiter((x is not _MISSING for x in stated), bool, n)
        b, a = _ints([x if x is not _MISSING else 0 for x in stated], 0, hi)
        bad |= present & (b | (a != counted))
    acc = cols["accepted"]
    bad |= (w > cols["window_cap"]) | (acc > w) | (e > acc + 1)
    # The accepted prefix: emitted_tokens[:m] == draft_tokens[:m], m = min(accepted, emitted).
    bad |= np.fromiter((et[:m] != dt[:m] if not b else False
                        for et, dt, m, b in zip(emitted_tokens, draft, np.minimum(acc, e).tolist(), bad)), bool, n)
    for k, hi in (("q_draft", 1.0), ("p_target", 1.0), ("accept_probs", 1.0), ("draft_entropy", MAX_ENTROPY)):
        bad |= _num_lists(_col(steps, k), w, hi)
    for k in TIME_FIELDS:
        b, cols[k] = _times(_col(steps, k))
        bad |= b
    bad |= (cols["step"] > 0) & (cols["t_prefill_ms"] != 0)
    rule = [s.get("t_rule_ms") for s in steps]
    has_rule = np.fromiter((x is not None for x in rule), bool, n)
    b, r = _times([x if x is not None else 0.0 for x in rule])
    bad |= has_rule & (b | (r > cols["t_verify_ms"] + 1e-3))
    cor, bonus = [s.get("correction") for s in steps], [s.get("bonus") for s in steps]
    has_c = np.fromiter((x is not None for x in cor), bool, n)
    has_b = np.fromiter((x is not None for x in bonus), bool, n)
    bc, c_val = _ints([x if x is not None else 0 for x in cor], 0, TOKEN_MAX - 1)
    bb, b_val = _ints([x if x is not None else 0 for x in bonus], 0, TOKEN_MAX - 1)
    bad |= (has_c & bc) | (has_b & bb) | (has_c == has_b) | (has_b != (acc == w))
    last = np.fromiter((x[-1] if type(x) is list and x and type(x[-1]) is int and abs(x[-1]) < 1 << 62 else -1
                        for x in emitted_tokens), np.int64, n)
    bad |= (e == acc + 1) & (last != np.where(has_b, b_val, c_val))
    fin = [s.get("finished") for s in steps]
    fin_ok = np.fromiter((type(x) in (str, type(None)) and x in FINISHED for x in fin), bool, n)
    bad |= ~fin_ok | ((e < acc + 1) & np.fromiter((x is None for x in fin), bool, n))
    stop = _col(steps, "stop_reason")
    bad |= np.fromiter((type(x) is not str or len(x) > 64 for x in stop), bool, n)
    bad |= np.fromiter((type(s.get("policy_fields", {})) is not dict for s in steps), bool, n)
    # Multi-draft and decision fields are rare and short: the reference check itself, per row that has them.
    for i, s in enumerate(steps):
        if bad[i]:
            continue
        if s.get("all_drafts") is not None or s.get("decisions") is not None or s.get("chosen", 0) != 0 \
                or type(s.get("chosen", 0)) is not int:
            try:
                validate_step(dict(s), "")
            except ValueError:
                bad[i] = True
    first = int(np.argmax(bad)) if bad.any() else None
    if first is None:
        for s, wi, ei in zip(steps, w.tolist(), e.tolist()):
            if "window" not in s:
                s["window"] = wi
            if "emitted" not in s:
                s["emitted"] = ei
    return first, cols
