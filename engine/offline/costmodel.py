"""Cost model of one speculative step, and the Leviathan / i.i.d.-oracle closed forms. The model itself is
engine.cost.StepCost (the one cost vocabulary); CostModel adds the ways the analysis side builds it.

Units: one target forward of a single token = 1 (so autoregressive decoding costs 1 per token).
A step with window γ (γ drafted tokens, γ+1 tokens verified by one target forward) costs

    cost(γ) = γ · c + v(γ),      v(0) = 1

c = draft cost per drafted token ÷ target single-token forward; v(γ) = t_target(γ+1 tokens) ÷
t_target(1 token) — flat (v ≡ 1, Leviathan's assumption) or measured. Beyond the measured range v
is extrapolated linearly from its last two points. A step also pays `mb` per pre-verifier call
(PACER's M_B, same unit) and c per drafted token that a trimming rule dropped unverified; the
replay (engine.offline.replay) adds those two terms.

Closed forms (α = per-token acceptance, i.i.d.; "emitted" includes the bonus token):

    E[emitted per call] = (1 − α^{γ+1}) / (1 − α)                      Leviathan Eq. 1
    S_fixed(γ)          = (1 − α^{γ+1}) / ((1 − α)(γc + 1))            Leviathan Thm 3.8
    S_oracle(a)         = 1 / (cα + 1 − α)      window = accepted run L, nothing wasted
    S_oracle(b)         = 1 / (c + 1 − α)       window = L + 1, the mismatching draft is wasted

(the oracle forms by renewal-reward over geometric L: E[L+1] / E[Lc + 1], project notes §2.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from engine.cost import StepCost, isotonic  # noqa: F401  (isotonic: read here by the app and the bench)


@dataclass(frozen=True)
class CostModel(StepCost):
    """engine.cost.StepCost (the one cost vocabulary: fields, v, step, the ms view) with the constructors
    the analysis side builds it by: flat, from a reference's timings, from wall times, from decode traces."""

    @classmethod
    def flat(cls, c: float) -> "CostModel":
        """User-set ratio c; verifying any window costs one target forward (Leviathan)."""
        return cls(c=c, label=f"c={c:g} flat")

    @classmethod
    def from_timings(cls, timings: dict[str, Any], flat_verify: bool = False, c: float | None = None,
                     monotone: bool = True) -> "CostModel":
        """From a reference header's `timings` (target_ms_by_tokens, draft_ms_per_token).

        c = draft_ms_per_token / t(1); v(γ) = t(γ+1) / t(1). With `c` given, only v is measured.
        `monotone` fits t(k) non-decreasing in k first (pool-adjacent-violators): a forward of more
        tokens is not cheaper, and on a shared CPU timing noise would otherwise favour odd windows."""
        if not timings or not timings.get("target_ms_by_tokens"):
            raise ValueError("this reference has no timings (made with --no-timing): set a cost ratio with --c")
        t = [float(x) for x in timings["target_ms_by_tokens"]]
        if monotone:
            t = isotonic(t)
        t1 = t[0] if t[0] > 0 else 1e-9
        ratio = float(timings["draft_ms_per_token"]) / t1 if c is None else c
        verify = () if flat_verify else tuple(max(x / t1, 1e-9) for x in t)
        label = f"measured c={ratio:.3g}" + (" flat" if flat_verify else "") if c is None else f"c={c:g} measured-verify"
        return cls(c=ratio, verify=verify, target_ms=t1, label=label)

    @classmethod
    def from_ms(cls, t_draft_ms: float, t_verify_ms: Sequence[float], t_mb_ms: float = 0.0,
                label: str = "") -> "CostModel":
        """From wall times: ms per drafted token, ms of a target forward of k = 1, 2, … tokens
        (t_verify_ms[k−1]) and ms per M_B call — PACER's sweep costs (engine.offline.pacer_sweep).
        c = t_d / t(1), v(γ) = t(γ+1) / t(1), mb = t_mb / t(1); t_verify_ms is used as measured
        (no monotone fit: the sweep prices steps with exactly the recording's curve)."""
        t1 = float(t_verify_ms[0])
        if not t1 > 0:
            raise ValueError(f"t_verify_ms[0] must be positive, got {t1}")
        return cls(c=t_draft_ms / t1, verify=tuple(float(t) / t1 for t in t_verify_ms), target_ms=t1,
                   label=label or f"t_d={t_draft_ms:.3g} ms", mb=t_mb_ms / t1)

    @classmethod
    def from_steps(cls, windows: Sequence[int], t_draft_ms: Sequence[float], t_verify_ms: Sequence[float],
                   max_window: int = 16, label: str = "") -> "CostModel":
        """The costs real decoding paid, from decode-trace steps (one entry per verify call).

            t(1)      = median t_verify of window-0 steps (autoregressive)
            v(γ)      = (median t_verify of window-γ steps + a) / t(1)
            c         = b / t(1),   where  t_draft ≈ a + b·γ  (least squares over steps with γ ≥ 1)

        a is what a step pays the draft whatever its window (catching up on the last emitted tokens),
        so it is charged to the step, not per drafted token. Windows with no steps are interpolated
        linearly between their neighbours (extrapolated beyond the last), then t(k) is made
        non-decreasing. Worked example: AR steps of 100 ms; γ = 2 steps verify in 150 ms and draft in
        30 + 2·20 ms → c = 0.2, v(2) = (150 + 30) / 100 = 1.8, step(2) = 2·0.2 + 1.8 = 2.2."""
        import numpy as np

        w = np.asarray(windows, dtype=int)
        td, tv = np.asarray(t_draft_ms, dtype=float), np.asarray(t_verify_ms, dtype=float)
        if not (len(w) == len(td) == len(tv)):
            raise ValueError("windows, t_draft_ms and t_verify_ms must have one entry per step")
        ok = np.isfinite(td) & np.isfinite(tv) & (tv > 0) & (w >= 0)
        w, td, tv = w[ok], td[ok], tv[ok]
        if not (w == 0).any():
            raise ValueError("an in-run cost model needs autoregressive steps (window 0) for t(1)")
        spec = w >= 1
        if len(set(w[spec].tolist())) < 2:
            raise ValueError("an in-run cost model needs speculative steps of at least two window sizes")
        t1 = float(np.median(tv[w == 0]))
        b, a = np.polyfit(w[spec], td[spec], 1)
        b, a = max(float(b), 0.0), max(float(a), 0.0)
        seen = sorted(set(w.tolist()))
        med = {g: float(np.median(tv[w == g])) for g in seen}
        grid = np.arange(max_window + 1)
        xs = np.array(seen, dtype=float)
        ys = np.array([med[g] for g in seen])
        tk = np.interp(grid, xs, ys)
        if len(xs) >= 2 and grid[-1] > xs[-1]:  # np.interp holds the last value flat: extend its slope
            slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
            tk = np.where(grid > xs[-1], ys[-1] + slope * (grid - xs[-1]), tk)
        tk = isotonic(tk.tolist())
        verify = tuple(max((tk[g] + (a if g else 0.0)) / t1, 1e-9) for g in grid)
        return cls(c=b / t1, verify=verify, target_ms=t1,
                   label=label or f"in-run c={b / t1:.3g} (+{a / t1:.2f} per step)")


def expected_emitted(alpha: float, gamma: int) -> float:
    """E[emitted per call, incl. bonus] = (1 − α^{γ+1}) / (1 − α); γ+1 when α = 1."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def leviathan_speedup(alpha: float, gamma: int, c: float) -> float:
    """S = (1 − α^{γ+1}) / ((1 − α)(γc + 1)), flat verify cost."""
    return expected_emitted(alpha, gamma) / (gamma * c + 1.0)


def oracle_speedup(alpha: float, c: float, variant: str = "a") -> float:
    """i.i.d. oracle: (a) 1 / (cα + 1 − α), (b) 1 / (c + 1 − α)."""
    if variant not in ("a", "b"):
        raise ValueError(f"oracle variant must be 'a' or 'b', got {variant!r}")
    return 1.0 / ((c * alpha if variant == "a" else c) + 1.0 - alpha)


def iid_theory(alpha: float, c: float, gammas: Sequence[int] = range(1, 17)) -> pd.DataFrame:
    """Closed-form overlay: one row per γ (E emitted, S_fixed), plus the oracle (a)/(b) values and
    ratios to the best γ in `gammas` on every row (columns best_gamma, s_best_fixed, ratio_a, ratio_b)."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    gammas = list(gammas)
    if not gammas or min(gammas) < 1:
        raise ValueError("gammas must be positive integers")
    rows = [{"gamma": g, "mean_emitted_per_call_incl_bonus": expected_emitted(alpha, g),
             "speedup": leviathan_speedup(alpha, g, c)} for g in gammas]
    df = pd.DataFrame(rows)
    best = df.loc[df["speedup"].idxmax()]
    sa, sb = oracle_speedup(alpha, c, "a"), oracle_speedup(alpha, c, "b")
    return df.assign(alpha=alpha, c=c, best_gamma=int(best["gamma"]), s_best_fixed=float(best["speedup"]),
                     s_oracle_a=sa, s_oracle_b=sb, ratio_a=sa / float(best["speedup"]),
                     ratio_b=sb / float(best["speedup"]), exact="closed form (i.i.d. acceptance)")


def required_alpha(cm: CostModel, gamma: int, speedup: float, tol: float = 1e-9) -> float | None:
    """Smallest i.i.d. acceptance α at which a fixed window γ reaches `speedup` under `cm`:

        S(α, γ) = E[emitted](α, γ) / cost(γ) = (1 − α^{γ+1}) / ((1 − α)(γc + v(γ)))

    S is increasing in α, from 1/cost(γ) at α = 0 to (γ+1)/cost(γ) at α → 1, so bisection finds it;
    None when even α = 1 falls short. Worked example: flat verify, c = 0, γ = 1, S = 1.5 → α = 0.5.
    """
    if gamma < 1:
        raise ValueError(f"gamma must be ≥ 1, got {gamma}")
    cost = cm.step(gamma)
    if (gamma + 1) / cost < speedup:
        return None
    if 1.0 / cost >= speedup:
        return 0.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if expected_emitted(mid, gamma) / cost >= speedup:
            hi = mid
        else:
            lo = mid
    return hi


def requirements(cm: CostModel, gammas: Sequence[int] = (1, 2, 3, 4, 6, 8),
                 speedups: Sequence[float] = (1.0, 1.3)) -> pd.DataFrame:
    """One row per γ: v(γ), cost(γ), the ceiling (γ+1)/cost(γ) and, per target speedup S, the
    acceptance α that γ needs to reach S (NaN where unreachable at any α)."""
    rows = []
    for g in gammas:
        row = {"gamma": g, "v": cm.v(g), "cost": cm.step(g), "ceiling": (g + 1) / cm.step(g)}
        for s in speedups:
            a = required_alpha(cm, g, s)
            row[f"alpha_for_{s:g}x"] = float("nan") if a is None else a
        rows.append(row)
    return pd.DataFrame(rows)
