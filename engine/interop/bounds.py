"""What accepted lengths alone say about per-step windows: a renewal-reward bound.

A trace imported from Spec-Bench has, per verify call j, only the accepted count a_j (= accept
length − 1). The reference-run analysis (engine.offline.analysis) needs the draft's and target's tokens at
every position to replay other windows; these traces have neither. What they do support:

Renewal model (the one behind engine.offline.costmodel's i.i.d. oracle forms, with the empirical
distribution of A in place of the geometric one): every verify call starts an accepted run A drawn
independently from the observed {a_j}; under the flat cost model a step with window γ costs γc + 1
target forwards (c = draft/target cost per token) and emits min(A, γ) + 1 tokens. Then

    S_fixed(γ) = E[min(A, γ) + 1] / (γc + 1)
    S_oracle   = E[A + 1] / (c·E[A] + 1)          window = A: nothing wasted (oracle (a))
    bound      = S_oracle / max_γ S_fixed(γ)

**The bound is an upper bound on what any per-step window policy can gain over the best fixed
window on this accepted-length distribution**: a policy drafting w emits min(A, w) + 1 at cost
wc + 1, which min(w, A) matches with less cost, and E[w + 1]/(c·E[w] + 1) grows with E[w] ≤ E[A].

Caveats the page repeats: accepted counts are censored at the window the run used (a step that
accepted everything it drafted could have accepted more), so the true A — and the oracle — may be
larger; fixed γ above the run's smallest window is understated for the same reason. Tree methods
(EAGLE, Medusa, …) report the accepted path of a tree: the chain model above is then a reading of
their accept lengths, not a replay of their drafting.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np
import pandas as pd


def renewal_bound(accepted: Sequence[int], c: float, gammas: Iterable[int] = range(1, 17)) -> dict[str, float]:
    """S_fixed at the best γ, S_oracle and their ratio (see module docstring) for accepted counts."""
    a = np.asarray(list(accepted), dtype=float)
    if a.size == 0:
        raise ValueError("no steps: the bound needs at least one accepted count")
    if not 0.0 <= c <= 100.0:
        raise ValueError(f"cost ratio c must be in [0, 100], got {c}")
    fixed = {g: float(np.minimum(a, g).mean() + 1.0) / (g * c + 1.0) for g in gammas}
    g_best = max(fixed, key=fixed.get)
    s_oracle = float(a.mean() + 1.0) / (c * float(a.mean()) + 1.0)
    return {"steps": int(a.size), "mean_accepted": float(a.mean()), "c": c, "best_gamma": int(g_best),
            "s_best_fixed": fixed[g_best], "s_oracle": s_oracle, "bound": s_oracle / fixed[g_best]}


def fixed_curve(accepted: Sequence[int], c: float, gammas: Iterable[int] = range(1, 17)) -> pd.DataFrame:
    """S_fixed(γ) per γ under the renewal model (the curve the bound's denominator maximises)."""
    a = np.asarray(list(accepted), dtype=float)
    return pd.DataFrame([{"gamma": g, "speedup": float(np.minimum(a, g).mean() + 1.0) / (g * c + 1.0)}
                         for g in gammas])


def variability(frame: pd.DataFrame, c: float) -> pd.DataFrame:
    """Per task and 'all' of a frame with columns task, accepted: the spread of A (mean, std,
    coefficient of variation, share of A = 0, quartiles, p90, max) and the renewal bound at c.
    A wide spread is what a per-step window exploits: with a constant A every γ = A is the oracle."""
    rows = []
    for task in ["all"] + sorted(set(frame["task"])):
        g = frame if task == "all" else frame[frame["task"] == task]
        x = g["accepted"].to_numpy(dtype=float)
        if x.size == 0:
            continue
        q25, med, q75, p90 = np.percentile(x, [25, 50, 75, 90])
        b = renewal_bound(x, c)
        rows.append({"task": task, "steps": int(x.size), "A_mean": float(x.mean()), "A_std": float(x.std()),
                     "A_cv": float(x.std() / x.mean()) if x.mean() > 0 else math.nan,
                     "frac_A0": float((x == 0).mean()), "A_q25": float(q25), "A_median": float(med),
                     "A_q75": float(q75), "A_p90": float(p90), "A_max": float(x.max()),
                     "best_gamma": b["best_gamma"], "s_best_fixed": b["s_best_fixed"], "s_oracle": b["s_oracle"],
                     "bound": b["bound"]})
    return pd.DataFrame(rows)
