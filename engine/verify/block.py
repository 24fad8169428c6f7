"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh; arXiv 2403.10444).

Notation: p = target (the paper's M_b), q = draft (M_s); X_1..X_γ drafted, X^i = (X_1..X_i).
Rows: p[i] = p(·|X^i) for i = 0..γ (p[γ] is the bonus row), q[i] = q(·|X^i) for i = 0..γ−1.

    p_0 = 1,   p_i = min(p_{i−1} · p(X_i|X^{i−1}) / q(X_i|X^{i−1}), 1)        CAPPED recursion
    i < γ:     Z_i = Σ_x max(p_i · p(x|X^i) − q(x|X^i), 0)                     NEXT position's rows
               h_i = Z_i / (Z_i + 1 − p_i)          (h_i = 1 when the denominator is 0)
    i = γ:     h_γ = p_γ
    coins η_i ~ U(0,1) independently;  τ = max{i : η_i < h_i}  (LAST success; 0 if none)
    emit X^τ then y ~ p(·|X^γ) if τ = γ, else y ~ norm(max(p_τ · p(·|X^τ) − q(·|X^τ), 0))

Lossless iteration by iteration and never worse than token verification in expected accepted
tokens. Two near-misses are lossy (checked in tests/unit/verify/test_block.py): Z from the *same*
position's rows, and the uncapped product of ratios in place of p_i.

A drafted token with q(X_i) = 0 gets ratio 0 (p_i = 0 from there on, so h_j = 0 for j ≥ i).

Worked example (the paper's toy, V = 2, q = (2/3, 1/3), p = (1/3, 2/3), γ = 2): X = (1, 0) gives
p_1 = 1, Z_1 = Σ max(p − q, 0) = 1/3, h_1 = (1/3)/(1/3 + 0) = 1; p_2 = min(1 · (1/3)/(2/3), 1) =
1/2 = h_2. Over all four blocks E[τ] = 11/9 (token verification: 10/9); at γ = 3, 5/3 vs 38/27.

`verify_block` is the K = 1 verifier registered as "block". `bv_scan` / `bv_residual` are the two
halves, reused by the recursive multi-draft verifier (RBV) with a replaced first-position target.
"""

from __future__ import annotations

import torch

from engine.core.sampling import sample_from
from engine.verify.coins import CoinResult, coin, path_stats, positive_part


def bv_scan(tokens, q: torch.Tensor, p: torch.Tensor, u: torch.Tensor, ledger: list, offset: int = 0,
            first_target: torch.Tensor | None = None) -> tuple[int, list[float], list[int], list[float]]:
    """Coins of one BV pass over `tokens` (length m). Returns (τ, h_1..h_m, outcomes, p_0..p_m).

    `first_target` replaces p[0] (the target at the first drafted position) — RBV passes the residual
    left by an earlier draft there; deeper positions always use the real target rows.
    Coin of position i (1-based) is uniform u[offset + i − 1].
    """
    m = len(tokens)
    p0 = p[0] if first_target is None else first_target
    caps = [1.0]
    for i in range(m):
        row = p0 if i == 0 else p[i]
        pd, qd = float(row[tokens[i]]), float(q[i][tokens[i]])
        caps.append(min(caps[-1] * pd / qd, 1.0) if qd > 0 else 0.0)
    hs, outs, tau = [], [], 0
    for i in range(1, m + 1):
        if i < m:
            z = float((caps[i] * p[i] - q[i]).clamp_min(0).sum())
            den = z + 1.0 - caps[i]
            h = z / den if den > 0 else 1.0
        else:
            h = caps[m]
        hs.append(h)
        ok = coin(u, offset + i - 1, h, ledger)
        outs.append(int(ok))
        if ok:
            tau = i
    return tau, hs, outs, caps


def bv_residual(tau: int, m: int, q: torch.Tensor, p: torch.Tensor, caps: list[float],
                first_target: torch.Tensor | None = None) -> tuple[torch.Tensor, bool]:
    """The distribution BV samples its last token from after stopping at τ; (dist, fallback)."""
    row = (p[0] if first_target is None else first_target) if tau == 0 else p[tau]
    if tau == m:
        return row, False
    dist, ok = positive_part(caps[tau] * row - q[tau])
    return (dist, False) if ok else (row, True)


def verify_block(draft_tokens, q: torch.Tensor, p: torch.Tensor, uniforms: torch.Tensor) -> CoinResult:
    """Block verification of one draft block: q [γ, V], p [γ+1, V], uniforms [γ+1] (γ coins + 1 sample)."""
    tokens = [int(t) for t in draft_tokens]
    gamma = len(tokens)
    if q.shape[0] != gamma or p.shape[0] != gamma + 1 or uniforms.shape[0] < gamma + 1:
        raise ValueError(f"shape mismatch: γ={gamma}, q {tuple(q.shape)}, p {tuple(p.shape)}, "
                         f"uniforms {tuple(uniforms.shape)}")
    ledger: list = []
    tau, hs, outs, caps = bv_scan(tokens, q, p, uniforms, ledger)
    dist, fb = bv_residual(tau, gamma, q, p, caps)
    last = sample_from(dist, float(uniforms[gamma]))
    pd, qd = path_stats(tokens, q, p)
    return CoinResult(tau, tuple(tokens[:tau]) + (last,), tuple(hs), pd, qd, dist, tau == gamma,
                      chosen=0, decisions=tuple(outs), coins=tuple(ledger), fallback=fb)


# ---------------------------------------------------------------- lossy near-misses (for the audit)


def verify_block_same_row(draft_tokens, q, p, uniforms) -> CoinResult:
    """LOSSY near-miss kept for the audit: Z_i from the same position's rows p(·|X^{i−1}), q(·|X^{i−1})
    (the off-by-one of a public PyTorch reference); everything else as `verify_block`."""
    shifted_p = torch.cat([p[:1], p[:-1]])  # row i now holds p(·|X^{i−1}) for i ≥ 1
    shifted_q = torch.cat([q[:1], q[:-1]]) if len(q) else q
    tokens = [int(t) for t in draft_tokens]
    gamma = len(tokens)
    ledger: list = []
    caps = [1.0]
    for i in range(gamma):
        pd, qd = float(p[i][tokens[i]]), float(q[i][tokens[i]])
        caps.append(min(caps[-1] * pd / qd, 1.0) if qd > 0 else 0.0)
    hs, outs, tau = [], [], 0
    for i in range(1, gamma + 1):
        if i < gamma:
            z = float((caps[i] * shifted_p[i] - shifted_q[i]).clamp_min(0).sum())
            den = z + 1.0 - caps[i]
            h = z / den if den > 0 else 1.0
        else:
            h = caps[gamma]
        hs.append(h)
        ok = coin(uniforms, i - 1, h, ledger)
        outs.append(int(ok))
        tau = i if ok else tau
    dist, fb = bv_residual(tau, gamma, q, p, caps)
    last = sample_from(dist, float(uniforms[gamma]))
    pd, qd = path_stats(tokens, q, p)
    return CoinResult(tau, tuple(tokens[:tau]) + (last,), tuple(hs), pd, qd, dist, tau == gamma,
                      decisions=tuple(outs), coins=tuple(ledger), fallback=fb)
