"""How the app prints numbers that are not plain decimals: durations, deltas beside a metric, and the
words a raw field name stands for. Pure; used by the pages and the plots so one figure reads the
same everywhere."""

from __future__ import annotations

import math

# Raw field names that reach a label, legend or table header, in words (the list and kin).
WORDS = {"weight_share": "share of the loss weight", "max_lossless_error": "largest lossless error",
         "mass_error": "probability mass error", "blocks.t_before": "draft cost before the block (ms)",
         "mb_ms": "pre-verifier ms per call", "t_draft_ms": "draft ms", "t_verify_ms": "verify ms",
         "speedup_vs_ar": "speedup vs AR", "tau": "τ (accepted per block)", "alpha": "α",
         "t_before": "threshold before the block", "t_after": "threshold after the block", "blocks": "PACER blocks",
         "max_first_token_error": "largest first-token error", "max_mass_error": "largest mass error",
         "min_deficit": "smallest deficit", "max_fallback_mass": "largest fallback mass", "worst_case": "worst toy",
         "worst_vocab": "worst toy's V", "worst_gamma": "worst toy's γ", "worst_k": "worst toy's K",
         "q_draft": "the draft's probabilities (q)", "p_target": "the target's probabilities (p)",
         "accepted_per_step": "per-step accepted counts"}


def labelled(df):
    """A frame whose column names are raw fields, with headers in words (for st.dataframe)."""
    return df.rename(columns={c: words(c) for c in df.columns})


def words(name: str) -> str:
    """A raw field name in words; names without an entry get their underscores as spaces."""
    return WORDS.get(name, str(name).replace("_", " "))


def duration(ms: float | None) -> str:
    """'410.3 s' rather than '410321' ms; under a second in ms; '—' when unknown."""
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "—"
    if abs(ms) >= 60_000:
        return f"{ms / 60_000:.1f} min"
    if abs(ms) >= 1000:
        return f"{ms / 1000:.1f} s"
    return f"{ms:.0f} ms"


def time_unit(ms_values) -> tuple[float, str]:
    """(divisor, unit) for a column of durations given in ms: seconds once any reaches a second (a table
    column reads 410.3, headed s, not 410321), else ms."""
    top = max((abs(float(x)) for x in ms_values if x is not None and x == x), default=0.0)
    return (1000.0, "s") if top >= 1000 else (1.0, "ms")


def delta(d: float | None, text: str | None = None) -> tuple[str | None, str]:
    """(delta text without its sign, arrow) for st.metric: the arrow alone says up or down, so a
    metric never reads '↓ -1.04'. `text` is the magnitude as it should print (default 2 decimals)."""
    if d is None or (isinstance(d, float) and math.isnan(d)):
        return None, "off"
    if d == 0:
        return "±0", "off"
    return (text if text is not None else f"{abs(d):.2f}"), ("up" if d > 0 else "down")
