"""Offline replay of window policies over recorded fixed-window steps: PACER's sweep and ablations.

Input: held-out steps recorded with a fixed window W = 16 (engine.train.pacer.data), each with the
accepted count n (excludes the bonus), and per drafted token i: q_i(x_i), H(q_i) and M_B's score s_i.
A policy picks a window w ≤ W from the step's signals alone; then, for the SAME step,

    accepted' = min(n, w)          emitted' = accepted' + 1     (emitted includes the bonus/correction)
    cost(w)   = d·t_d + t_v(w+1) + m·t_mb                       (m = M_B calls the policy made)

d = drafted tokens (= w, except for trimming rules, which draft d and verify only w = d − dropped).
    speedup   = t_v(1) · Σ emitted' / Σ cost                    (autoregressive: 1 token per t_v(1))

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
from dataclasses import dataclass
from typing import Any, Callable

import torch

from engine.train.pacer.data import StepData, score_all


@dataclass(frozen=True)
class Costs:
    t_draft: float  # ms per drafted token in the real loop
    t_verify: tuple[float, ...]  # t_verify[k-1] = ms of a target forward of k tokens
    t_mb: float = 0.0  # ms per M_B call

    def tv(self, k: int) -> float:
        return self.t_verify[min(k, len(self.t_verify)) - 1]


@dataclass
class Step:
    n: int  # accepted (excl. bonus) in the recording
    W: int  # recorded window
    q: list[float]
    ent: list[float]
    s: dict[str, list[float]]  # M_B scores per model tag
    request: int
    temperature: float


def steps_from(data: StepData, scores: dict[str, torch.Tensor]) -> list[Step]:
    out = []
    for i in range(data.n_steps):
        a, e = int(data.step_off[i]), int(data.step_off[i + 1])
        out.append(Step(int(data.accepted[i]), int(data.window[i]), data.q[a:e].tolist(), data.ent[a:e].tolist(),
                        {k: v[a:e].tolist() for k, v in scores.items()}, int(data.request[i]),
                        float(data.temperature[i])))
    return out


# A window rule maps a step to (w, M_B calls) or, when it drafts more than it verifies (trim), to
# (w, M_B calls, drafted).
Rule = Callable[[Step], tuple[int, ...]]


def fixed(g: int) -> Rule:
    return lambda st: (min(g, st.W), 0)


def first_stop(pred: Callable[[Step, int], bool], cap: int = 16) -> Rule:
    def rule(st: Step) -> tuple[int, int]:
        for i in range(min(cap, st.W)):
            if pred(st, i):
                return i + 1, 0
        return min(cap, st.W), 0
    return rule


def confidence(t: float, cap: int = 16, trim: int = 0) -> Rule:
    """Mirrors engine.policies.base.Confidence (trim=1: the low-confidence token is drafted, not verified)."""
    def rule(st: Step) -> tuple[int, ...]:
        for i in range(min(cap, st.W)):
            if st.q[i] < t:
                return (i + 1 - trim, 0, i + 1)
        return min(cap, st.W), 0
    return rule


def entropy_stop(h: float, cap: int = 16) -> Rule:
    return first_stop(lambda st, i: st.ent[i] > h, cap)


def cumulative(t: float, cap: int = 16) -> Rule:
    def pred(st, i):
        surv = 1.0
        for j in range(i + 1):
            surv *= st.q[j]
        return 1.0 - surv > t
    return first_stop(pred, cap)


def pacer(b: int, t0: float, rho: float, cap: int = 16, tag: str = "main", trim: int = 0) -> Rule:
    """Mirrors engine.policies.pacer.Pacer.keep_drafting exactly (incl. no M_B call at the cap); trim=1 drops
    the failing block (drafted and scored, never verified)."""
    def rule(st: Step) -> tuple[int, ...]:
        t, calls, s = t0, 0, st.s[tag]
        for n in range(1, min(cap, st.W) + 1):
            if n >= cap:
                return n, calls
            if n % b == 0:
                calls += 1
                m = sum(s[n - b:n]) / b
                if m < t:
                    return (n - b * trim, calls, n)
                t *= rho
        return min(cap, st.W), calls
    return rule


def oracle() -> Rule:
    return lambda st: (min(st.n, st.W), 0)


def perfect_preverifier(cap: int = 16) -> Rule:
    """PACER's ceiling: b = 1, trim = 1 with an M_B that is never wrong. It drafts token n+1 (the
    first one the target rejects), scores it, drops it and verifies n: the same window as the oracle,
    plus the one draft forward and M_B call the oracle never pays (no call at the cap, as in Pacer)."""
    def rule(st: Step) -> tuple[int, ...]:
        top = min(cap, st.W)
        if st.n < top and st.n + 1 < cap:  # token n+1 exists, is scored (not at the cap) and dropped
            return (st.n, st.n + 1, st.n + 1)
        return (top, top - 1 if top >= cap else top, top)
    return rule


def ceiling(steps: list[Step], costs: Costs, factors=(1.0, 0.5, 0.25, 0.1, 0.0), cap: int = 16,
            tag: str = "main", sampled: bool = False) -> list[dict[str, Any]]:
    """How close PACER can come to the oracle as the draft gets cheaper: t_d → f·t_d.

    Per factor f: the oracle, the perfect pre-verifier (PACER's ceiling), the best swept PACER rule
    and the best fixed window, and the two ratios to the oracle. The oracle never drafts the token
    it would lose; every look-then-decide rule does, so their gap closes only as f → 0."""
    rows = []
    for f in factors:
        c = Costs(costs.t_draft * f, costs.t_verify, costs.t_mb)
        orc = replay(steps, oracle(), c)["speedup"]
        perfect = replay(steps, perfect_preverifier(cap), c)["speedup"]
        grid = sweep(steps, c, cap=cap, tag=tag, sampled=sampled)
        fixed_best = max((replay(steps, fixed(g), c)["speedup"], g) for g in (1, 2, 3, 4, 6, 8, 12, 16))
        best = grid[0]
        rows.append({"draft_cost_factor": f, "t_draft_ms": c.t_draft, "oracle": orc, "perfect_preverifier": perfect,
                     "pacer_best": best["speedup"], "pacer_best_rule": {k: best[k] for k in ("b", "t", "rho", "trim")},
                     "fixed_best": fixed_best[0], "fixed_best_gamma": fixed_best[1],
                     "perfect_over_oracle": perfect / orc, "pacer_over_oracle": best["speedup"] / orc,
                     "pacer_over_fixed": best["speedup"] / fixed_best[0]})
    return rows


def replay(steps: list[Step], rule: Rule | str, costs: Costs) -> dict[str, float]:
    """Simulated speedup, emitted per call (incl. bonus), mean window and wasted drafts."""
    emitted = cost = drafted = wasted = 0.0
    gamma: dict[int, int] = {}
    for st in steps:
        if rule == "heuristic":  # HF +2/−1, start 5, cap 16, state per request (in recording order)
            g = gamma.get(st.request, 5)
            w, calls = min(g, st.W), 0
            d = w
        else:
            out = rule(st)
            w, calls = out[0], out[1]
            d = out[2] if len(out) > 2 else w
        acc = min(st.n, w)
        if rule == "heuristic":
            gamma[st.request] = min(16, g + 2) if acc == w else max(1, g - 1)
        emitted += acc + 1
        drafted += w
        wasted += d - acc  # dropped drafts are wasted draft work too
        cost += d * costs.t_draft + costs.tv(w + 1) + calls * costs.t_mb
    n = max(1, len(steps))
    return {"speedup": costs.tv(1) * emitted / cost, "emitted_per_call": emitted / n, "mean_window": drafted / n,
            "wasted_per_call": wasted / n}


def measure_mb_ms(model, hidden_size: int, n: int = 8, reps: int = 50) -> float:
    """Median ms of one M_B call over an n-token step (the policy's per-block cost)."""
    from engine.measure import median_ms

    h, q, e = torch.randn(n, hidden_size), torch.rand(n), torch.rand(n)
    return median_ms(lambda: model.score_step(h, q, e), reps, warmup=0)


def sweep(steps: list[Step], costs: Costs, blocks=(1, 2, 4), t0s=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
          rhos=(1.0, 1.05, 1.1, 1.2), cap: int = 16, tag: str = "main", trims=(0, 1),
          sampled: bool = False) -> list[dict[str, Any]]:
    """Every (b, t₀, ρ, trim) rule, best first. `sampled`: only rules exact under sampling (trim needs b = 1)."""
    rows = []
    for b, t, r, tr in itertools.product(blocks, t0s, rhos, trims):
        if sampled and tr and b > 1:
            continue
        rows.append({"b": b, "t": t, "rho": r, "max": cap, "trim": tr,
                     **replay(steps, pacer(b, t, r, cap, tag, tr), costs)})
    return sorted(rows, key=lambda x: -x["speedup"])


def baselines(steps: list[Step], costs: Costs) -> dict[str, dict[str, float]]:
    out = {f"fixed:{g}": replay(steps, fixed(g), costs) for g in (1, 2, 3, 4, 6, 8, 12, 16)}
    out["heuristic"] = replay(steps, "heuristic", costs)
    for t in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7):
        out[f"confidence:{t}"] = replay(steps, confidence(t), costs)
        out[f"confidence:{t},trim=1"] = replay(steps, confidence(t, trim=1), costs)
    for t in (0.3, 0.5, 0.6, 0.7, 0.8):
        out[f"cumulative:{t}"] = replay(steps, cumulative(t), costs)
    for h in (0.5, 1.0, 1.5, 2.0, 3.0):
        out[f"entropy:{h}"] = replay(steps, entropy_stop(h), costs)
    out["oracle (exact)"] = replay(steps, oracle(), costs)
    out["perfect pre-verifier (PACER's ceiling)"] = replay(steps, perfect_preverifier(), costs)
    return out


def score_models(data: StepData, models: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {tag: score_all(m, data) for tag, m in models.items()}
