"""Exact enumeration of a verifier on toy models: is one decode iteration lossless?

Notation: p = target (M_b), q = draft (M_s), γ drafted tokens. One iteration emits Y (accepted drafts
plus one correction/bonus token), 1 ≤ |Y| ≤ γ+1. The iteration is lossless iff for every z of
length γ+1

    Σ_{t=1}^{γ+1} P(Y = z_{1:t}) · P_target(z_{t+1:γ+1} | z_{1:t}) = P_target(z_{1:γ+1}).

`output_distribution` enumerates every draft block (weight Π q) and every accept/reject branch of the
*real* verifier function: branch "reject at k" is driven by uniforms that accept wherever h_i > 0 and
reject wherever h_k < 1, its probability Π_{i<k} h_i · (1 − h_k) is computed from the h_i the verifier
returns, and the emitted token follows the distribution the verifier says it sampled from.
Everything runs in float64, so a correct verifier shows errors ≈ 1e-16.

Worked example (context-free, V = 2, γ = 2): q = (2/3, 1/3), p = (1/3, 2/3) gives E[accepted] = 10/9.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

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


def output_distribution(verify, q_fn: Dist, p_fn: Dist, vocab: int, gamma: int) -> dict[tuple[int, ...], float]:
    out: dict[tuple[int, ...], float] = {}
    for block in itertools.product(range(vocab), repeat=gamma):
        w = 1.0
        for i in range(gamma):
            w *= float(q_fn(block[:i])[block[i]])
        if w == 0.0:
            continue
        q = torch.stack([q_fn(block[:i]) for i in range(gamma)]) if gamma else torch.zeros(0, vocab, dtype=torch.float64)
        p = torch.stack([p_fn(block[:i]) for i in range(gamma + 1)])
        reach = w
        for k in range(gamma + 1):  # k = number accepted
            u = torch.full((gamma + 1,), _ACCEPT, dtype=torch.float64)
            if k < gamma:
                u[k] = _REJECT
            res = verify(list(block), q, p, u)
            if res.accepted != k:
                # The branch is impossible (h_k = 1 cannot reject, h_i = 0 cannot accept).
                if k < gamma and res.accepted > k:
                    h = res.accept_probs[k]
                    if h < 1.0:
                        raise AssertionError(f"verifier ignored its uniform at position {k} (h={h})")
                if res.accepted < k:
                    break
                continue
            h = res.accept_probs
            branch = reach * (1.0 - h[k]) if k < gamma else reach
            if branch > 0:
                for x in range(vocab):
                    mass = branch * float(res.final_dist[x])
                    if mass > 0:
                        y = tuple(block[:k]) + (x,)
                        out[y] = out.get(y, 0.0) + mass
            if k < gamma:
                reach *= h[k]
                if reach == 0.0:
                    break
    return out


def _joint(p_fn: Dist, seq: tuple[int, ...], start: tuple[int, ...] = ()) -> float:
    prob = 1.0
    ctx = start
    for t in seq:
        prob *= float(p_fn(ctx)[t])
        ctx = ctx + (t,)
    return prob


def audit(verify, q_fn: Dist, p_fn: Dist, vocab: int, gamma: int, name: str = "", case: str = "") -> AuditRow:
    dist = output_distribution(verify, q_fn, p_fn, vocab, gamma)
    err = 0.0
    for z in itertools.product(range(vocab), repeat=gamma + 1):
        lhs = sum(dist.get(z[:t], 0.0) * _joint(p_fn, z[t:], z[:t]) for t in range(1, gamma + 2))
        err = max(err, abs(lhs - _joint(p_fn, z)))
    first = [sum(v for y, v in dist.items() if y[0] == x) for x in range(vocab)]
    p0 = p_fn(())
    first_err = max(abs(first[x] - float(p0[x])) for x in range(vocab))
    mass_err = abs(sum(dist.values()) - 1.0)
    e_acc = sum(v * (len(y) - 1) for y, v in dist.items())
    return AuditRow(name, case, vocab, gamma, err, first_err, mass_err, e_acc)


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
        "p=q": (random_toy(vocab, 5), random_toy(vocab, 5)),
        "disjoint": (constant(disjoint_q), constant(disjoint_p)),
        "one-hot draft": (constant(one_hot), random_toy(vocab, 6)),
        "draft zeros": (random_toy(vocab, 7, zeros=True), random_toy(vocab, 8)),
    }
    if vocab == 2:
        cases["gbv toy"] = (constant([2 / 3, 1 / 3]), constant([1 / 3, 2 / 3]))
    return cases


def audit_table(verifiers: dict, vocabs=(2, 3), gammas=(1, 2, 3)) -> list[AuditRow]:
    rows = []
    for name, fn in verifiers.items():
        for v in vocabs:
            for case, (q_fn, p_fn) in toy_cases(v).items():
                for g in gammas:
                    rows.append(audit(fn, q_fn, p_fn, v, g, name, case))
    return rows
