"""SpecTr-GBV exactly as the authors' public code does it — registered as "spectr-gbv-published".

Source: `Decoding.speculative_decoding` in `src/engine.py` of the authors' repository
(junemily/SpecTr-GBV; paper arXiv 2604.25925, Lin, Sheng, Cai, Zhou). Transcribed line by line:
same loop order, the set H of rejected sub-blocks, the break on a full-block acceptance, the
residual's `1 − min(·)^K` (Python precedence), eps = 1e-20 and the strict `rand < h`.

**This rule is NOT lossless for K ≥ 2** (the first emitted token's marginal is wrong; exact
enumeration in tests/unit/verify/test_spectr_gbv.py and `python -m engine audit`); at K = 1 it is BV with the
uncapped ratio Q(s)/P(s), lossy per iteration. It exists to reproduce the published method.

Their code writes m_s = P (draft) and m_b = Q (target). For draft k's own sub-block s = x^k_{1:i}
with joints P(s) = Π q, Q(s) = Π p relative to the prefix, and r(u) = min(P(u)/(Q(u) + eps), 1):

    i < γ:  h(s) = [Σ_x Q(sx)(1 − r(sx))^K − Q(s)(1 − r(s))^K]
                   / ([1 − (1 − P(s))^K − Σ_x Q(sx)(1 − (1 − r(sx))^K)] + eps)
    i = γ:  h(s) = Q(s)(1 − (1 − r(s))^K) / (1 − (1 − P(s))^K + eps)
    loop:   for each draft k, for i from (current τ)+1 to γ−1, P and Q start as draft k's OWN first τ
            tokens' joints; skip s ∈ H; coin u < h(s): accept (S ← s, τ ← i, sel ← k) else H ← H ∪ {s};
            then the full block (H not consulted): accept ⇒ τ ← γ and stop
    τ < γ:  y ~ ∝ Q(S)·p(x|S)·(1 − min(P(S)q(x|S)/(Q(S)p(x|S) + eps), 1)^K)   (rows of draft sel)
    τ = γ:  y ~ p(·|S)

h is used as given (it can leave [0, 1] on 0/0, e.g. −5551 or 2.0); traces show it clipped. A
residual with no mass (the code would divide by eps and fail to sample) falls back to p(·|S).

Worked example: with K = 1 and s of length 1, h = (A − Δ_+)/(A − Δ), A = Σ_x (Q(sx) − P(sx))_+,
Δ = Q(s) − P(s) — block verification with the uncapped ratio.
"""

from __future__ import annotations

import torch

from engine.core.sampling import sample_from
from engine.verify.coins import CoinResult, check_blocks, coin, path_stats

EPS = 1e-20  # the authors' eps


def verify_spectr_gbv_published(blocks, q, p, uniforms) -> CoinResult:
    gamma = check_blocks(blocks, q, p)
    K = len(blocks)
    if gamma == 0:
        last = sample_from(p[0][0], float(uniforms[0]))
        return CoinResult(0, (last,), (), (), (), p[0][0], True)

    def exp_term(x):
        return (1.0 - x) ** K

    ledger: list = []
    flipped: dict[tuple[int, int], tuple[float, int]] = {}
    tau, sel, ms_f, mb_f = 0, 0, 1.0, 1.0
    seen: set[tuple[int, ...]] = set()
    for j in range(K):
        x = [int(t) for t in blocks[j]]
        qs, pb = q[j], p[j]
        m_s, m_b = 1.0, 1.0
        start = tau  # the range is fixed when the draft starts
        for k in range(start):
            m_s *= float(qs[k][x[k]])
            m_b *= float(pb[k][x[k]])
        for i in range(start, gamma - 1):
            m_s *= float(qs[i][x[i]])
            m_b *= float(pb[i][x[i]])
            nq, np_ = qs[i + 1], pb[i + 1]
            min_ratio = torch.clamp((m_s * nq) / (m_b * np_ + EPS), max=1.0)
            raw_ratio = min(m_s / (m_b + EPS), 1.0)
            num = float((m_b * np_ * exp_term(min_ratio)).sum()) - m_b * exp_term(raw_ratio)
            den = 1.0 - exp_term(m_s) - float((m_b * np_ * (1.0 - exp_term(min_ratio))).sum())
            h = num / (den + EPS)
            key = tuple(x[: i + 1])
            if key in seen:
                continue
            ok = coin(uniforms, j * gamma + i, h, ledger)
            flipped[(j, i)] = (h, int(ok))
            if ok:
                tau, sel, ms_f, mb_f = i + 1, j, m_s, m_b
            else:
                seen.add(key)
        m_s *= float(qs[gamma - 1][x[gamma - 1]])
        m_b *= float(pb[gamma - 1][x[gamma - 1]])
        ratio = min(m_s / (m_b + EPS), 1.0)
        h = (m_b * (1.0 - exp_term(ratio))) / (1.0 - exp_term(m_s) + EPS)
        ok = coin(uniforms, j * gamma + gamma - 1, h, ledger)
        flipped[(j, gamma - 1)] = (h, int(ok))
        if ok:
            tau, sel, ms_f, mb_f = gamma, j, m_s, m_b
            break
    block = [int(t) for t in blocks[sel]]
    fb = False
    if tau < gamma:
        pb_row, qs_row = p[sel][tau], q[sel][tau]
        res = mb_f * pb_row * (1.0 - torch.clamp(ms_f * qs_row / (mb_f * pb_row + EPS), max=1.0) ** K)
        s = float(res.sum())
        if s > 0:
            final = res / max(s, EPS)
        else:
            final, fb = pb_row, True
    else:
        final = p[sel][gamma]
    last = sample_from(final, float(uniforms[K * gamma]))
    pd, qd = path_stats(block, q[sel], p[sel])
    hs, dec = [], []
    for i in range(gamma):
        h, o = flipped.get((sel, i), (1.0 if i < tau else 0.0, int(i < tau)))
        hs.append(min(max(h, 0.0), 1.0))
        dec.append(o)
    return CoinResult(tau, tuple(block[:tau]) + (last,), tuple(hs), pd, qd, final, tau == gamma, chosen=sel,
                      decisions=tuple(dec), coins=tuple(ledger), fallback=fb)
