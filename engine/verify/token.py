"""Token-level speculative sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023).

Notation (Leviathan/HF/vLLM): p = target, q = draft, γ = number of drafted tokens.
For i = 1..γ, with drafted token x_i ~ q_i:

    h_i = min(1, p_i(x_i) / q_i(x_i))          accept x_i iff u_i < h_i
    on the first rejection i: emit y ~ norm(max(0, p_i − q_i))       (the correction token)
    if all γ are accepted:     emit y ~ p_{γ+1}                       (the bonus token)

Greedy decoding is the same rule with one-hot p and q (see `engine.core.sampling`): h_i is 1 on an exact
match and 0 otherwise, and the residual of a mismatch is the target's argmax.

Uniforms: u[0..γ-1] drive the accept decisions, u[γ] samples the emitted token by inverse CDF.

Worked example (context-free toy, V = 2): q = (2/3, 1/3), p = (1/3, 2/3), x_1 = 0 →
h_1 = (1/3)/(2/3) = 1/2; on rejection the residual is norm((0, 1/3)) = (0, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.sampling import sample_from


@dataclass(frozen=True)
class VerifyResult:
    accepted: int  # drafted tokens accepted (excludes the correction/bonus token)
    tokens: tuple[int, ...]  # emitted this step: accepted drafts + one correction or bonus token
    accept_probs: tuple[float, ...]  # h_i per drafted position (all γ, even past the first rejection)
    p_draft: tuple[float, ...]  # p_i(x_i): target probability of each drafted token
    q_draft: tuple[float, ...]  # q_i(x_i): draft probability of each drafted token
    final_dist: torch.Tensor  # the distribution the last emitted token was drawn from
    bonus: bool  # True when every draft was accepted and the last token is the bonus
    # Per-position accept (1) / reject (0) of the chosen path: the coin verifiers (engine.verify.coins)
    # report it; None for token-level verification, whose accepted count says it all.
    decisions: tuple[int, ...] | None = None

    @property
    def emitted(self) -> int:
        return len(self.tokens)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p − q)); falls back to p when the residual has no mass (p ≤ q everywhere).

    The fallback is only reachable through rounding: a rejection needs h_i < 1, i.e. p(x) < q(x) for
    some x, which forces mass onto p − q elsewhere.
    """
    r = (p - q).clamp_min(0)
    s = r.sum()
    return r / s if s > 0 else p


def verify_token(
    draft_tokens: list[int] | tuple[int, ...],
    q: torch.Tensor,
    p: torch.Tensor,
    uniforms: torch.Tensor,
) -> VerifyResult:
    """Verify γ drafted tokens against the target.

    Shapes: q [γ, V] (rows for the drafted positions), p [γ+1, V] (one extra row for the bonus),
    uniforms [γ+1]. γ = 0 is plain autoregressive sampling from p[0].
    """
    gamma = len(draft_tokens)
    if q.shape[0] != gamma or p.shape[0] != gamma + 1 or uniforms.shape[0] < gamma + 1:
        raise ValueError(
            f"shape mismatch: γ={gamma}, q {tuple(q.shape)}, p {tuple(p.shape)}, uniforms {tuple(uniforms.shape)}"
        )
    if gamma:
        idx = torch.as_tensor(draft_tokens, dtype=torch.long)
        rows = torch.arange(gamma)
        pd = p[rows, idx]
        qd = q[rows, idx]
        # A drafted token the draft gave zero mass cannot have been sampled from it; reject (as vLLM).
        h = torch.where(qd > 0, (pd / qd.clamp_min(1e-30)).clamp(max=1.0), torch.zeros_like(pd))
        rejected = (uniforms[:gamma] >= h).tolist()
        accepted = rejected.index(True) if True in rejected else gamma
        h_list, pd_list, qd_list = tuple(h.tolist()), tuple(pd.tolist()), tuple(qd.tolist())
    else:
        accepted, h_list, pd_list, qd_list = 0, (), (), ()
    if accepted < gamma:
        dist = residual(p[accepted], q[accepted])
        bonus = False
    else:
        dist = p[gamma]
        bonus = True
    last = sample_from(dist, float(uniforms[gamma]))
    tokens = tuple(int(t) for t in draft_tokens[:accepted]) + (last,)
    return VerifyResult(accepted, tokens, h_list, pd_list, qd_list, dist, bonus)
