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
reference run, `ref=PATH`) times one factor r shared by all bins (observed ÷ prior-predicted), so a
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
                steps carries that price, spread over the request's remaining steps; a probe runs only if
                the ceiling G = max_k (k+1)·T(0)/T(k) (every draft accepted) beats AR by CEILING and
                PROBE_SHARE of the most the rest of the request could save, R·T(0)·(1 − 1/G), covers
                n·t_p + T(1) − T(0). On a path where a verify of k drafts costs nearly k+1 forwards (the
                quantized one: t(2)/t(1) ≈ 1.3–1.4, c ≈ 0.5) G < CEILING: nothing is ever drafted again
                once the costs are measured, so the policy is AR there.

Costs belong to the pair, not the request: with a RequestContext (engine.run.policy_for) the policy
prices with the StepCosts shared by every costaware policy on the same (target, drafter) objects in this
process (`shared_costs`), which the bench primes with its start-of-run cost probe (`prime_costs`), so a
bench's first request is already priced with the run's own costs. Acceptance is learnt per request, but
from the pair's second request on its prior is the pair's pooled per-bin acceptance at that temperature
(`shared_stats`, once PAIR_MIN drafts are labelled; trusted as a reference run) instead of 0.7·m.

Lossless: every decision reads only what is fixed before the verify call (past verify outcomes,
timings, the confidence m_i), so ordinary speculative sampling stays exact; the one drop reads m_i,
which is fixed before token i is drawn, so a kept token is still a plain draw from q_i (a stopping
rule, not a filter — the argument of PACER b = 1, engine.policies.pacer). A drafter that never
consults keep() (the block drafter) is detected after its first step and then gets the fixed-k plan
argmax_k U(k) as its cap. `measure=0` prices with the prior only (deterministic runs, tests).
"""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Any, Callable

from engine.policies.base import DraftInfo, WindowPolicy, is_whole

BIN_EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 0.97)  # lower edges of confidence bins (finer near 1: most accepts)
NONE = len(BIN_EDGES)  # the bin of tokens without a confidence (copy / phrase drafts)
N_BINS = NONE + 1
POSITIONS = 8  # positions ≥ 8 share a row: few steps reach them, their rates differ little
PRIOR_NONE = 0.3  # a copy draft is right about a third of the time on Spec-Bench's copy-heavy tasks
PRIOR_N, POS_N = 2.0, 4.0  # Beta pseudo-counts: bin rate → prior, cell → bin (data overrides within a few steps)
R_N = 1.0  # pseudo-count of the shared scale r of the prior (Calibration.scale): one draft's worth
PRIOR_SHRINK = 0.7  # prior a ≈ 0.7·m: drafts are over-confident (SmolLM2: 0.2 accepted at mean m ≈ 0.35)
REF_N = 8.0  # a reference run's rates are measured on the same pair: trust them more than the identity prior
PI_N = 0.25  # pseudo-count per bin of the confidence distribution π(i, ·)
REFIT = 8  # new timing samples between refits of the cost table
BASELINE = 64  # steps of drafting between timed AR steps (the first one as soon as anything was timed)
RATE_STEPS = 16  # steps in λ's window: long enough to smooth one lucky step, short enough to follow a task
CEILING = 1.02  # G must beat AR by 2 %: below it even a perfect draft cannot pay back the probe's noise
PROBE_SHARE = 0.25  # a probe finds drafting profitable perhaps 1 time in 4: it may cost a quarter of the best case
CATCHUP_MIN = 4  # a first forward over ≥ 4 unseen tokens is a catch-up sample (t_p), not a steady-state one
PREFILL_SHARE = 0.1  # t_p prior: a catch-up token costs ~1/10 of a draft decode step (compute- vs bandwidth-bound)
R_UNKNOWN = 128  # remaining tokens assumed when the request's length is unknown (no RequestContext)
PAIR_MIN = 8  # labelled drafts of earlier requests before the pair's pooled acceptance replaces the prior


def bin_of(info: DraftInfo) -> int:
    """The confidence bin of a drafted token (NONE for copy / phrase tokens, which carry a match length)."""
    if info.match_len is not None:
        return NONE
    m = info.q_token if info.q_max is None else info.q_max  # replay: greedy references, q_token = max q
    b = 0
    while b + 1 < NONE and m >= BIN_EDGES[b + 1]:
        b += 1
    return b


def _mid(b: int) -> float:
    return 0.5 * (BIN_EDGES[b] + (BIN_EDGES[b + 1] if b + 1 < NONE else 1.0))


class Calibration:
    """cal(i, b) ≈ P(draft i accepted | 1..i−1 accepted, confidence bin b), and π(i, b), the share of
    drafts at position i that fall in bin b — Beta/Dirichlet-smoothed counts (module doc)."""

    def __init__(self, prior: list[float], prior_n: float, pi: list[float]) -> None:
        self.prior, self.prior_n, self.pi_prior = prior, prior_n, pi
        self.acc = [[0.0] * N_BINS for _ in range(POSITIONS)]
        self.n = [[0.0] * N_BINS for _ in range(POSITIONS)]
        self.seen = [[0.0] * N_BINS for _ in range(POSITIONS)]
        self.version = 0  # bumped on every new count: the policy reuses its values while it is unchanged
        self._cond: dict[tuple[int, int], float] = {}
        self.hits = self.predicted = 0.0  # Σ accepted and Σ prior[b] over every labelled draft

    @property
    def scale(self) -> float:
        """r = (Σ accepted + R_N) / (Σ prior prediction + R_N): how far this draft beats or misses its
        prior, shared by every bin, so one confident rejection lowers the bins not yet sampled too."""
        return (self.hits + R_N) / (self.predicted + R_N)

    def add(self, pos: int, b: int, accepted: bool) -> None:
        p = min(pos, POSITIONS) - 1
        self.acc[p][b] += accepted
        self.n[p][b] += 1
        self.hits += accepted
        self.predicted += self.prior[b]
        self.version += 1
        self._cond.clear()

    def saw(self, pos: int, b: int) -> None:
        self.seen[min(pos, POSITIONS) - 1][b] += 1
        self.version += 1

    def cond(self, pos: int, b: int) -> float:
        p = min(pos, POSITIONS) - 1
        key = (p, b)
        if key not in self._cond:  # the decode loop's hot path: computed once per count change
            pooled_a = sum(r[b] for r in self.acc)
            pooled_n = sum(r[b] for r in self.n)
            m = min(0.999, self.prior[b] * self.scale)
            pooled = (pooled_a + self.prior_n * m) / (pooled_n + self.prior_n)
            self._cond[key] = (self.acc[p][b] + POS_N * pooled) / (self.n[p][b] + POS_N)
        return self._cond[key]

    def pi(self, pos: int) -> list[float]:
        row = self.seen[min(pos, POSITIONS) - 1]
        w = [row[b] + PI_N * self.pi_prior[b] * N_BINS for b in range(N_BINS)]
        z = sum(w)
        return [x / z for x in w]

    def mean(self, pos: int) -> float:
        """ā_i: acceptance at position i before its confidence is known."""
        return sum(p * self.cond(pos, b) for b, p in enumerate(self.pi(pos)) if p > 0)


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
            td = statistics.median(self.dn or self.d1) if (self.dn or self.d1) else None
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
        return n * (statistics.median(self.tp) if self.tp else PREFILL_SHARE * td)

    def prime(self, t_draft_ms: float, t_target_ms: dict) -> None:
        """Seed with a cost probe (engine.bench.runner.measure_costs): a k-token target forward verifies
        k − 1 drafts; one sample each, so the run's own timings outvote it within a few steps."""
        for k, ms in sorted((int(k), float(v)) for k, v in t_target_ms.items()):
            if k >= 1 and math.isfinite(ms) and ms > 0:
                self.add_verify(k - 1, ms)
        if math.isfinite(t_draft_ms) and t_draft_ms > 0:
            self.add_draft(False, float(t_draft_ms))

    def table(self, kmax: int) -> tuple[list[float], list[float], float, float]:
        """`fit(kmax)`, refitted every REFIT samples or new window (per step it costs ~1 % of a small step)."""
        c = self._cached
        if c is None or c[0] != kmax or c[2] != len(self.tv) or self._count - c[1] >= REFIT:
            self._cached = c = (kmax, self._count, len(self.tv), self.fit(kmax))
            self.fits += 1
        return c[3]

    def fit(self, kmax: int) -> tuple[list[float], list[float], float, float]:
        """(t_v(0..kmax), T(0..kmax), t_d, t_a); ms once anything was measured, else units of t(1)."""
        med = {k: statistics.median(d) for k, d in sorted(self.tv.items()) if d}
        if 0 in med:
            t1 = med[0]
        elif med:
            k0 = next(iter(med))
            t1 = med[k0] / (1 + self.v * k0)
        elif self.dn or self.d1:
            t1 = statistics.median(self.dn or self.d1) / self.c
        else:
            t1 = 1.0
        td = statistics.median(self.dn) if self.dn else statistics.median(self.d1) if self.d1 else self.c * t1
        ta = max(0.0, statistics.median(self.d1) - td) if self.d1 and self.dn else 0.0
        ks = list(med)
        slope = self.v * t1
        if len(ks) >= 2:  # least squares over the measured windows' medians
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


class PairStats:
    """Acceptance per confidence bin pooled over the requests a pair has finished at one temperature in
    this process: the next request's prior (module doc), so each request need not relearn its pair."""

    def __init__(self) -> None:
        self.acc, self.n, self.seen = [0.0] * N_BINS, [0.0] * N_BINS, [0.0] * N_BINS

    def add(self, b: int, accepted: bool) -> None:
        self.acc[b] += accepted
        self.n[b] += 1

    def saw(self, b: int) -> None:
        self.seen[b] += 1

    def prior(self, base: list[float], base_pi: list[float]) -> tuple[list[float], list[float]] | None:
        """(per-bin acceptance, π) Beta-smoothed towards `base` / `base_pi`; None before PAIR_MIN labels."""
        if sum(self.n) < PAIR_MIN:
            return None
        rate = [(self.acc[b] + PRIOR_N * base[b]) / (self.n[b] + PRIOR_N) for b in range(N_BINS)]
        z = sum(self.seen) + PI_N * N_BINS
        return rate, [(self.seen[b] + PI_N * N_BINS * base_pi[b]) / z for b in range(N_BINS)]


class _PairBook:
    def __init__(self, c: float, v: float) -> None:
        self.costs = StepCosts(c, v)
        self.stats: dict[float, PairStats] = {}


_BOOK: "weakref.WeakKeyDictionary[Any, dict[int, _PairBook]]" = weakref.WeakKeyDictionary()


def _book(target: Any, drafter: Any, c: float, v: float) -> "_PairBook | None":
    try:
        per_target = _BOOK.setdefault(target, {})
    except TypeError:  # an unhashable or un-weakref-able stand-in: nothing shared
        return None
    book = per_target.get(id(drafter))
    if book is None:
        book = per_target[id(drafter)] = _PairBook(c, v)
    return book


def shared_costs(target: Any, drafter: Any, c: float, v: float) -> StepCosts:
    """The StepCosts of one (target, drafter) pair in this process: every costaware policy on those two
    loaded objects prices with, and adds to, the same measurements (the module doc). Keyed weakly on
    the target, so unloading a model drops its costs."""
    book = _book(target, drafter, c, v)
    return StepCosts(c, v) if book is None else book.costs


def shared_stats(target: Any, drafter: Any, temperature: float) -> PairStats:
    """The pair's pooled acceptance at this temperature (PairStats), shared like its costs."""
    book = _book(target, drafter, 0.3, 0.05)
    if book is None:
        return PairStats()
    return book.stats.setdefault(round(float(temperature), 6), PairStats())


def prime_costs(target: Any, drafter: Any, probe: dict) -> None:
    """Seed the pair's shared costs with a start-of-run cost probe ({t_draft_ms, t_target_ms}); a
    no-op for a probe without a draft timing (model-free drafts: nan)."""
    if not math.isfinite(float(probe.get("t_draft_ms", float("nan")))):
        return
    shared_costs(target, drafter, 0.3, 0.05).prime(float(probe["t_draft_ms"]), probe["t_target_ms"])


def reference_prior(path: str) -> tuple[list[float], list[float], float | None, float | None]:
    """(per-bin acceptance, π over bins, c, v) from a pair's reference run (engine.trace.reference_file):
    a greedy reference's match rate per q_top bin (β for a sampling one), the bins' shares, and the
    costs of its timing block (None without one)."""
    from engine.trace.reference_file import load_reference

    ref = load_reference(Path(path).expanduser())
    acc, n = [0.0] * N_BINS, [0.0] * N_BINS
    for req in ref.requests:
        hits = req["beta"] if "beta" in req else [float(d == y) for d, y in zip(req["draft_argmax"], req["output_ids"])]
        for q, h in zip(req["q_top"], hits):
            b = bin_of(DraftInfo(1, 0, float(q), 0.0))
            acc[b] += h
            n[b] += 1
    prior = [(acc[b] + PRIOR_N * (_mid(b) if b < NONE else PRIOR_NONE)) / (n[b] + PRIOR_N) for b in range(N_BINS)]
    total = sum(n) or 1.0
    pi = [x / total for x in n]
    t = (ref.header.get("timings") or {})
    tk = [float(x) for x in t.get("target_ms_by_tokens") or []]
    if len(tk) < 2 or not tk[0] > 0 or "draft_ms_per_token" not in t:
        return prior, pi, None, None
    growth = [(tk[k] - tk[0]) / (k * tk[0]) for k in range(1, min(5, len(tk)))]
    return prior, pi, max(float(t["draft_ms_per_token"]) / tk[0], 1e-3), max(0.0, statistics.median(growth))


class CostAware(WindowPolicy):
    """Draft while the expected tokens of one more draft beat its measured cost (module doc).

    Defaults: max = 8 (on CPUs a verify of > 9 tokens grows steeply, and rarely pays), c = 0.3 and
    v = 0.05 (a draft ~3× cheaper than the target, near-flat bf16 verify: the prior only until the
    run's own timings exist), probe = 8 AR steps between re-probes, measure = 1 (time this run)."""

    name = "costaware"

    def __init__(self, max_window: int = 8, c: float = 0.3, v: float = 0.05, probe: int = 8,
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
        self._prompt_len, self._max_new = 0, None  # the request's (for_request); unknown outside a decode run
        if ref is not None and not isinstance(ref, str):
            raise ValueError(f"costaware ref must be a reference file path, got {ref!r}")
        self.c0, self.v0, self.probe, self.ref, self.measure = float(c), float(v), int(probe), ref, int(measure)
        self.prior = [(PRIOR_SHRINK * _mid(b) if b < NONE else PRIOR_NONE) for b in range(N_BINS)]
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
        self.gated = True  # the drafter consults keep(); False once a step drafted without asking
        self._since_ar = 0  # steps since the last AR step (costs, and this, persist across requests)
        self.reset()

    @property
    def params(self) -> dict[str, Any]:
        mine = None if self.ref is not None else 0  # with ref=, c and v come from the reference
        out = {"max": self.max_window, "c": self.c0 if mine == 0 else None, "v": self.v0 if mine == 0 else None,
               "probe": self.probe, "ref": self.ref, "measure": None if self.measure else 0}
        return {k: v for k, v in out.items() if v is not None}

    def for_request(self, ctx) -> "CostAware":
        """This policy for one request: its prompt and length (the catch-up rule) and, when measuring,
        the pair's shared costs (`shared_costs`)."""
        self._prompt_len, self._max_new = len(ctx.prompt_ids), int(ctx.max_new_tokens)
        if self.measure and ctx.target is not None and ctx.draft is not None:
            self.costs = shared_costs(ctx.target, ctx.draft, self.c0, self.v0)
            self.pair = shared_stats(ctx.target, ctx.draft, ctx.temperature)
            self._memo_key = None
        self.reset()
        return self

    def reset(self) -> None:
        super().reset()
        learnt = self.pair.prior(self.prior, self.pi_prior) if self.pair is not None else None
        self.cal = (Calibration(self.prior, self.prior_n, self.pi_prior) if learnt is None
                    else Calibration(learnt[0], REF_N, learnt[1]))  # the pair's earlier requests, trusted as a reference run
        self._recent: deque = deque(maxlen=RATE_STEPS)  # (emitted, window, dropped) of the last steps
        self._streak, self._every = 0, self.probe
        self._unseen = self._prompt_len  # tokens the drafter has not run over (its prefill is lazy)
        self._emitted = 0
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

    def _expected(self, k: int) -> float:
        """E(k) on ā: the tokens a k-draft step emits on average (so `left / E(k)` steps remain)."""
        e, s = 1.0, 1.0
        for i in range(1, k + 1):
            s *= self._abar[i]
            e += s
        return e

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
        left = max(1, (self._max_new or self._emitted + R_UNKNOWN) - self._emitted)  # tokens still to come
        decision = "draft" if cap else "ar"
        if cap and self.measure and self.costs.measured and self._since_ar >= (BASELINE if 0 in self.costs.tv else 1):
            cap, decision = 0, "baseline"  # time an AR step: T(0) is the bar, a prior guess of it would bias every U
        elif cap and not (catch and value * left / self._expected(k_plan) < lam * catch):
            self._streak, self._every = 0, self.probe
        else:
            if cap:  # the catch-up costs more than drafting would win over the rest of the request
                cap, decision = 0, "catch-up"
            self._streak += 1
            if self._streak >= self._every:
                best = left * total[0] * (1.0 - 1.0 / ceiling)  # the most the rest could save (ceiling, doc)
                price = catch + total[1] - total[0]
                if ceiling < CEILING or PROBE_SHARE * best < price:
                    decision = "no-probe"  # nothing a probe could find would pay for it
                else:
                    cap, decision, self._probe = 1, "probe", True
                self._streak, self._every = 0, min(64, 2 * self._every)
        unit = 1e3 if self.costs.measured else 1.0  # tokens per second once timed, else per t(1)
        self._fields.update({"decision": decision, "k_plan": k_plan, "u": [round(u * unit, 4) for u in util],
                             "u_unit": "tok/s" if self.costs.measured else "tok/t1", "lambda": round(lam * unit, 4),
                             "value": round(value, 4), "ceiling": round(ceiling, 4),
                             "catchup_ms": round(catch, 2) if self.costs.measured else None})
        self._cap = cap
        return cap

    def _evaluate(self, kmax: int, lam: float, total: list[float]) -> tuple:
        """(ā, U(0..kmax), k_plan, value of drafting, cap) under the current calibration and costs."""
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
        if self._asked:
            self._fields["s"] = [round(x, 4) for x in self._surv]
            self._fields["stop"] = self._stop or "cap"


def check_drafter(policy: Any, drafter: Any) -> None:
    """Refuse before decoding a costaware window the drafter can never fill (its plan would price it):
    the drafter's limit is B − 1 for a block drafter, n for lookup / suffix (none for draft models)."""
    limit = int(drafter.block_size) - 1 if getattr(drafter, "block_size", None) else getattr(drafter, "max_tokens", None)
    if isinstance(policy, CostAware) and limit is not None and policy.max_window > limit:
        name = getattr(drafter, "name", type(drafter).__name__)
        raise ValueError(f"costaware:max={policy.max_window} is beyond the {name} drafter's limit of {limit} "
                         f"tokens per step: use costaware:max={limit} or less")
