"""Lossless multi-draft verifiers over K i.i.d. draft blocks: RRS, SpecTr K-SEQ, RBV and KBV (ours).

Notation (ours, Leviathan/HF/vLLM): p = target, q = draft. SpecTr writes p = draft, q = target; its
formulas are restated here in our letters. K blocks x^1..x^K ~ q i.i.d., each of length γ; a
*node* is a prefix P of some block, and the candidates at P are the blocks whose first |P| tokens
equal P (with multiplicity, in index order). p(·|P), q(·|P) are read from the first candidate's rows.

Token-level tree walk (RRS and K-SEQ): at node P, run a single-token multi-draft rule over the
candidates' next tokens; if it accepts token x, descend into *every* candidate carrying x (their
continuations are still i.i.d. q(·|Px), whatever the coins did); if it rejects, emit its residual.
At depth γ emit the bonus token from p(·|P).

RRS, recursive rejection sampling (SpecInfer-style, drafts with replacement). Candidates in order:

    t ← p(·|P);  accept x_j w.p. min(1, t(x_j)/q(x_j));  on rejection t ← norm(max(t − q, 0))
    after the last candidate: emit y ~ t

K-SEQ (Sun et al. 2023, SpecTr), with k' candidates:

    β(ρ) = Σ_x min(q(x), p(x)/ρ);   ρ* ∈ [1, k'] solves 1 − (1 − β)^k' = ρ·β (bisection, hi end)
    accept x_j w.p. min(1, p(x_j)/(ρ*·q(x_j)))       (first acceptance wins)
    residual ∝ p − min(q, p/ρ*)·(1 − (1 − β)^k')/β   (its mass is (1 − β)^k'; k' = 1 is plain SD)

RBV, recursive block verification (ours — derived in the project notes, not from a paper): run
block verification (engine.verify.block) on one unused candidate's remaining suffix, with the
current node's target t at its first position; at the node where it stops, its BV residual becomes
t for the next unused candidate sharing that prefix; with none left, emit y ~ t. K = 1 is BV, γ = 1
is RRS; lossless because BV is lossless for any first-position target and unused drafts are
independent of every coin so far (checked by exact enumeration in tests/unit/verify/test_multidraft.py).

KBV, K-SEQ with a block-verification tail (ours, derived here, not from a paper): walk the tree with
K-SEQ while two or more candidates share the node; at the first node P (reached by acceptance, so
its target is the full p(·|P)) where a single candidate is left, run block verification on that
candidate's remaining suffix with first-position target p(·|P). Lossless: the lone candidate's
suffix is a fresh draft from q(·|P) (the K-SEQ coins so far read only the first |P| tokens of each
draft), and BV is lossless for it. E[accepted] ≥ K-SEQ's: the walks coincide until the tail, and
on a single draft BV accepts at least as much as token-level SD (Sun et al.). K = 1 is BV; γ = 1
is K-SEQ (both checked by enumeration in tests/unit/verify/test_multidraft.py).

Worked example (context-free V = 2, q = (2/3, 1/3), p = (1/3, 2/3), γ = 1, K = 2, drafts (0, 0)):
RRS accepts draft 1 w.p. 1/2; on rejection t = (0, 1), so draft 2 (token 0) is rejected surely and
y = 1. K-SEQ: β(ρ) = min(2/3, 1/(3ρ)) + min(1/3, 2/(3ρ)) = 1/(3ρ) + 1/3 on [1, 2], and
1 − (1 − β)² = ρβ gives 3ρ² − 5ρ + 1 = 0, ρ* = (5 + √13)/6 ≈ 1.434, single-token acceptance
1 − (1 − β)² ≈ 0.811 (RRS: 7/9 ≈ 0.778; one draft: 2/3) — the audit's values for this toy.

Uniforms: u[k·γ + d] is the coin of draft k at depth d; u[K·γ] samples the emitted token.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.core.sampling import sample_from
from engine.verify.block import bv_residual, bv_scan
from engine.verify.coins import CoinResult, check_blocks, coin, path_stats, positive_part

BISECT_STEPS = 60  # float64 bisection on [1, K]: 60 halvings reach machine precision


def kseq_rho(q: torch.Tensor, p: torch.Tensor, k: int) -> tuple[float, float]:
    """(ρ*, β(ρ*)): the hi end of the bisection bracket, so the residual stays non-negative.

    f(ρ) = 1 − (1 − β(ρ))^k − ρ·β(ρ) is decreasing with f(1) ≥ 0 ≥ f(k) (Bernoulli), so bisection
    converges; numpy on the support of q keeps each of the 60 steps cheap.
    """
    qa, pa = q.double().numpy(), p.double().numpy()
    keep = qa > 0
    qa, pa = qa[keep], pa[keep]

    def beta(rho: float) -> float:
        return float(np.minimum(qa, pa / rho).sum())

    if k <= 1:
        return 1.0, beta(1.0)
    lo, hi = 1.0, float(k)
    for _ in range(BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        b = beta(mid)
        if 1.0 - (1.0 - b) ** k - mid * b > 0:
            lo = mid
        else:
            hi = mid
    return hi, beta(hi)


def _rrs_node(toks, idx, q, p, u, ledger):
    t = p
    for j, x in enumerate(toks):
        h = min(float(t[x]) / float(q[x]), 1.0) if float(q[x]) > 0 else 0.0
        if coin(u, idx[j], h, ledger):
            return j, h, t, False
        t, ok = positive_part(t - q)
        if not ok:  # only through rounding: a rejection needs t(x) < q(x)
            return None, h, p, True
    return None, None, t, False


def _kseq_node(toks, idx, q, p, u, ledger):
    rho, beta = kseq_rho(q, p, len(toks))
    h = None
    for j, x in enumerate(toks):
        h = min(float(p[x]) / (rho * float(q[x])), 1.0) if float(q[x]) > 0 else 0.0
        if coin(u, idx[j], h, ledger):
            return j, h, None, False
    if beta <= 0:
        return None, h, p, False
    scale = (1.0 - (1.0 - beta) ** len(toks)) / beta
    res, ok = positive_part(p - torch.minimum(q, p / rho) * scale)
    return (None, h, res, False) if ok else (None, h, p, True)


def _tree_walk(node_rule, blocks, q, p, u, bv_tail: bool = False) -> CoinResult:
    """Token-level walk over the draft tree with `node_rule`; with `bv_tail` (KBV), block verification
    takes over the remaining suffix at the first node where a single candidate is left."""
    gamma = check_blocks(blocks, q, p)
    K = len(blocks)
    cands, depth, ledger = list(range(K)), 0, []
    hs, dec = [0.0] * gamma, [0] * gamma
    final, fb = None, False
    while depth < gamma:
        lead = cands[0]
        if bv_tail and len(cands) == 1:  # one fresh draft of the suffix; target p(·|prefix) at its head
            toks = [int(x) for x in blocks[lead][depth:]]
            m = len(toks)
            tau, h, outs, caps = bv_scan(toks, q[lead][depth:], p[lead][depth:], u, ledger,
                                         offset=lead * gamma + depth)
            hs[depth:], dec[depth:] = h, outs
            if tau < m:
                final, fb = bv_residual(tau, m, q[lead][depth:], p[lead][depth:], caps)
            depth += tau
            break
        toks = [int(blocks[k][depth]) for k in cands]
        j, h, res, fb = node_rule(toks, [k * gamma + depth for k in cands], q[lead][depth], p[lead][depth], u, ledger)
        hs[depth] = h if h is not None else 0.0
        if j is None:
            final = res
            break
        dec[depth] = 1
        x, accepted_k = toks[j], cands[j]
        # Every candidate carrying x stays: their continuations are still i.i.d. q(·|Px).
        cands = [accepted_k] + [k for k in cands if int(blocks[k][depth]) == x and k != accepted_k]
        depth += 1
    chosen = cands[0]
    if final is None:
        final = p[chosen][gamma]
    last = sample_from(final, float(u[K * gamma]))
    block = [int(t) for t in blocks[chosen]]
    pd, qd = path_stats(block, q[chosen], p[chosen])
    return CoinResult(depth, tuple(block[:depth]) + (last,), tuple(hs), pd, qd, final, depth == gamma,
                      chosen=chosen, decisions=tuple(dec), coins=tuple(ledger), fallback=fb)


def verify_rrs(blocks, q, p, uniforms) -> CoinResult:
    """Recursive rejection sampling over the K-draft tree (token-level multi-draft baseline)."""
    return _tree_walk(_rrs_node, blocks, q, p, uniforms)


def verify_kseq(blocks, q, p, uniforms) -> CoinResult:
    """SpecTr K-SEQ applied node by node over the K-draft tree."""
    return _tree_walk(_kseq_node, blocks, q, p, uniforms)


def verify_rbv(blocks, q, p, uniforms) -> CoinResult:
    """Recursive block verification (ours): BV per draft, residual handed to the next draft."""
    gamma = check_blocks(blocks, q, p)
    K = len(blocks)
    ledger: list = []
    used: set[int] = set()
    prefix: list[int] = []
    t = p[0][0]
    hs, dec = [0.0] * gamma, [0] * gamma
    chosen, final, fb = 0, None, False
    while True:
        d = len(prefix)
        if d == gamma:
            final = p[chosen][gamma]
            break
        cand = [k for k in range(K) if k not in used and [int(x) for x in blocks[k][:d]] == prefix]
        if not cand:
            final = t
            break
        k = cand[0]
        used.add(k)
        chosen = k
        toks = [int(x) for x in blocks[k][d:]]
        m = len(toks)
        tau, h, outs, caps = bv_scan(toks, q[k][d:], p[k][d:], uniforms, ledger, offset=k * gamma + d, first_target=t)
        hs[d:], dec[d:] = h, outs
        prefix = [int(x) for x in blocks[k][: d + tau]]
        if tau < m:
            t, f = bv_residual(tau, m, q[k][d:], p[k][d:], caps, first_target=t)
            fb = fb or f
    last = sample_from(final, float(uniforms[K * gamma]))
    block = [int(x) for x in blocks[chosen]]
    pd, qd = path_stats(block, q[chosen], p[chosen])
    acc = len(prefix)
    return CoinResult(acc, tuple(prefix) + (last,), tuple(hs), pd, qd, final, acc == gamma, chosen=chosen,
                      decisions=tuple(dec), coins=tuple(ledger), fallback=fb)


def verify_kbv(blocks, q, p, uniforms) -> CoinResult:
    """K-SEQ over the draft tree while ≥ 2 candidates share a node, block verification on the lone
    candidate's suffix from the first node where only one is left (ours)."""
    return _tree_walk(_kseq_node, blocks, q, p, uniforms, bv_tail=True)
