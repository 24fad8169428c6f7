"""Exact enumeration of any verifier (single- or multi-draft) on toy models: is one iteration lossless?

Notation: p = target (M_b), q = draft (M_s), γ drafted tokens per block, K i.i.d. blocks. One
iteration emits Y (accepted drafts plus one correction/bonus token), 1 ≤ |Y| ≤ γ+1. It is lossless
iff for every z of length γ+1

    Σ_{t=1}^{γ+1} P(Y = z_{1:t}) · P_target(z_{t+1:γ+1} | z_{1:t}) = P_target(z_{1:γ+1}).

Deficit (can a later-iteration fix repair it?): A(y) = P(Y_{1:|y|} = y), W(y) = P_target(y) − A(y);
some modification of later targets restores losslessness iff W(y) ≥ 0 for all y. A wrong
first-token marginal makes W < 0.

How the *real* verifier is driven: every K-tuple of blocks is enumerated (weight Π q), and for each
the verifier is replayed branch by branch. Verifiers report the coins they flip as (uniform index,
h) (engine.verify.coins); the enumerator starts with all uniforms 0 (accept whenever h > 0) and, for
every coin that accepted with h < 1, replays with that coin forced to reject (u = 1 − 1e-15) and the
earlier coins fixed. A branch weighs Π h or (1 − h) over its coins (h clipped to [0, 1]); its last
token follows the distribution the verifier says it sampled from. Verifiers without a ledger (the
token verifier) are read as first-rejection rules: coins (i, h_i) for i ≤ accepted.
Everything runs in float64, so a correct verifier shows errors ≈ 1e-16.

Worked example (context-free, V = 2, γ = 2, q = (2/3, 1/3), p = (1/3, 2/3)): token verification
gives E[accepted] = 10/9, block verification 11/9 (γ = 3: 38/27 and 5/3).

CLI: `python -m engine audit` (engine/cli/audit.py) writes docs/audit.md and docs/results/audit.csv
(engine.bench.audit_report).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

Dist = Callable[[tuple[int, ...]], torch.Tensor]  # context (relative to the prefix) → next-token dist

_ACCEPT = 0.0  # u = 0 accepts whenever h > 0
_REJECT = 1.0 - 1e-15  # u just below 1 rejects whenever h < 1


@dataclass(frozen=True)
class AuditRow:
    verifier: str
    case: str
    vocab: int
    gamma: int
    lossless_error: float  # max_z |Σ_t P(Y=z_1:t)·P(z_t+1:|z_1:t) − P(z)|
    first_token_error: float  # max_x |P(Y_1 = x) − p(x)|
    mass_error: float  # |Σ_y P(Y=y) − 1|
    expected_accepted: float  # E[accepted drafts], excluding the bonus/correction token
    k: int = 1  # number of i.i.d. draft blocks
    min_deficit: float = 0.0  # min_y W(y); < 0 means no later-iteration fix can restore losslessness
    fallback_mass: float = 0.0  # probability of a zero-mass residual (must be 0 for a correct rule)

    def lossless(self, tol: float = 1e-12) -> bool:
        return self.lossless_error <= tol and self.mass_error <= tol


def _coins_of(res, gamma: int):
    coins = getattr(res, "coins", None)
    if coins is not None and (coins or not res.accept_probs):
        return coins
    n = min(res.accepted + 1, gamma)
    return tuple((i, res.accept_probs[i]) for i in range(n))


def branches(call: Callable[[torch.Tensor], object], n_uniforms: int, gamma: int):
    """Every coin branch of one verifier call: yields (probability, result)."""
    stack: list[dict[int, bool]] = [{}]
    while stack:
        forced = stack.pop()
        u = torch.full((n_uniforms,), _ACCEPT, dtype=torch.float64)
        for i, acc in forced.items():
            u[i] = _ACCEPT if acc else _REJECT
        res = call(u)
        prob, path, feasible = 1.0, {}, True
        for idx, h in _coins_of(res, gamma):
            a = min(max(float(h), 0.0), 1.0)
            out = float(u[idx]) < h
            if idx in forced and out != forced[idx]:
                feasible = False  # forcing failed: the branch has probability ≤ 1e-15
                break
            if idx not in forced and out and a < 1.0:
                stack.append({**path, idx: False})
            path[idx] = out
            prob *= a if out else 1.0 - a
            if prob == 0.0:
                break
        if feasible and prob > 0.0:
            yield prob, res


def _rows(q_fn: Dist, p_fn: Dist, block: tuple[int, ...], vocab: int):
    g = len(block)
    q = torch.stack([q_fn(block[:i]) for i in range(g)]) if g else torch.zeros(0, vocab, dtype=torch.float64)
    p = torch.stack([p_fn(block[:i]) for i in range(g + 1)])
    return q, p


def output_distribution(verify, q_fn: Dist, p_fn: Dist, vocab: int, gamma: int, k: int = 1,
                        multi: bool = False, stats: dict | None = None) -> dict[tuple[int, ...], float]:
    """P(Y = y) of one iteration. `multi`: verify takes lists of K blocks (engine.verify.MULTI_DRAFT)."""
    from engine.verify.coins import uniforms_for_blocks

    if k > 1 and not multi:
        raise ValueError("a single-draft verifier can only be audited at K = 1")
    blocks = list(itertools.product(range(vocab), repeat=gamma))
    weight, rows = {}, {}
    for b in blocks:
        w = 1.0
        for i in range(gamma):
            w *= float(q_fn(b[:i])[b[i]])
        if w > 0:
            weight[b], rows[b] = w, _rows(q_fn, p_fn, b, vocab)
    n_u = uniforms_for_blocks([gamma] * k) if multi else gamma + 1
    out: dict[tuple[int, ...], float] = {}
    fallback = 0.0
    for tup in itertools.product(list(weight), repeat=k):
        w = float(np.prod([weight[b] for b in tup]))
        if multi:
            qs, ps = [rows[b][0] for b in tup], [rows[b][1] for b in tup]

            def call(u, tup=tup, qs=qs, ps=ps):
                return verify([list(b) for b in tup], qs, ps, u)
        else:
            q, p = rows[tup[0]]

            def call(u, b=tup[0], q=q, p=p):
                return verify(list(b), q, p, u)
        for pr, res in branches(call, n_u, gamma):
            mass = w * pr
            if getattr(res, "fallback", False):
                fallback += mass
            head = tuple(int(t) for t in res.tokens[:-1])
            for x in range(vocab):
                m = mass * float(res.final_dist[x])
                if m > 0:
                    y = head + (x,)
                    out[y] = out.get(y, 0.0) + m
    if stats is not None:
        stats["fallback_mass"] = fallback
    return out


def _joint(p_fn: Dist, seq: tuple[int, ...], start: tuple[int, ...] = ()) -> float:
    prob = 1.0
    ctx = start
    for t in seq:
        prob *= float(p_fn(ctx)[t])
        ctx = ctx + (t,)
    return prob


def audit(verify, q_fn: Dist, p_fn: Dist, vocab: int, gamma: int, name: str = "", case: str = "",
          k: int = 1, multi: bool = False) -> AuditRow:
    stats: dict = {}
    dist = output_distribution(verify, q_fn, p_fn, vocab, gamma, k, multi, stats)
    err = 0.0
    for z in itertools.product(range(vocab), repeat=gamma + 1):
        lhs = sum(dist.get(z[:t], 0.0) * _joint(p_fn, z[t:], z[:t]) for t in range(1, gamma + 2))
        err = max(err, abs(lhs - _joint(p_fn, z)))
    first = [sum(v for y, v in dist.items() if y[0] == x) for x in range(vocab)]
    p0 = p_fn(())
    first_err = max(abs(first[x] - float(p0[x])) for x in range(vocab))
    mass_err = abs(sum(dist.values()) - 1.0)
    e_acc = sum(v * (len(y) - 1) for y, v in dist.items())
    reach: dict[tuple[int, ...], float] = {}
    for y, v in dist.items():
        for t in range(1, len(y) + 1):
            reach[y[:t]] = reach.get(y[:t], 0.0) + v
    deficit = min([_joint(p_fn, y) - a for y, a in reach.items()] + [0.0])
    return AuditRow(name, case, vocab, gamma, err, first_err, mass_err, e_acc, k, deficit, stats["fallback_mass"])


# ---------------------------------------------------------------- toy models


def random_toy(vocab: int, seed: int, zeros: bool = False) -> Dist:
    """Context-dependent random distributions (float64), optionally with exact zeros."""
    memo: dict[tuple[int, ...], torch.Tensor] = {}

    def fn(ctx: tuple[int, ...]) -> torch.Tensor:
        if ctx not in memo:
            g = torch.Generator().manual_seed(hash((seed, ctx)) & 0x7FFFFFFF)
            d = torch.rand(vocab, generator=g, dtype=torch.float64) ** 2
            if zeros:
                d[int(torch.randint(vocab, (1,), generator=g))] = 0.0
            memo[ctx] = d / d.sum()
        return memo[ctx]

    return fn


def notes_toy(vocab: int, seed: int, scale: float = 1.5) -> tuple[Dist, Dist]:
    """(q, p) = (M_s, M_b) of the project notes' reference checker (Appendix A), bit for bit, so its
    published enumeration numbers (Appendix B, §5.4, §5.5) are regression values here."""
    memo: dict = {}

    def d(who: int, ctx: tuple[int, ...]) -> torch.Tensor:
        key = (who, tuple(int(t) for t in ctx))
        if key not in memo:
            rng = np.random.default_rng(abs(hash((seed, who, key[1]))) % 2**32)
            lg = rng.normal(size=vocab) * scale
            e = np.exp(lg - lg.max())
            memo[key] = torch.from_numpy(e / e.sum())
        return memo[key]

    return (lambda c: d(2, c)), (lambda c: d(1, c))


def constant(dist: list[float]) -> Dist:
    t = torch.tensor(dist, dtype=torch.float64)
    return lambda ctx: t


def toy_cases(vocab: int) -> dict[str, tuple[Dist, Dist]]:
    """(q, p) pairs: random context-dependent toys and the adversarial ones from the notes."""
    one_hot = [1.0] + [0.0] * (vocab - 1)
    disjoint_q = [1.0] + [0.0] * (vocab - 1)
    disjoint_p = [0.0] + [1.0 / (vocab - 1)] * (vocab - 1)
    cases = {
        "random": (random_toy(vocab, 1), random_toy(vocab, 2)),
        "random-2": (random_toy(vocab, 3), random_toy(vocab, 4)),
        "notes-toy-0": notes_toy(vocab, 0),
        "notes-toy-1": notes_toy(vocab, 1),
        "p=q": (random_toy(vocab, 5), random_toy(vocab, 5)),
        "disjoint": (constant(disjoint_q), constant(disjoint_p)),
        "one-hot draft": (constant(one_hot), random_toy(vocab, 6)),
        "draft zeros": (random_toy(vocab, 7, zeros=True), random_toy(vocab, 8)),
    }
    if vocab == 2:
        cases["gbv toy"] = (constant([2 / 3, 1 / 3]), constant([1 / 3, 2 / 3]))
    return cases


# ---------------------------------------------------------------- the audit command

# (V, γ, K) grid: V^(γK) block tuples per case. The default caps them at 729 so the table takes minutes
# on a shared 2-core CPU; --full adds (V=2, γ=4, K=3) (4096 tuples per case).
FULL_GRID = tuple((v, g, k) for v in (2, 3) for g in (1, 2, 3, 4) for k in (1, 2, 3) if v ** (g * k) <= 4096)
GRID = tuple(x for x in FULL_GRID if x[0] ** (x[1] * x[2]) <= 729)


def audit_verifiers() -> dict[str, tuple[Callable, bool]]:
    """Every registered verifier plus the lossy BV near-miss, as name → (fn, multi)."""
    from engine.verify import MULTI_DRAFT, VERIFIERS
    from engine.verify.block import verify_block_same_row

    out = {n: (fn, n in MULTI_DRAFT) for n, fn in VERIFIERS.items()}
    # Its K blocks share one sampled prefix and branch deterministically, not the i.i.d. drafts enumerated
    # here; it is enumerated on its own kind of tree in tests/unit/verify/test_onehot_tree.py.
    out.pop("onehot-tree", None)
    out["block-same-row (lossy near-miss)"] = (verify_block_same_row, False)
    return out


def run_audit(names=None, grid=GRID, cases=None, progress=None) -> list[AuditRow]:
    rows = []
    vs = audit_verifiers()
    for name, (fn, multi) in vs.items():
        if names and name not in names:
            continue
        for v, g, k in grid:
            if k > 1 and not multi:
                continue
            for case, (q_fn, p_fn) in toy_cases(v).items():
                if cases and case not in cases:
                    continue
                rows.append(audit(fn, q_fn, p_fn, v, g, name, case, k, multi))
                if progress:
                    progress(rows[-1])
    return rows
