"""The cost model of the cost-aware window (engine.policies.costaware): T(k), the time of a step that
verifies k drafts, measured in this run, and the per-pair book (`PairBook`) that shares it across requests.

    T(k) = t_v(k) + k·t_d + [k > 0]·t_a     t_v(k): verify of k drafts, t_d: per drafted token, t_a: the
    prior: t_v(k) = 1 + v·k, t_d = c, t_a = 0   first draft forward's steady catch-up (1–3 tokens)

plus n·t_p, the catch-up of a drafter that has not run for n ≥ CATCHUP_MIN tokens (its prefill is lazy),
measured from such first forwards. Each cost is the lower quartile (`low`) of its last 32 samples. These are
the terms of engine.cost (the one cost vocabulary) measured in ms: `StepCosts.view` gives their normalised
StepCost, `StepCosts.from_view` prices with one (the replay). Costs belong to the pair, not the request:
they live in the pair's `PairBook` (with its pooled acceptance per temperature), an explicit object the run
hands every request's policy in `RequestContext.book` (engine.run keeps one per loaded pair, `PairBooks`),
which the bench primes with its start-of-run cost probe (`PairBook.prime`). Worked example: primed with
t(1) = 70 ms, t(2) = 100 ms and t_d = 30 ms, T(0) = 70 and T(1) = 100 + 30 = 130 ms.
"""

from __future__ import annotations

import math
import weakref
from collections import deque
from typing import Any

from engine.cost import StepCost
from engine.policies.calibration import PAIR_MIN, PairStats

REFIT = 8  # new timing samples between refits of the cost table
CATCHUP_MIN = 4  # a first forward over ≥ 4 unseen tokens is a catch-up sample (t_p), not a steady-state one
PRIOR_C, PRIOR_V = 0.3, 0.05  # costaware's default prior (its doc says why): a book made before any policy uses it
PREFILL_SHARE = 0.1  # t_p prior: a catch-up token costs ~1/10 of a draft decode step (compute- vs bandwidth-bound)


def low(xs) -> float:
    """The lower quartile of timing samples. Why not the median: on a shared CPU noise only ever adds time, and
    it is not spread evenly over window sizes — a 2-core run disturbed for two minutes (2026-12-05) left k = 2
    verifies at a median of 177 ms against 136 ms undisturbed; the policy then never chose k = 2 again, so
    those samples were never replaced and it drafted one token at a time for the rest of the run."""
    v = sorted(xs)
    return v[(len(v) - 1) // 4]


class StepCosts:
    """T(k) from this run's timings, the prior (c, v) where none exist yet (module doc)."""

    def __init__(self, c: float, v: float, window: int = 32) -> None:
        self.c, self.v = c, v
        self.tv: dict[int, deque] = {}
        self.d1: deque = deque(maxlen=window)  # first draft forward of a step (includes a 1–3 token catch-up)
        self.dn: deque = deque(maxlen=window)  # later draft forwards
        self.tp: deque = deque(maxlen=window)  # ms per token of catch-ups over ≥ CATCHUP_MIN unseen tokens
        self._cached: tuple | None = None  # (kmax, sample count, windows seen, table)
        self._count = 0
        self.fits = 0  # refits so far: a policy keys its cached evaluation on it

    @property
    def measured(self) -> bool:
        return bool(self.tv)

    def add_verify(self, k: int, ms: float) -> None:
        self.tv.setdefault(k, deque(maxlen=self.d1.maxlen)).append(ms)
        self._count += 1

    def add_draft(self, first: bool, ms: float, unseen: int = 1) -> None:
        """A draft forward's ms; a first one over ≥ CATCHUP_MIN unseen tokens is a catch-up sample."""
        if first and unseen >= CATCHUP_MIN:
            td = low(self.dn or self.d1) if (self.dn or self.d1) else None
            if td is not None:
                self.tp.append(max(0.0, ms - td) / unseen)
            return
        (self.d1 if first else self.dn).append(ms)
        self._count += 1

    def catchup_ms(self, n: int, td: float) -> float:
        """n·t_p: the price of running the drafter over n tokens it has not seen (prior: PREFILL_SHARE·t_d)."""
        if n < CATCHUP_MIN or not (self.tp or self.dn or self.d1):
            return 0.0  # a steady-state first forward (already in t_a), or no draft timed yet: t_d is a guess,
            # and a model-free drafter (no catch-up to speak of) guessed at c·t(1) would never be probed
        return n * (low(self.tp) if self.tp else PREFILL_SHARE * td)

    def prime(self, t_draft_ms: float, t_target_ms: dict, t_prefill_ms: float = math.nan) -> None:
        """Seed with a cost probe (engine.bench.runner.measure_costs): a k-token target forward verifies
        k − 1 drafts, and the draft's prefill per token is t_p; one sample each, so the run's own timings
        outvote it within a few steps."""
        if math.isfinite(t_prefill_ms) and t_prefill_ms > 0:
            self.tp.append(float(t_prefill_ms))
        for k, ms in sorted((int(k), float(v)) for k, v in t_target_ms.items()):
            if k >= 1 and math.isfinite(ms) and ms > 0:
                self.add_verify(k - 1, ms)
        if math.isfinite(t_draft_ms) and t_draft_ms > 0:
            self.add_draft(False, float(t_draft_ms))

    def view(self, kmax: int) -> StepCost:
        """The normalised view of these costs (engine.cost.StepCost, units of t(1) = T(0)): v(k) = (t_v(k) +
        [k > 0]·t_a) / t(1), c = t_d / t(1), prefill = t_p / t(1); `target_ms` = t(1) once anything was measured."""
        tv, _, td, ta = self.table(kmax)
        t1 = tv[0]
        tp = low(self.tp) if self.tp else 0.0
        return StepCost(c=min(td / t1, 100.0), verify=tuple((x + (ta if k else 0.0)) / t1 for k, x in enumerate(tv)),
                        target_ms=t1 if self.measured else None, label="in-run", prefill=tp / t1)

    @classmethod
    def from_view(cls, cost: StepCost, kmax: int, c: float = PRIOR_C, v: float = PRIOR_V) -> "StepCosts":
        """Costs priced by a StepCost rather than timed (the replay): T(k) = v(k)·t(1), t_d = c·t(1), in ms when
        the StepCost knows t(1), else in units of t(1)."""
        t1 = cost.target_ms or 1.0
        out = cls(c, v)
        for k in range(kmax + 1):
            out.add_verify(k, cost.v(k) * t1)
        out.add_draft(False, max(cost.c, 1e-9) * t1)
        return out

    def table(self, kmax: int) -> tuple[list[float], list[float], float, float]:
        """`fit(kmax)`, refitted every REFIT samples or new window (per step it costs ~1 % of a small step)."""
        c = self._cached
        if c is None or c[0] != kmax or c[2] != len(self.tv) or self._count - c[1] >= REFIT:
            self._cached = c = (kmax, self._count, len(self.tv), self.fit(kmax))
            self.fits += 1
        return c[3]

    def fit(self, kmax: int) -> tuple[list[float], list[float], float, float]:
        """(t_v(0..kmax), T(0..kmax), t_d, t_a); ms once anything was measured, else units of t(1)."""
        med = {k: low(d) for k, d in sorted(self.tv.items()) if d}
        if 0 in med:
            t1 = med[0]
        elif med:
            k0 = next(iter(med))
            t1 = med[k0] / (1 + self.v * k0)
        elif self.dn or self.d1:
            t1 = low(self.dn or self.d1) / self.c
        else:
            t1 = 1.0
        td = low(self.dn) if self.dn else low(self.d1) if self.d1 else self.c * t1
        ta = max(0.0, low(self.d1) - td) if self.d1 and self.dn else 0.0
        ks = list(med)
        slope = self.v * t1
        if len(ks) >= 2:  # least squares over the measured windows' low quartiles
            mk, mt = sum(ks) / len(ks), sum(med.values()) / len(ks)
            den = sum((k - mk) ** 2 for k in ks)
            slope = max(0.0, sum((k - mk) * (med[k] - mt) for k in ks) / den)
        tv = []
        for k in range(kmax + 1):
            if k in med:
                x = med[k]
            elif ks:
                near = min(ks, key=lambda j: abs(j - k))
                x = med[near] + slope * (k - near)
            else:
                x = t1 * (1 + self.v * k)
            tv.append(max(x, tv[-1] if tv else 1e-9))  # a wider verify is never cheaper
        total = [tv[k] + (k * td + ta if k else 0.0) for k in range(kmax + 1)]
        return tv, total, td, ta


class PairBook:
    """One (target, drafter) pair's shared state: its StepCosts (made by the first policy that prices with
    them, with that policy's prior) and its pooled acceptance per temperature. The run hands it to every
    request's policy in `RequestContext.book` (engine.run.policy_for); a policy only reads and adds to it."""

    def __init__(self) -> None:
        self._costs: StepCosts | None = None
        self.stats: dict[float, PairStats] = {}

    def costs(self, c: float = PRIOR_C, v: float = PRIOR_V) -> StepCosts:
        """The pair's StepCosts; the prior (c, v) of the first caller makes them (later callers share them)."""
        if self._costs is None:
            self._costs = StepCosts(c, v)
        return self._costs

    def stats_at(self, temperature: float) -> PairStats:
        """The pair's pooled acceptance at this temperature (PairStats)."""
        return self.stats.setdefault(round(float(temperature), 6), PairStats())

    def nearest(self, temperature: float) -> PairStats | None:
        """The pooled acceptance at the nearest *other* temperature with at least PAIR_MIN labels (None if
        none): a temperature's first request starts from it rather than from the identity prior. Why: its bins'
        rates are the same pair's (a confident draft is accepted about as often greedy as sampled), where 0.7·m
        kept the Qwen pair's first request at T = 0.7 autoregressive or at 1-token windows for tens of steps."""
        t = round(float(temperature), 6)
        near = [(abs(k - t), k) for k, s in self.stats.items() if k != t and sum(s.n) >= PAIR_MIN]
        return self.stats[min(near)[1]] if near else None

    def prime(self, probe: dict) -> None:
        """Seed the costs with a start-of-run cost probe ({t_draft_ms, t_target_ms, t_draft_prefill_ms}); a
        no-op for a probe without a draft timing (model-free drafts: nan)."""
        if not math.isfinite(float(probe.get("t_draft_ms", float("nan")))):
            return
        self.costs().prime(float(probe["t_draft_ms"]), probe["t_target_ms"], float(probe.get("t_draft_prefill_ms", math.nan)))


class PairBooks:
    """The books of the pairs one owner drives (engine.run keeps the process's; a test or a tool may keep its
    own): `of(target, drafter)` is the same PairBook for the same two loaded objects. Keyed weakly on the
    target, so unloading a model drops its book; a stand-in that cannot be weakly keyed gets a fresh book."""

    def __init__(self) -> None:
        self._books: "weakref.WeakKeyDictionary[Any, dict[int, PairBook]]" = weakref.WeakKeyDictionary()

    def of(self, target: Any, drafter: Any) -> PairBook:
        try:
            per_target = self._books.setdefault(target, {})
        except TypeError:  # an unhashable or un-weakref-able stand-in: nothing shared
            return PairBook()
        book = per_target.get(id(drafter))
        if book is None:
            book = per_target[id(drafter)] = PairBook()
        return book
