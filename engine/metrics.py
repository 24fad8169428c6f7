"""The one vocabulary of metric names and the one run summary.

Every figure about how much a speculative step yields has one name here, used by trace summaries
(footers, `python -m engine validate`), bench rows, sweep summary rows, multibench rows, the Spec-Bench
interop and the app's labels. The names are those of the trace summary (trace schema v1, so the
bundled traces' footers already carry them):

    EMITTED_PER_CALL   mean_emitted_per_call_incl_bonus   new tokens ÷ target (verify) calls, the
                       bonus/correction token included: 1.00 for autoregressive decoding
    ACCEPTED_PER_CALL  mean_accepted_per_call_excl_bonus  accepted draft tokens ÷ target calls, the
                       bonus excluded: EMITTED_PER_CALL − 1 for runs that never stop short
    ACCEPTANCE_RATE    draft_acceptance_rate              accepted draft tokens ÷ drafted tokens (None
                       when the drafts are unknown: imported runs, HF's internal prompt lookup)
    MODELLED_SPEEDUP   modelled_speedup_vs_ar             a bench row's target calls (by window), draft
                       tokens and draft prefill tokens priced at the run's own median costs, ÷ AR's
                       (engine.bench.modelled)

The same quantities elsewhere:

    vLLM "mean acceptance length"              = EMITTED_PER_CALL (vLLM counts the bonus token)
    vLLM "draft acceptance rate"               = ACCEPTANCE_RATE (accepted ÷ drafted)
    Spec-Bench "#Mean accepted tokens" τ       = EMITTED_PER_CALL (mean of `accept_lengths`, each
                                                  accepted + 1, so it includes the bonus token)
    SpecTr-GBV paper "block efficiency" (BE)   = EMITTED_PER_CALL
    D-PACE / EAGLE papers' τ                   = EMITTED_PER_CALL

Old names that result files written before this vocabulary still carry are listed in LEGACY and
mapped by `canonical_row` when such a file is read back (bench / multibench `--from-json`, sweep
summaries on disk).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import numpy as np

EMITTED_PER_CALL = "mean_emitted_per_call_incl_bonus"
ACCEPTED_PER_CALL = "mean_accepted_per_call_excl_bonus"
ACCEPTANCE_RATE = "draft_acceptance_rate"
# A bench row's run priced at the run's own median costs instead of timed (engine.bench.modelled):
# hardware-noise-free, beside the wall-clock `speedup_vs_ar`.
MODELLED_SPEEDUP = "modelled_speedup_vs_ar"

# Column headers and metric labels (tables, the app's pages): one wording per quantity.
LABELS = {
    EMITTED_PER_CALL: "emitted per call (incl. bonus)",
    ACCEPTED_PER_CALL: "accepted per call (excl. bonus)",
    ACCEPTANCE_RATE: "acceptance rate (accepted ÷ drafted)",
    MODELLED_SPEEDUP: "modelled speedup vs AR (run's counts × its median costs)",
}
SHORT_LABELS = {EMITTED_PER_CALL: "emitted/call", ACCEPTED_PER_CALL: "accepted/call", ACCEPTANCE_RATE: "acceptance"}

# Names the same quantities had in result files (bench rows, sweep summaries, multibench rows, the
# Spec-Bench speed table) before this vocabulary.
LEGACY = {
    "emitted_per_call_incl_bonus": EMITTED_PER_CALL,  # bench rows, sweep summary.parquet
    "block_efficiency": EMITTED_PER_CALL,  # multibench rows
    "mean_accept_length": EMITTED_PER_CALL,  # the Spec-Bench speed table
    "accepted_per_call_excl_bonus": ACCEPTED_PER_CALL,  # sweep summary.parquet
    "accepted_per_call": ACCEPTED_PER_CALL,  # multibench rows
    "emitted_per_call": EMITTED_PER_CALL,  # analysis tables (window_table, simulate_policy)
    "expected_emitted_per_call": EMITTED_PER_CALL,  # analysis iid_theory
    "acceptance_rate": ACCEPTANCE_RATE,  # bench rows, sweep summary.parquet
}


def rates(new_tokens: int, target_calls: int, accepted: int | None, drafted: int | None) -> dict[str, Any]:
    """The three per-call figures from totals. `drafted` (or `accepted`) None: the drafts are unknown
    (or there were none, as a bench row of autoregressive decoding says) → ACCEPTANCE_RATE None."""
    calls = max(target_calls, 1)
    return {EMITTED_PER_CALL: new_tokens / calls if target_calls else 0.0,
            ACCEPTED_PER_CALL: (accepted / calls if target_calls else 0.0) if accepted is not None else None,
            ACCEPTANCE_RATE: None if drafted is None or accepted is None else (accepted / drafted if drafted else 0.0)}


def canonical_row(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with legacy metric names renamed to this vocabulary (a name already present wins)."""
    out = dict(row)
    for old, new in LEGACY.items():
        if old in out:
            v = out.pop(old)
            out.setdefault(new, v)
    return out


def canonical_frame(df):
    """A pandas DataFrame with legacy metric columns renamed (sweep summaries written before)."""
    ren = {old: new for old, new in LEGACY.items() if old in df.columns and new not in df.columns}
    return df.rename(columns=ren) if ren else df


# ------------------------------------------------------------------ the run summary


def _sum(a: np.ndarray) -> float:
    """Left-to-right float sum (numpy's `sum` adds pairwise: other last bits than Python's `sum`)."""
    return float(np.cumsum(a)[-1]) if len(a) else 0.0


def summary_of_columns(c: dict[str, np.ndarray] | None, n_ends: int) -> dict[str, Any]:
    """The run summary (a trace footer's `summary`) from step columns: request_id, window, accepted,
    emitted, t_draft_ms, t_verify_ms, t_prefill_ms. Every count says whether it includes the bonus.

    Float sums are left to right (`cumsum`, like Python's `sum`), so the figures equal a loop's to the
    last bit: a footer written by one path and recomputed by the loader on the other must agree."""
    if c is None or not len(c["accepted"]):
        return {"requests": 0, "requests_finished": n_ends, "target_calls": 0, "new_tokens": 0, "drafted_tokens": 0,
                "accepted_tokens_excl_bonus": 0, EMITTED_PER_CALL: 0.0, ACCEPTED_PER_CALL: 0.0, ACCEPTANCE_RATE: 0.0,
                "tokens_per_s": 0.0, "tokens_per_s_mean_over_requests": 0.0, "decode_ms": 0, "draft_ms": 0,
                "verify_ms": 0, "accepted_histogram": {}}
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
        EMITTED_PER_CALL: e / n, ACCEPTED_PER_CALL: a / n, ACCEPTANCE_RATE: a / w if w else 0.0,
        "tokens_per_s": e / (t_ms / 1e3) if t_ms > 0 else 0.0,
        "tokens_per_s_mean_over_requests": _sum(tps) / len(tps) if len(tps) else 0.0,
        "decode_ms": t_ms, "draft_ms": _sum(c["t_draft_ms"]), "verify_ms": _sum(c["t_verify_ms"]),
        "accepted_histogram": {str(int(v)): int(k) for v, k in zip(vals, counts)},
    }


def summarize_steps(steps: list[dict], n_ends: int = 0) -> dict[str, Any]:
    """The run summary from step dicts (a TraceWriter's, an importer's). Columns are gathered in one
    pass and summed with numpy: ~10x faster than a loop at 200k steps, to the same last bit.
    Imported runs may not know how much was drafted (`window` None): then neither does the summary."""
    if not steps:
        return summary_of_columns(None, n_ends)
    rid, win, acc, emi, td, tv, tp = zip(*map(itemgetter("request_id", "window", "accepted", "emitted", "t_draft_ms",
                                                         "t_verify_ms", "t_prefill_ms"), steps))
    drafted_known = None not in win
    c = {"request_id": np.array(rid), "window": np.array(win if drafted_known else [w or 0 for w in win], np.int64),
         "accepted": np.array(acc, np.int64), "emitted": np.array(emi, np.int64),
         "t_draft_ms": np.array(td, np.float64), "t_verify_ms": np.array(tv, np.float64),
         "t_prefill_ms": np.array(tp, np.float64)}
    out = summary_of_columns(c, n_ends)
    if not drafted_known:
        out["drafted_tokens"] = out[ACCEPTANCE_RATE] = None
    return out
