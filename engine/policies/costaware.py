"""The cost-aware window: draft one more token only while its expected value beats its cost.

Notation: i = a token's position in the step's draft (1-based), T(k) = the time of a step that
verifies k drafts (T(0): a plain autoregressive step), a_i = P(draft i accepted | drafts 1..i−1
accepted), s_i = Π_{j≤i} a_j (draft i and all before it accepted), E(k) = 1 + Σ_{i≤k} s_i the
expected emitted tokens of a k-draft step (the bonus/correction token included).

Cost model, measured in this run (the policy times its own calls propose → keep_drafting → update,
so it needs no timings from the loop), with a prior (units of t(1)) before measurements exist:

    T(k) = t_v(k) + k·t_d + [k > 0]·t_a     t_v(k): verify of k drafts, t_d: per drafted token, t_a: the
    prior: t_v(k) = 1 + v·k, t_d = c, t_a = 0   first draft forward's catch-up

Acceptance, calibrated online against verify outcomes: a_i = cal(i, bin(m_i)), m_i = max_x q_i(x)
the draft's confidence *before* it samples token i, binned (BIN_EDGES); copy and phrase tokens (q = δ)
share one bin, so model-free drafters get their empirical per-position acceptance. Each (position,
bin) cell is Beta-smoothed towards its bin's pooled rate, that towards a prior (0.7·m, or the pair's
reference run, `ref=PATH`), its odds scaled by one factor r shared by all bins (observed ÷ prior-predicted), so a
confidently wrong draft is found out before every bin is sampled. Labels as HF/SpecDec++: drafts up
to the first rejection are 1, the first rejected 0, later ones no sample. Calibration is per
request; costs persist across the requests of one policy instance.

Decision (Dinkelbach form of "maximise tokens per second"): with λ = the tokens-per-ms rate of the
last steps priced by the current model (never below AR's 1/T(0)), a choice is worth its net value
tokens − λ·time. Then

    U(k)        = E(k) / T(k)  with ā_i = Σ_b π(i,b)·cal(i,b)      (the utilities compared; U(0) = AR)
    propose     draft iff Σ_b π(1,b)·max(keep_b, drop) > 0   (keep_b: value of keeping token 1 of bin b and
                continuing optimally on ā, relative to an AR step; drop: −λ·(t_d + t_a)); else K = 0
    token i     s_i = s_{i−1}·cal(i, bin(m_i)); continue iff some k > i has
                Σ_{j=i+1..k} ŝ_j > λ·(T(k) − T(i)) (ŝ_j = s_i Π ā); else stop, and drop token i
                unverified when s_i < λ·(t_v(i) − t_v(i−1)) (verifying it costs more than it returns)
    re-probe    after `probe` consecutive AR steps draft k = 1 once (interval doubling up to 64 while
                AR stays best), so measurements and calibration can switch the policy back; and time an
                AR step ("baseline") once early and then every BASELINE drafting steps, as T(0) is the bar.
    catch-up    a drafter that has not run for n tokens (the whole prompt, first: its prefill is lazy) pays
                n·t_p before it drafts (t_p: its per-token catch-up, measured). A step that drafts after AR
                steps carries that price, spread over the request's remaining steps R (max_new_tokens less
                what it emitted, or fewer: the lower quartile of the pair's earlier answers that ran that far,
                PairStats.remaining, once LEN_MIN have finished); a probe runs only if
                the ceiling G = max_k (k+1)·T(0)/T(k) (every draft accepted) beats AR by CEILING and
                a share of the most the rest of the request could save, R·T(0)·(1 − 1/G), covers
                n·t_p + T(1) − T(0). On a path where a verify of k drafts costs nearly k+1 forwards (the
                quantized one: t(2)/t(1) ≈ 1.3–1.4, c ≈ 0.5) G < CEILING: nothing is ever drafted again
                once the costs are measured, so the policy is AR there. The share is PROBE_SHARE, or the
                chance that a 1-token draft beats AR, P(a > T(1)/T(0) − 1), from the pair's pooled acceptance
                where it has one (PairStats.success_chance), if lower: a pair whose drafts are rarely
                accepted (13 % on the SmolLM2 pair at T = 0.7) stops paying catch-ups for probes.

Costs belong to the pair, not the request: with a RequestContext (engine.run.policy_for) the policy
prices with the StepCosts of the pair's book (`ctx.book`, engine.policies.pair_costs.PairBook: one per
loaded (target, drafter) pair, kept by the run), which the bench primes with its start-of-run cost probe
(`PairBook.prime`), so a bench's first request is already priced with the run's own costs. Acceptance is
learnt per request, but from the pair's second request on its prior is the pair's pooled per-bin acceptance
at that temperature (`PairBook.stats_at`, once PAIR_MIN drafts are labelled; trusted as a reference run)
instead of 0.7·m, and a temperature's first request starts from the pair's pooled acceptance at the nearest
other temperature (`PairBook.nearest`, half the weight) where one exists. The costs are engine.cost's terms
(the one cost vocabulary) measured in ms; a replay prices with a StepCost instead (`price_with`).

Lossless: every decision reads only what is fixed before the verify call (past verify outcomes,
timings, the confidence m_i), so ordinary speculative sampling stays exact; the one drop reads m_i,
which is fixed before token i is drawn, so a kept token is still a plain draw from q_i (a stopping
rule, not a filter — the argument of PACER b = 1, engine.policies.pacer). A drafter that never
consults keep() (the block drafter) is detected after its first step and then gets the fixed-k plan
argmax_k U(k) as its cap. `measure=0` prices with the prior only (deterministic runs, tests).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from typing import Any, Callable

from engine.policies.base import DraftInfo, WindowPolicy, is_whole
from engine.policies.calibration import (NONE, N_BINS, PRIOR_N, PRIOR_NONE, PRIOR_SHRINK, REF_N, Calibration,
                                         PairStats, bin_of, mid, reference_prior)
from engine.cost import StepCost
from engine.policies.pair_costs import PRIOR_C, PRIOR_V, StepCosts

__all__ = ["CostAware", "NONE", "bin_of"]

BASELINE = 64  # steps of drafting between timed AR steps (the first one as soon as anything was timed)
RATE_STEPS = 16  # steps in λ's window: long enough to smooth one lucky step, short enough to follow a task
CEILING = 1.02  # G must beat AR by 2 %: below it even a perfect draft cannot pay back the probe's noise
PROBE_SHARE = 0.25  # a probe finds drafting profitable perhaps 1 time in 4: it may cost a quarter of the best case
NEAR_N = REF_N / 2  # another temperature's pooled rates: the same pair, but trusted half as much as this one's
R_UNKNOWN = 128  # remaining tokens assumed when the request's length is unknown (no RequestContext)
_REQUESTS = itertools.count()  # request keys: the pair's lengths are kept per request


class CostAware(WindowPolicy):
    """Draft while the expected tokens of one more draft beat its measured cost (module doc).

    Defaults: max = 8 (on CPUs a verify of > 9 tokens grows steeply, and rarely pays), c = 0.3 and
    v = 0.05 (a draft ~3× cheaper than the target, near-flat bf16 verify: the prior only until the
    run's own timings exist), probe = 8 AR steps between re-probes, measure = 1 (time this run)."""

    name = "costaware"

    def __init__(self, max_window: int = 8, c: float = PRIOR_C, v: float = PRIOR_V, probe: int = 8,
                 ref: str | None = None, measure: int = 1, clock: Callable[[], float] | None = None) -> None:
        super().__init__(max_window)
        if not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
            raise ValueError(f"costaware draft cost ratio c must be a positive number, got {c!r}")
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"costaware verify growth v must be ≥ 0 (a wider verify is never cheaper), got {v!r}")
        if not is_whole(probe) or not 1 <= probe <= 64:
            raise ValueError(f"costaware probe must be an integer in [1, 64] (AR steps between re-probes), got {probe!r}")
        if measure not in (0, 1):
            raise ValueError(f"costaware measure must be 0 or 1, got {measure!r}")
        self._draft_prompt, self._max_new = 0, None  # the request's (for_request); unknown outside a decode run
        if ref is not None and not isinstance(ref, str):
            raise ValueError(f"costaware ref must be a reference file path, got {ref!r}")
        self.c0, self.v0, self.probe, self.ref, self.measure = float(c), float(v), int(probe), ref, int(measure)
        self.prior = [(PRIOR_SHRINK * mid(b) if b < NONE else PRIOR_NONE) for b in range(N_BINS)]
        self.pi_prior, self.prior_n = [1.0 / N_BINS] * N_BINS, PRIOR_N
        if ref is not None:
            try:
                self.prior, self.pi_prior, rc, rv = reference_prior(ref)
            except (OSError, ValueError, KeyError) as e:
                raise ValueError(f"costaware ref={ref}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
            self.prior_n = REF_N
            self.c0, self.v0 = (rc, rv) if rc is not None else (self.c0, self.v0)
        self.clock = clock or time.perf_counter
        self.costs = StepCosts(self.c0, self.v0)
        self.pair: PairStats | None = None  # the pair's pooled acceptance (for_request), else per request only
        self.near: PairStats | None = None  # the same pair's at the nearest other temperature (for_request)
        self.gated = True  # the drafter consults keep(); False once a step drafted without asking
        self._in_ms = True  # timings are ms (False: a replay priced in units of t(1), price_with)
        self._priced_by = None  # the replay CostModel the costs come from (price_with)
        self._since_ar = 0  # steps since the last AR step (costs, and this, persist across requests)
        self.reset()

    @property
    def params(self) -> dict[str, Any]:
        mine = None if self.ref is not None else 0  # with ref=, c and v come from the reference
        out = {"max": self.max_window, "c": self.c0 if mine == 0 else None, "v": self.v0 if mine == 0 else None,
               "probe": self.probe, "ref": self.ref, "measure": None if self.measure else 0}
        return {k: v for k, v in out.items() if v is not None}

    def price_with(self, cost: StepCost) -> None:
        """Replay (engine.offline.replay.walk): price with a StepCost's curve — T(k) = v(k), t_d = c, in ms
        when it knows t(1) — instead of timing calls that a replay does not make, and pool acceptance over
        the requests this policy object walks, as a bench's requests of one pair do (the pair's book)."""
        if self._priced_by is cost:
            return
        self.costs = StepCosts.from_view(cost, self.max_window, self.c0, self.v0)
        self.measure, self._in_ms, self._priced_by = 0, cost.target_ms is not None, cost
        self.pair = self.pair or PairStats()

    def for_request(self, ctx) -> "CostAware":
        """This policy for one request: its prompt and length (the catch-up rule) and, when measuring,
        the pair's shared costs and pooled acceptance from the pair's book (`ctx.book`, a PairBook)."""
        self._draft_prompt, self._max_new = ctx.first_catchup, int(ctx.max_new_tokens)
        if self.measure and ctx.book is not None:
            self.costs = ctx.book.costs(self.c0, self.v0)
            self.pair = ctx.book.stats_at(ctx.temperature)
            self.near = ctx.book.nearest(ctx.temperature)
        return self  # the decode loop resets the policy at the request's start (calibration from self.pair)

    def reset(self) -> None:
        super().reset()
        learnt, weight = (self.pair.prior(self.prior, self.pi_prior) if self.pair is not None else None), REF_N
        if learnt is None and self.near is not None:  # this temperature's first request: the pair's nearest one
            learnt, weight = self.near.prior(self.prior, self.pi_prior), NEAR_N
        self.cal = (Calibration(self.prior, self.prior_n, self.pi_prior) if learnt is None
                    else Calibration(learnt[0], weight, learnt[1]))  # the pair's earlier requests, trusted as a reference run
        self._recent: deque = deque(maxlen=RATE_STEPS)  # (emitted, window, dropped) of the last steps
        self._streak, self._every = 0, self.probe
        self._unseen = self._draft_prompt  # tokens the drafter has not run over (its prefill is lazy)
        self._emitted = 0
        self._key = next(_REQUESTS)  # this request's entry in the pair's lengths
        self._bins: list[int] = []
        self._memo_key: tuple | None = None
        self._begin_step()

    def _begin_step(self) -> None:
        self._t0 = self._last = self.clock()
        self._bins, self._surv, self._asked, self._drop = [], [], 0, 0
        self._probe, self._stop, self._cap = False, None, 0

    # ---------------------------------------------------------------- values

    def _rate(self, total: list[float], td: float, ta: float) -> float:
        """λ: tokens per unit time of the recent steps priced by the current model, ≥ AR's 1/T(0)."""
        ar = 1.0 / total[0]
        if not self._recent:
            return ar
        tok = sum(e for e, _, _ in self._recent)
        cost = sum(total[min(k, len(total) - 1)] + d * (td + ta) for _, k, d in self._recent)
        return max(ar, tok / cost)

    def _tail(self, i: int, s: float, lam: float, total: list[float], top: int) -> tuple[float, int]:
        """Best net gain of drafting on from i tokens (survival s) to some k ≤ top on ā, and that k."""
        best, arg, gain = 0.0, i, 0.0
        for k in range(i + 1, top + 1):
            s *= self._abar[k]
            gain += s
            net = gain - lam * (total[k] - total[i])
            if net > best:
                best, arg = net, k
        return best, arg

    def propose(self) -> int:
        self._begin_step()
        kmax = self.max_window
        self._tv, self._total, self._td, self._ta = self.costs.table(kmax)
        total = self._total
        lam = self._lam = self._rate(total, self._td, self._ta)
        key = (self.cal.version, self.costs.fits, lam, self.gated)
        if key != self._memo_key:  # within a run of AR steps nothing changes: reuse the last evaluation
            self._memo_key, self._memo = key, self._evaluate(kmax, lam, total)
        self._abar, util, k_plan, value, cap, ceiling = self._memo
        catch = self.costs.catchup_ms(self._unseen, self._td) if self.costs.measured else 0.0
        decision = "draft" if cap else "ar"
        if cap and self.measure and self.costs.measured and self._since_ar >= (BASELINE if 0 in self.costs.tv else 1):
            cap, decision = 0, "baseline"  # time an AR step: T(0) is the bar, a prior guess of it would bias every U
        elif cap and not (catch and value * self._left() / (util[k_plan] * total[k_plan]) < lam * catch):  # E(k_plan)
            self._streak, self._every = 0, self.probe
        else:
            if cap:  # the catch-up costs more than drafting would win over the rest of the request
                cap, decision = 0, "catch-up"
            self._streak += 1
            if self._streak >= self._every:
                best = self._left() * total[0] * (1.0 - 1.0 / ceiling)  # the most the rest could save (doc)
                price = catch + total[1] - total[0]
                share = self._probe_share(total)
                self._fields["probe_share"] = round(share, 4)
                if ceiling < CEILING or share * best < price:
                    decision = "no-probe"  # nothing a probe could find would pay for it
                else:
                    cap, decision, self._probe = 1, "probe", True
                self._streak, self._every = 0, min(64, 2 * self._every)
        in_ms = self.costs.measured and self._in_ms
        unit = 1e3 if in_ms else 1.0  # tokens per second once timed, else per t(1)
        self._fields.update({"decision": decision, "k_plan": k_plan, "u": [round(u * unit, 4) for u in util],
                             "u_unit": "tok/s" if in_ms else "tok/t1", "lambda": round(lam * unit, 4),
                             "value": round(value, 4), "ceiling": round(ceiling, 4),
                             "catchup_ms": round(catch, 2) if self.costs.measured else None})
        self._cap = cap
        return cap

    def _left(self) -> int:
        """Tokens still to come: at most max_new_tokens less what was emitted, perhaps far fewer (the pair's
        earlier answers, PairStats.remaining). Read only where a catch-up or a probe is priced."""
        cap_len = self._max_new or self._emitted + R_UNKNOWN
        left = max(1, cap_len - self._emitted)
        short = self.pair.remaining(self._key, self._emitted, cap_len) if self.pair is not None else None
        return min(left, short) if short is not None else left

    def _probe_share(self, total: list[float]) -> float:
        """The share of the best case a probe may cost: PROBE_SHARE, or less when the pair's pooled acceptance
        says how likely a 1-token draft is to beat AR at all (1 + a > T(1)/T(0), so a > T(1)/T(0) − 1)."""
        need = total[1] / total[0] - 1.0
        chance = self.pair.success_chance(need) if self.pair is not None else None
        if chance is None and self.near is not None:
            chance = self.near.success_chance(need)
        return PROBE_SHARE if chance is None else min(PROBE_SHARE, chance)

    def _evaluate(self, kmax: int, lam: float, total: list[float]) -> tuple:
        """(ā, U(0..kmax), k_plan, value of drafting, cap, ceiling G) under the current calibration and costs."""
        abar = self._abar = [1.0] + [self.cal.mean(i) for i in range(1, kmax + 1)]
        e, s, util = 1.0, 1.0, [1.0 / total[0]]
        for k in range(1, kmax + 1):
            s *= abar[k]
            e += s
            util.append(e / total[k])
        k_plan = max(range(kmax + 1), key=lambda k: (util[k], -k))
        ceiling = max((k + 1) * total[0] / total[k] for k in range(kmax + 1))  # G: every draft accepted
        if self.gated:  # the option value of the first token: keep it (and go on) or drop it, by its bin
            drop = -lam * (self._td + self._ta)
            value = 0.0
            for b, p in enumerate(self.cal.pi(1)):
                s1 = self.cal.cond(1, b)
                keep = s1 - lam * (total[1] - total[0]) + self._tail(1, s1, lam, total, kmax)[0]
                value += p * (keep if b == NONE else max(keep, drop))
            cap = kmax if value > 0 else 0
        else:
            value = (util[k_plan] - util[0]) * total[k_plan]
            cap = k_plan
        return abar, util, k_plan, value, cap, ceiling

    def keep_drafting(self, info: DraftInfo) -> bool:
        now = self.clock()
        if self.measure:
            self.costs.add_draft(info.index == 1, (now - self._last) * 1e3, self._unseen if info.index == 1 else 1)
        self._last = now
        self._asked += 1
        b = bin_of(info)
        self._bins.append(b)
        self.cal.saw(info.index, b)
        if self.pair is not None:
            self.pair.saw(b)
        i = min(info.index, self.max_window)
        s = (self._surv[-1] if self._surv else 1.0) * self.cal.cond(info.index, b)
        self._surv.append(s)
        if self._probe:
            self._stop = "probe"
            return True
        lam, total, tv = self._lam, self._total, self._tv
        gain, _ = self._tail(i, s, lam, total, min(self._cap, self.max_window))
        keep = s - lam * (tv[i] - tv[i - 1])  # verifying token i rather than dropping it
        droppable = b != NONE
        if i < self._cap and gain + keep > max(keep, 0.0 if droppable else -math.inf):
            return True
        self._drop = int(droppable and keep < 0)
        self._stop = "drop" if self._drop else "cap" if i >= self._cap else "value"
        return False

    def drop_on_stop(self) -> int:
        if self._drop:
            self._fields["dropped"] = self._drop
        return self._drop

    def update(self, result: Any, drafted: int) -> None:
        now = self.clock()
        if drafted and not self._asked:
            self.gated = False  # this drafter never consults keep(): plan a fixed k from now on
        if self.measure:
            ms = (now - (self._last if self._asked else self._t0)) * 1e3
            if drafted and not self._asked and self.costs.measured:  # one timing for draft + verify:
                ms -= drafted * self._td + self._ta  # charge the draft at its modelled cost
            self.costs.add_verify(drafted, max(ms, 1e-6))
        n = int(result.accepted)
        for i in range(1, min(drafted, n + 1) + 1):  # a draft never shown to keep() (block drafter): no bin
            b = self._bins[i - 1] if i <= len(self._bins) else NONE
            self.cal.add(i, b, i <= n)
            if self.pair is not None:
                self.pair.add(b, i <= n)
        self._recent.append((n + 1, drafted, self._drop))
        self._since_ar = 0 if not drafted else self._since_ar + 1
        # after a draft the drafter has run over its accepted drafts: only the bonus token is new to it
        self._unseen = 1 if (drafted or self._asked) else self._unseen + 1
        self._emitted += n + 1
        if self.pair is not None:
            self.pair.note_length(self._key, self._emitted)
        if self._asked:
            self._fields["s"] = [round(x, 4) for x in self._surv]
            self._fields["stop"] = self._stop or "cap"


    def window_refusal(self, limit: int | None, drafter_name: str) -> str | None:
        """One line refusing a window the drafter can never fill (its plan would price it), else None;
        `limit`: the drafter's most tokens per step (engine.spec.check_drafter reads it off the drafter)."""
        if limit is not None and self.max_window > limit:
            return (f"costaware:max={self.max_window} is beyond the {drafter_name} drafter's limit of {limit} "
                    f"tokens per step: use costaware:max={limit} or less")
        return None
