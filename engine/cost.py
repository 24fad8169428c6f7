"""What one speculative step costs: the one vocabulary that the cost-aware window, the offline replay,
`advise` and the bench's modelled speedup all read.

    StepCost(c, verify, target_ms, label, mb, prefill, block)   a step's costs, normalised to t(1)
      .v(k)        verify of k drafts (a target forward of k + 1 tokens) ÷ t(1); v(0) = 1
      .step(k)     cost(k) = k·c + v(k)                              (units of t(1): AR costs 1 per token)
      .ms(k)       the same step in milliseconds, cost(k)·t(1)      (None when t(1) was never measured)
      .verify_ms(k), .draft_ms, .prefill_ms, .block_ms               the terms in milliseconds
    forward_ms(probe, m)   a target forward of m tokens from a cost probe's measured curve (ms)
    StepCost.from_probe(probe)                                      the normalised view of a cost probe
    isotonic(y)            least-squares non-decreasing fit (a wider forward is never cheaper)

The terms, with t(m) a target forward of m tokens and t(1) the unit:

    T(k) = t(k + 1)  +  k·t_d  +  n·t_p  +  [k > 0]·t_step  (+ M_B calls · t_mb, PACER)
    c = t_d / t(1)   v(k) = t(k + 1) / t(1)   prefill = t_p / t(1)   block = t_step / t(1)   mb = t_mb / t(1)

t_d: one drafted token's draft forward; t_p: a catch-up (or prefill) token of the draft model that has not
run over n tokens; t_step: one block-drafter forward per drafting step. Worked example: t(1) = 70 ms,
t(2) = 100 ms, t_d = 30 ms → c = 3/7, v(1) = 10/7, cost(1) = 13/7 and ms(1) = 130 ms.

Who fills it: offline.costmodel.CostModel (a StepCost with its constructors: flat, a reference's timings,
decode traces) for the replay and `advise`; policies.pair_costs.StepCosts measures the same terms in ms
during a run and gives its normalised view (`StepCosts.view`) or takes one (`StepCosts.from_view`, the
replay pricing the cost-aware window); bench.modelled prices a run's counts with `forward_ms` and the
probe's t_d, t_p and t_step. A leaf module (the standard library only): every floor may read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class StepCost:
    """One step's costs in units of t(1) (module doc), with the milliseconds view where t(1) is known."""

    c: float = 0.05  # draft/target cost ratio per token: a ~10–20× smaller draft, memory-bound regime
    verify: tuple[float, ...] = ()  # v(γ) for γ = 0..len−1; empty = flat (every verify costs one forward)
    target_ms: float | None = None  # t(1): ms of one single-token target forward (the ms view's unit)
    label: str = ""  # how the app and tables name this model ("c=0.05 flat", "measured")
    mb: float = 0.0  # one pre-verifier (M_B) call ÷ t(1); 0 for every policy but PACER
    prefill: float = 0.0  # t_p ÷ t(1): one catch-up token of the draft model; 0 = not priced (older probes)
    block: float = 0.0  # t_step ÷ t(1): a block drafter's forward per drafting step; 0 = none

    def __post_init__(self) -> None:
        if not 0.0 <= self.c <= 100.0:
            raise ValueError(f"cost ratio c must be in [0, 100], got {self.c}")
        if any(not v > 0 for v in self.verify):
            raise ValueError("verify costs must be positive")
        if not self.mb >= 0:
            raise ValueError(f"pre-verifier call cost must be ≥ 0, got {self.mb}")
        if not (self.prefill >= 0 and self.block >= 0):
            raise ValueError(f"prefill and block costs must be ≥ 0, got {self.prefill}, {self.block}")
        if not self.label:
            object.__setattr__(self, "label", f"c={self.c:g} " + ("measured-verify" if self.verify else "flat"))

    # ------------------------------------------------------------ the normalised view (units of t(1))

    def v(self, window: int) -> float:
        """Relative cost of verifying `window` drafts (a forward of window+1 tokens); beyond the measured
        range, extrapolated linearly from the last two points (never decreasing)."""
        if not self.verify:
            return 1.0
        if window < len(self.verify):
            return self.verify[window]
        if len(self.verify) == 1:
            return self.verify[0]
        slope = max(0.0, self.verify[-1] - self.verify[-2])
        return self.verify[-1] + slope * (window - len(self.verify) + 1)

    def step(self, window: int) -> float:
        """cost(γ) = γ·c + v(γ), in target single-token forwards."""
        return window * self.c + self.v(window)

    # ------------------------------------------------------------ the milliseconds view

    def ms(self, window: int) -> float | None:
        """cost(γ) in ms: (γ·c + v(γ))·t(1); None when t(1) is unknown (a flat or user-set model)."""
        return None if self.target_ms is None else self.step(window) * self.target_ms

    def verify_ms(self, window: int) -> float | None:
        return None if self.target_ms is None else self.v(window) * self.target_ms

    @property
    def draft_ms(self) -> float | None:
        return None if self.target_ms is None else self.c * self.target_ms

    @property
    def prefill_ms(self) -> float | None:
        return None if self.target_ms is None else self.prefill * self.target_ms

    @property
    def block_ms(self) -> float | None:
        return None if self.target_ms is None else self.block * self.target_ms

    @classmethod
    def from_probe(cls, probe: Mapping[str, Any], max_window: int = 16, model_free: bool = False,
                   label: str = "") -> "StepCost":
        """The normalised view of a start-of-run cost probe (engine.bench.runner.measure_costs: t_target_ms
        {m: ms}, t_draft_ms, t_draft_prefill_ms, t_draft_step_ms): v(k) = t(k+1)/t(1) on the probe's
        isotonic curve, c = t_d/t(1) (0 for a model-free drafter or a nan probe), likewise t_p and t_step."""
        t1 = forward_ms(probe, 1)
        if not t1 > 0:
            raise ValueError(f"a cost probe needs a positive t(1), got {t1}")

        def ratio(key: str) -> float:
            t = probe_ms(probe, key)
            return 0.0 if model_free or not math.isfinite(t) else max(t, 0.0) / t1

        return cls(c=ratio("t_draft_ms"), verify=tuple(forward_ms(probe, k + 1) / t1 for k in range(max_window + 1)),
                   target_ms=t1, label=label or "probe", prefill=ratio("t_draft_prefill_ms"),
                   block=ratio("t_draft_step_ms"))


def isotonic(y: Sequence[float]) -> list[float]:
    """Least-squares non-decreasing fit (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in y:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, n2 = blocks.pop()
            m1, n1 = blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def probe_ms(probe: Mapping[str, Any], key: str) -> float:
    """One ms entry of a cost probe (nan when absent: older results, model-free drafters)."""
    return float(probe.get(key, math.nan))


def forward_ms(probe: Mapping[str, Any], tokens: int) -> float:
    """t(tokens) from a probe's measured curve (keys 1, 2, 4, …; str keys after JSON), fitted non-decreasing
    first, interpolated linearly between measured sizes and extrapolated past the last with the last slope."""
    raw = sorted((int(k), float(v)) for k, v in probe["t_target_ms"].items())
    curve = list(zip([k for k, _ in raw], isotonic([v for _, v in raw])))
    for (k0, v0), (k1, v1) in zip(curve, curve[1:]):
        if tokens <= k1:
            return v0 + (v1 - v0) * (max(tokens, k0) - k0) / (k1 - k0)
    if len(curve) == 1:
        return curve[0][1]
    (k0, v0), (k1, v1) = curve[-2], curve[-1]
    return v1 + max(0.0, (v1 - v0) / (k1 - k0)) * (tokens - k1)
