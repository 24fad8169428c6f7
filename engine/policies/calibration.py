"""The acceptance model of the cost-aware window (engine.policies.costaware): P(draft i accepted | the
drafts before it were, its confidence bin), calibrated online against verify outcomes.

Notation: i = a token's position in the step's draft (1-based), m_i = max_x q_i(x) the draft's confidence
before it samples token i, binned (BIN_EDGES; copy and phrase tokens, q = δ, share bin NONE), a_i =
cal(i, bin(m_i)). Each (position, bin) cell is Beta-smoothed towards its bin's pooled rate, that towards
a prior (0.7·m, a pair's reference run, or the pair's earlier requests: PairStats) whose odds are scaled by
one factor r shared by all bins (observed ÷ prior-predicted), so a confidently wrong draft is found out
before every bin is sampled. Labels as HF / SpecDec++: drafts up to the first rejection are 1, the first rejected 0,
later ones no sample. Worked example: a draft at m = 0.93 falls in bin [0.9, 0.97); with no counts its
a_1 is the prior 0.7·0.935 ≈ 0.65; after 4 accepts in that cell the shared scale is r = 5 / 3.62 = 1.38,
the prior's odds 1.89 become 2.61 (a rate of 0.72), the bin's pooled rate (4 + 2·0.72) / 6 = 0.91, and the
cell (4 + 4·0.91) / 8 ≈ 0.95.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from engine.policies.base import DraftInfo

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
PAIR_MIN = 8  # labelled drafts of earlier requests before the pair's pooled acceptance replaces the prior
LEN_MIN = 4  # finished requests before their lengths, not max_new_tokens, say how much a request has left


def bin_of(info: DraftInfo) -> int:
    """The confidence bin of a drafted token (NONE for copy / phrase tokens, which carry a match length)."""
    if info.match_len is not None:
        return NONE
    m = info.q_token if info.q_max is None else info.q_max  # replay: greedy references, q_token = max q
    b = 0
    while b + 1 < NONE and m >= BIN_EDGES[b + 1]:
        b += 1
    return b


def odds_scaled(p: float, r: float) -> float:
    """p with its odds multiplied by r. Why odds: a rate times r saturates — r = 1.6 (one accepted low-confidence
    draft) took a 0.95 bin to the 0.999 cap, and 8-token windows were drafted on it and rejected at their first
    token; in odds the same r moves 0.95 to 0.97 and 0.4 to 0.52."""
    p = min(max(p, 1e-6), 1.0 - 1e-6)
    o = p / (1.0 - p) * r
    return o / (1.0 + o)


def mid(b: int) -> float:
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
            m = odds_scaled(self.prior[b], self.scale)
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


class PairStats:
    """Acceptance per confidence bin pooled over the requests a pair has finished at one temperature in
    this process: the next request's prior (module doc), so each request need not relearn its pair; and
    the lengths those requests ran to (`remaining`: how much of a request is likely left)."""

    def __init__(self) -> None:
        self.acc, self.n, self.seen = [0.0] * N_BINS, [0.0] * N_BINS, [0.0] * N_BINS
        self.lengths: dict[int, int] = {}  # request key → tokens it emitted (so far, for the running one)

    def note_length(self, key: int, emitted: int) -> None:
        self.lengths[key] = int(emitted)

    def remaining(self, key: int, emitted: int, cap: int) -> int | None:
        """Tokens request `key` may still emit, counted pessimistically: the lower quartile of the lengths
        (capped at `cap`) of the pair's other requests that ran past `emitted`, less `emitted`. None before
        LEN_MIN other requests, or when none ran that far. Why a low quantile: a catch-up paid on a prompt of
        700 tokens whose answer stops after 12 never pays back (rag: 0.81× AR, priced against max_new = 96),
        and one such request is a task 20 % slower than AR, where an answer longer than guessed only costs
        the few steps before the next decision. Worked example: lengths 12, 20, 96, 96 at emitted 0 → 12;
        at emitted 15 → 20 − 15 = 5; at emitted 30 → 96 − 30 = 66."""
        done = [min(n, cap) for k, n in self.lengths.items() if k != key]
        if len(done) < LEN_MIN:
            return None
        longer = sorted(n for n in done if n > emitted)
        return max(1, longer[(len(longer) - 1) // 4] - emitted) if longer else None

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


    def success_chance(self, need: float) -> float | None:
        """P(the pair's acceptance rate > `need`) given its pooled labels (normal approximation of the
        posterior of a rate seen acc times in n: mean (acc+1)/(n+2), sd √(mean(1−mean)/(n+3))); None
        before PAIR_MIN labels. Worked example: 13 of 100 accepted, need 0.35 → z ≈ 6.4, chance ≈ 1e-10;
        4 of 10, need 0.35 → z ≈ −0.4, chance ≈ 0.65."""
        n = sum(self.n)
        if n < PAIR_MIN:
            return None
        mean = (sum(self.acc) + 1.0) / (n + 2.0)
        sd = math.sqrt(mean * (1.0 - mean) / (n + 3.0))
        return 0.5 * math.erfc((need - mean) / (sd * math.sqrt(2.0)))


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
    prior = [(acc[b] + PRIOR_N * (mid(b) if b < NONE else PRIOR_NONE)) / (n[b] + PRIOR_N) for b in range(N_BINS)]
    total = sum(n) or 1.0
    pi = [x / total for x in n]
    t = (ref.header.get("timings") or {})
    tk = [float(x) for x in t.get("target_ms_by_tokens") or []]
    if len(tk) < 2 or not tk[0] > 0 or "draft_ms_per_token" not in t:
        return prior, pi, None, None
    growth = [(tk[k] - tk[0]) / (k * tk[0]) for k in range(1, min(5, len(tk)))]
    return prior, pi, max(float(t["draft_ms_per_token"]) / tk[0], 1e-3), max(0.0, statistics.median(growth))
