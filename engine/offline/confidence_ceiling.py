"""The confidence ceiling: how fast a window that reads only the draft's confidence can be on a pair.

Notation (engine.policies.costaware): i = a token's position in the step's draft (1-based), b_i = the
confidence bin of m_i = max_x q_i(x) (engine.policies.calibration.BIN_EDGES), a(b) = P(draft accepted |
its bin, the drafts before it accepted), s_i = Π_{j≤i} a(b_j), T(k) = k·c + v(k) the replay's price of a
k-draft step (engine.offline.costmodel), λ a rate in tokens per autoregressive step.

Every adaptive window of this lab decides from m_i (confidence, cumulative, costaware, PACER's q-based
prior). On a greedy reference the question "how much of the oracle's headroom can such a window take?"
has a measurable answer: give the rules the acceptance a(b) *in hindsight* — the reference's own match
rate per bin, so their calibration is perfect — walk each one exactly over the reference
(engine.offline.replay.walk) and keep the fastest. Three families, each a stopping rule on b_1..b_i:

    survival:θ   draft on while s_i ≥ θ                             (the cumulative rule on perfect rates)
    bayes:λ      draft on while W(i, s_i) > 0, where W is the option value of drafting on:
                 W(i, s) = max(0, −λc + Σ_b π(b)·max(0, s·a(b) − λ(v(i+1) − v(i)) + W(i+1, s·a(b))))
                 (W(K, ·) = 0; the inner max(0, ·) is the option to drop a draft unverified), and drop
                 token i unverified when s_i < λ(v(i) − v(i−1)) — the Dinkelbach form of "maximise tokens
                 per unit time" with the value of seeing the next token's confidence before paying for it
    confidence:t draft on while m_i ≥ t                              (HF's rule; a(b) is not needed)

plus the plain autoregressive step (1.0×). The ceiling is the best of them over a grid, chosen in hindsight
on all tasks together (one rule per pair, as a deployed policy would be), and reported beside the best
fixed window and the cost-optimal hindsight schedule (engine.offline.oracles.COST_OPTIMAL) with the share
of the headroom it takes: (S_ceiling − S_fixed*) / (S_oracle − S_fixed*).

What it is not: a proof over every policy. A rule could read more than the bin (the draft's entropy, the
last position's outcome); `signal_table` measures whether those rank accepted drafts above rejected ones any
better than m_i does (on the Qwen pair's references they do not: AUC 0.90 and 0.57 against m_i's 0.91), and
rates per task or per request in hindsight lowered the Bayes rule's speedup in development replays instead of
raising it. So a target above the ceiling asks for a better acceptance signal (a drafter trained for the
target, a pre-verifier that beats m_i), not for a better window rule.

Worked example (`option_value`): c = 0.3, flat verify v = 1, a = (0.9 for every draft, π = 1), λ = 1.5,
after one draft at s = 0.9: drafting token 2 costs 0.45 and returns 0.81 → W(1, 0.9) = 0.36 + W(2, 0.81)
… > 0, so the rule drafts on; at s = 0.25 it returns 0.225 < 0.45 and W = 0: it stops.
"""

from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from engine.offline.costmodel import CostModel
from engine.offline.oracles import CONFIDENCE_CEILING
from engine.offline.replay import OracleSpec, steps_for, walk_reference
from engine.policies.base import DraftInfo, WindowPolicy
from engine.policies.calibration import N_BINS, bin_of, mid
from engine.policies.simple import Confidence, Fixed
from engine.trace.reference_file import Reference

THETAS = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))  # survival thresholds 0.30 … 0.95
LAMBDAS = tuple(round(1.0 + 0.1 * i, 1) for i in range(11))  # λ from AR's rate to twice it
CONF = tuple(round(0.3 + 0.05 * i, 2) for i in range(14))  # HF confidence thresholds 0.30 … 0.95
MAX_WINDOW = 8  # the costaware default: on CPUs a wider verify rarely pays
AR = "autoregressive"  # the ceiling never reads below AR: a pair can always skip drafting
GRID = 1e-3  # W is memoised on s rounded to this: far below any difference a(b) can resolve


def hindsight_rates(refs: Sequence[Reference]) -> tuple[list[float], list[float], list[int]]:
    """(a(b), π(b), n(b)) over the greedy references' positions: a draft at position j is accepted iff the
    draft's argmax on the true prefix equals the target's token (the teacher-forced view every accepted
    prefix sees). Bins without a position get a = mid-bin confidence, never read (π = 0)."""
    acc, n = [0] * N_BINS, [0] * N_BINS
    for ref in refs:
        if not ref.greedy:
            raise ValueError(f"{ref.source}: the confidence ceiling needs greedy references (exact replay)")
        for req in ref.requests:
            for q, d, y in zip(req["q_top"], req["draft_argmax"], req["output_ids"]):
                b = bin_of(DraftInfo(1, 0, float(q), 0.0))
                acc[b] += int(d == y)
                n[b] += 1
    total = sum(n)
    if not total:
        raise ValueError("the confidence ceiling needs at least one reference position")
    rate = [acc[b] / n[b] if n[b] else (mid(b) if b < N_BINS - 1 else 0.0) for b in range(N_BINS)]
    return rate, [x / total for x in n], n


def option_value(i: int, s: float, lam: float, rate: Sequence[float], pi: Sequence[float], cost: CostModel,
                 top: int, memo: dict | None = None) -> float:
    """W(i, s) of the module doc: the expected net value (tokens − λ·time, units of one AR step) of drafting
    on from i kept drafts with survival s, acting optimally after each new draft's bin is seen."""
    memo = {} if memo is None else memo
    if i >= top or s <= lam * cost.c:  # even a sure draft returns s < its price λc
        return 0.0
    key = (i, round(s / GRID))
    if key not in memo:
        dv = lam * (cost.v(i + 1) - cost.v(i))
        v = -lam * cost.c
        for b, p in enumerate(pi):
            if p > 0:
                s2 = s * rate[b]
                v += p * max(0.0, s2 - dv + option_value(i + 1, s2, lam, rate, pi, cost, top, memo))
        memo[key] = max(0.0, v)
    return memo[key]


class SurvivalRule(WindowPolicy):
    """Draft on while s_i = Π a(b_j) ≥ θ (the module doc's survival:θ); the failing draft is still verified."""

    name = "survival"

    def __init__(self, rate: Sequence[float], theta: float, max_window: int = MAX_WINDOW) -> None:
        super().__init__(max_window)
        self.rate, self.theta, self.s = list(rate), float(theta), 1.0

    @property
    def params(self) -> dict:
        return {"theta": self.theta, "max": self.max_window}

    def propose(self) -> int:
        self.s = 1.0
        return self.max_window

    def keep_drafting(self, info: DraftInfo) -> bool:
        self.s *= self.rate[bin_of(info)]
        return self.s >= self.theta


class BayesRule(WindowPolicy):
    """Draft on while W(i, s_i) > 0; drop draft i unverified when verifying it returns less than it costs
    (the module doc's bayes:λ)."""

    name = "bayes"

    def __init__(self, rate: Sequence[float], pi: Sequence[float], lam: float, cost: CostModel,
                 max_window: int = MAX_WINDOW) -> None:
        super().__init__(max_window)
        self.rate, self.pi, self.lam, self.cost = list(rate), list(pi), float(lam), cost
        self.memo: dict = {}
        self.s, self.drop = 1.0, 0

    @property
    def params(self) -> dict:
        return {"lambda": self.lam, "max": self.max_window}

    def propose(self) -> int:
        self.s, self.drop = 1.0, 0
        return self.max_window

    def keep_drafting(self, info: DraftInfo) -> bool:
        i = info.index
        self.s *= self.rate[bin_of(info)]
        if option_value(i, self.s, self.lam, self.rate, self.pi, self.cost, self.max_window, self.memo) > 0:
            return True
        self.drop = int(self.s < self.lam * (self.cost.v(i) - self.cost.v(i - 1)))
        return False

    def drop_on_stop(self) -> int:
        return self.drop


def _speed(refs: Sequence[Reference], make, cost_of) -> dict[str, tuple[float, float]]:
    """{task: (Σ AR time, Σ replay time)} of one policy (a fresh one per request from `make()`), and 'all'."""
    out: dict[str, list[float]] = {}
    for ref in refs:
        cost = cost_of(ref)
        for req in ref.requests:
            steps = walk_reference(req, make(), ref.max_new_tokens, cost, source=steps_for(ref, req))
            tokens = sum(s["emitted"] for s in steps)
            t = sum(s["cost"] for s in steps)
            for task in (req.get("task") or req.get("category") or "?", "all"):
                a = out.setdefault(task, [0.0, 0.0])
                a[0] += tokens * cost.v(0)
                a[1] += t
    return {k: (v[0], v[1]) for k, v in out.items()}


def candidates(rate, pi, cost: CostModel, window: int) -> dict[str, object]:
    """{spec: factory} of every rule the ceiling tries (module doc)."""
    out: dict[str, object] = {}
    for th in THETAS:
        out[f"survival:{th}"] = lambda th=th: SurvivalRule(rate, th, window)
    for lam in LAMBDAS:
        out[f"bayes:{lam}"] = lambda lam=lam: BayesRule(rate, pi, lam, cost, window)
    for t in CONF:
        out[f"confidence:{t}"] = lambda t=t: Confidence(t, window)
    return out


def confidence_ceiling(refs: Sequence[Reference], cost_of, max_window: int = MAX_WINDOW,
                       gammas: Sequence[int] = range(1, MAX_WINDOW + 1)) -> pd.DataFrame:
    """One row per task (and 'all'): the best fixed window, the ceiling rule chosen on all tasks and its
    speedup, the best rule chosen per task, the cost-optimal hindsight schedule, the headroom share, and the
    best rule a user can run as it is (HF's `confidence:t,max=W`, chosen on all tasks) with its speedup.
    `cost_of(ref)` → the CostModel a reference is priced with (engine.offline.analysis.cost_for); every walk is
    priced by its own reference's model, the Bayes rules' λ-trade-off by the first reference's."""
    refs = list(refs)
    window = min([max_window] + [r.max_window for r in refs])
    rate, pi, _ = hindsight_rates(refs)
    cost0 = cost_of(refs[0])
    rules = {spec: _speed(refs, make, cost_of) for spec, make in candidates(rate, pi, cost0, window).items()}
    fixed = {g: _speed(refs, lambda g=g: Fixed(g), cost_of) for g in gammas}
    oracle = _speed(refs, lambda: OracleSpec("c", window), cost_of)
    s = lambda r, task: r[task][0] / r[task][1] if r is not None else 1.0  # noqa: E731 - speedup over AR
    rules[AR] = None  # the plain autoregressive step: 1.0× on every task
    chosen = max(rules, key=lambda spec: s(rules[spec], "all"))  # one rule per pair, AR included
    # HF's rule is one a user can run as it is (`confidence:t,max=W`): the best of those, for the advice
    runnable = max((spec for spec in rules if spec.startswith("confidence:")), key=lambda spec: s(rules[spec], "all"))
    rows = []
    for task in oracle:
        g = max(fixed, key=lambda g: s(fixed[g], task))
        own = max(rules, key=lambda spec: s(rules[spec], task))
        sf, so, sc = s(fixed[g], task), s(oracle, task), s(rules[chosen], task)
        rows.append({"task": task, "best_fixed": f"fixed:{g}", "s_best_fixed": sf, "ceiling_rule": chosen,
                     "s_ceiling": sc, "rel_best_fixed": sc / sf, "task_rule": own, "s_task_rule": s(rules[own], task),
                     "s_oracle_c": so, "headroom_share": (sc - sf) / (so - sf) if so > sf else float("nan"),
                     "runnable_rule": f"{runnable},max={window}", "s_runnable": s(rules[runnable], task),
                     "max_window": window})
    out = pd.DataFrame(rows)
    out = pd.concat([out[out["task"] == "all"], out[out["task"] != "all"]], ignore_index=True)
    rates = ", ".join(f"{a:.2f}" for a, p in zip(rate, pi) if p > 0)
    out.attrs["note"] = (f"{CONFIDENCE_CEILING}: the best window rule reading only the draft's confidence bin, with "
                         f"each bin's acceptance taken in hindsight from the references ({rates}); AR (1.0×) when "
                         "no rule beats it on all tasks")
    return out


def auc(labels: Sequence[int], scores: Sequence[float]) -> float:
    """Area under the ROC curve: P(score of an accepted draft > score of a rejected one), ties counted half
    (Mann–Whitney on average ranks). NaN when one class is empty. The one AUC of the lab: PACER's M_B is
    scored with it too (engine.train.pacer.fit.auc). Worked example: labels [1, 0, 1], scores [0.9, 0.5, 0.5]
    → pairs (0.9 > 0.5) = 1 and (0.5 = 0.5) = ½ → 0.75."""
    import numpy as np

    y, s = np.asarray(labels, dtype=bool).ravel(), np.asarray(scores, dtype=np.float64).ravel()
    n1, n0 = int(y.sum()), int((~y).sum())
    if not n1 or not n0:
        return float("nan")
    uniq, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))  # 0-based rank of each distinct score's first copy
    ranks = (first + (counts + 1) / 2.0)[inv]  # average 1-based rank over ties
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def signal_table(refs: Sequence[Reference]) -> pd.DataFrame:
    """How well each signal a window could read before verifying ranks accepted drafts above rejected ones, over
    the references' teacher-forced positions (the view of a draft whose predecessors were accepted): the
    confidence m = max q, the negated entropy −H(q), the last position's outcome (1 = it was accepted) and two
    mixes of them. One row per task and signal, plus 'all': where none beats m's AUC, a rule reading them would
    rank drafts no better than one reading m, which is what the ceiling's rules read."""
    rows: dict[tuple[str, str], tuple[list, list]] = {}
    for ref in refs:
        for req in ref.requests:
            task = req.get("task") or req.get("category") or "?"
            hits = [int(d == y) for d, y in zip(req["draft_argmax"], req["output_ids"])]
            prev = [1] + hits[:-1]
            signals = {"confidence m": req["q_top"], "negated entropy −H": [-h for h in req["entropy"]],
                       "previous accepted": prev,
                       "log m − 0.1·H": [math.log(max(q, 1e-9)) - 0.1 * h for q, h in zip(req["q_top"], req["entropy"])],
                       "m + 0.1·previous": [q + 0.1 * a for q, a in zip(req["q_top"], prev)]}
            for name, score in signals.items():
                for key in ((task, name), ("all", name)):
                    y, s = rows.setdefault(key, ([], []))
                    y.extend(hits)
                    s.extend(score[: len(hits)])
    out = pd.DataFrame([{"task": t, "signal": n, "positions": len(y), "auc": auc(y, s)} for (t, n), (y, s) in rows.items()])
    return pd.concat([out[out["task"] == "all"], out[out["task"] != "all"]], ignore_index=True)
