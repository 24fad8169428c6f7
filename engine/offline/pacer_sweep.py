"""PACER's held-out sweep, baselines and ceiling: the real policies replayed over recorded steps.

Input: held-out steps recorded with a fixed window W = 16 (engine.offline.steps), each with the
accepted count n (excludes the bonus), and per drafted token i: q_i(x_i), H(q_i) and M_B's score s_i.
Every rule is the engine's own policy class (Fixed, Heuristic, Confidence, Cumulative, Entropy, Pacer
fed the recorded scores, the oracle) walked by the one replay (engine.offline.replay.walk over
`recorded_steps`) and priced by the one cost model (engine.offline.costmodel.CostModel.from_ms):

    accepted' = min(n, w)          emitted' = accepted' + 1     (emitted includes the bonus/correction)
    cost(w)   = d·t_d + t_v(w+1) + m·t_mb                       (m = M_B calls the policy made)
    speedup   = t_v(1) · Σ emitted' / Σ cost                    (autoregressive: 1 token per t_v(1))

d = drafted tokens (= w, except for trimming rules, which draft d and verify only w = d − dropped).
t_d = the recording run's draft ms per drafted token (real loop, median), t_v(k) = measured target
forward of k tokens on a warm cache, t_mb = measured M_B call. Oracle (exact): w = n, no waste.

Approximation (stated with every table): steps are replayed independently. A policy that stops
before the first mismatch would start its next step at a different position than the recording;
we treat recorded steps as samples of decoding situations instead (the renewal-reward view of the
project notes §2.4). Greedy and sampled steps are both exact per step: the draft tokens and the
verifier's uniforms do not depend on the window. The real benchmark (engine.bench.bench) is the check.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from engine.offline.costmodel import CostModel
from engine.offline.replay import (EXACT_SCORES, OracleSpec, RecordedStep, by_request, parse_spec, recorded_steps,
                                   walk)
from engine.policies.base import WindowPolicy
from engine.policies.pacer import Pacer

FIXED = (1, 2, 3, 4, 6, 8, 12, 16)  # the fixed windows every table compares against


def pacer(b: int, t0: float, rho: float, cap: int = 16, trim: int = 0) -> Pacer:
    """The Pacer policy with no M_B of its own: the replay feeds it each step's recorded scores."""
    return Pacer(block=b, threshold=t0, rho=rho, max_window=cap, trim=trim, precomputed=True)


def perfect_preverifier(cap: int = 16) -> Pacer:
    """PACER's ceiling: b = 1, trim = 1 with an M_B that is never wrong (scores 1 for the n accepted
    drafts, 0 after). It drafts token n+1 (the first one the target rejects), scores it, drops it
    and verifies n: the same window as the oracle, plus the one draft forward and M_B call the
    oracle never pays (no call at the cap, as in Pacer). Replay it with tag=EXACT_SCORES."""
    return pacer(1, 0.5, 1.0, cap, trim=1)


def replay(steps: list[RecordedStep], policy: WindowPolicy | OracleSpec | str, cost: CostModel,
           tag: str = "main") -> dict[str, float]:
    """Simulated speedup, emitted per call (incl. bonus), mean window and wasted drafts. `tag`: whose
    M_B scores a pre-verifier policy is fed (a variant's, or EXACT_SCORES)."""
    pol = parse_spec(policy) if isinstance(policy, str) else policy
    scores = tag if not isinstance(pol, OracleSpec) and pol.needs_hidden else None
    emitted = time = window = wasted = 0.0
    for req in by_request(steps):  # the policy's state (heuristic's γ) lives per request
        for s in walk(recorded_steps(req, scores), pol, cost):
            emitted += s["emitted"]
            window += s["window"]
            wasted += s["drafted"] - s["accepted"]  # dropped drafts are wasted draft work too
            time += s["cost"]
    n = max(1, len(steps))
    return {"speedup": cost.v(0) * emitted / time, "mean_emitted_per_call_incl_bonus": emitted / n, "mean_window": window / n,
            "wasted_per_call": wasted / n}


def sweep(steps: list[RecordedStep], cost: CostModel, blocks=(1, 2, 4),
          t0s=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9), rhos=(1.0, 1.05, 1.1, 1.2), cap: int = 16,
          tag: str = "main", trims=(0, 1), sampled: bool = False) -> list[dict[str, Any]]:
    """Every (b, t₀, ρ, trim) rule, best first. `sampled`: only rules exact under sampling (trim needs b = 1)."""
    rows = []
    for b, t, r, tr in itertools.product(blocks, t0s, rhos, trims):
        if sampled and tr and b > 1:
            continue
        rows.append({"b": b, "t": t, "rho": r, "max": cap, "trim": tr,
                     **replay(steps, pacer(b, t, r, cap, tr), cost, tag)})
    return sorted(rows, key=lambda x: -x["speedup"])


def baselines(steps: list[RecordedStep], cost: CostModel) -> dict[str, dict[str, float]]:
    """Fixed windows, HF's heuristic, the draft-signal stops, the oracle and the perfect pre-verifier."""
    out = {f"fixed:{g}": replay(steps, f"fixed:{g}", cost) for g in FIXED}
    out["heuristic"] = replay(steps, "heuristic", cost)  # HF +2/−1, start 5, cap 16, state per request
    for t in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
        out[f"confidence:{t}"] = replay(steps, f"confidence:{t}", cost)
        out[f"confidence:{t},trim=1"] = replay(steps, f"confidence:{t},trim=1", cost)
    for t in (0.3, 0.5, 0.6, 0.7, 0.8):
        out[f"cumulative:{t}"] = replay(steps, f"cumulative:{t}", cost)
    for h in (0.5, 1.0, 1.5, 2.0, 3.0):
        out[f"entropy:{h}"] = replay(steps, f"entropy:{h}", cost)
    out["oracle (exact)"] = replay(steps, "oracle:a", cost)
    out["perfect pre-verifier (PACER's ceiling)"] = replay(steps, perfect_preverifier(), cost, EXACT_SCORES)
    return out


def ceiling(steps: list[RecordedStep], cost: CostModel, factors=(1.0, 0.5, 0.25, 0.1, 0.0), cap: int = 16,
            tag: str = "main", sampled: bool = False) -> list[dict[str, Any]]:
    """How close PACER gets to the oracle as the draft gets cheaper: per factor f (t_d → f·t_d), the
    oracle, the perfect pre-verifier, the best PACER rule and the best fixed window, with the
    two ratios to the oracle. The oracle never drafts the token it would lose; every look-then-decide
    rule does, so their gap closes only as f → 0."""
    rows = []
    for f in factors:
        c = replace(cost, c=cost.c * f)
        orc = replay(steps, "oracle:a", c)["speedup"]
        perfect = replay(steps, perfect_preverifier(cap), c, EXACT_SCORES)["speedup"]
        grid = sweep(steps, c, cap=cap, tag=tag, sampled=sampled)
        fixed_best = max((replay(steps, f"fixed:{g}", c)["speedup"], g) for g in FIXED)
        best = grid[0]
        rows.append({"draft_cost_factor": f, "t_draft_ms": c.c * c.target_ms, "oracle": orc,
                     "perfect_preverifier": perfect,
                     "pacer_best": best["speedup"], "pacer_best_rule": {k: best[k] for k in ("b", "t", "rho", "trim")},
                     "fixed_best": fixed_best[0], "fixed_best_gamma": fixed_best[1],
                     "perfect_over_oracle": perfect / orc, "pacer_over_oracle": best["speedup"] / orc,
                     "pacer_over_fixed": best["speedup"] / fixed_best[0]})
    return rows


def measure_mb_ms(model, hidden_size: int, n: int = 8, reps: int = 50) -> float:
    """Median ms of one M_B call over an n-token step (the policy's per-block cost)."""
    import torch

    from engine.measure import median_ms

    h, q, e = torch.randn(n, hidden_size), torch.rand(n), torch.rand(n)
    return median_ms(lambda: model.score_step(h, q, e), reps, warmup=0)
