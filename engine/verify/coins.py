"""Shared pieces of the block and multi-draft verifiers: the result type and the coin ledger.

Every coin a verifier flips is `u[index] < h` with one fixed uniform index per (draft, position),
and the verifier reports each coin it flipped as `(index, h)` in the order it flipped them. That
ledger is what lets `engine.bench.audit` enumerate the *real* function: it replays the verifier with
uniforms forced to 0 (accept whenever h > 0) or to 1 − 1e-15 (reject whenever h < 1), branching
on every coin, and weighs each branch by Π h or (1 − h) (h clipped to [0, 1]).

Uniform layout for K blocks of length γ: u[k·γ + i] is the coin of draft k at position i
(0-based), u[K·γ] samples the emitted (correction or bonus) token by inverse CDF.

Worked example: BV on one block of γ = 2 flips coins (0, h_1) and (1, h_2) and samples with u[2].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.verify.token import VerifyResult


@dataclass(frozen=True)
class CoinResult(VerifyResult):
    """VerifyResult plus what multi-draft and block verifiers need to report.

    accept_probs / p_draft / q_draft / decisions describe the chosen path (one entry per drafted
    position of block `chosen`); `coins` lists every coin flipped, in order, as (uniform index, h).
    """

    chosen: int = 0  # index of the block whose prefix was emitted
    decisions: tuple[int, ...] = ()  # per position of the chosen path: outcome of its last coin (0 if none)
    coins: tuple[tuple[int, float], ...] = ()  # (uniform index, h) in the order flipped
    fallback: bool = False  # the residual had no mass and the target row was used instead (rounding only)


def coin(u: torch.Tensor, index: int, h: float, ledger: list) -> bool:
    """Flip coin `index` with success probability h (any real; clipped by the comparison)."""
    ledger.append((index, float(h)))
    return float(u[index]) < h


def positive_part(d: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """norm(max(d, 0)) and whether it had mass; callers fall back to the target row if not."""
    r = d.clamp_min(0)
    s = float(r.sum())
    return (r / s, True) if s > 0 else (r, False)


def uniforms_for_blocks(lengths: list[int]) -> int:
    """One coin per (draft, position) plus one uniform for the emitted token."""
    return sum(lengths) + 1


def check_blocks(blocks, q, p) -> int:
    """Validate K blocks of a common length γ; returns γ."""
    if not blocks:
        raise ValueError("multi-draft verification needs at least one draft block")
    gamma = len(blocks[0])
    if any(len(b) != gamma for b in blocks):
        raise ValueError(f"draft blocks must share one length, got {[len(b) for b in blocks]}")
    if len(q) != len(blocks) or len(p) != len(blocks):
        raise ValueError(f"{len(blocks)} blocks but {len(q)} draft and {len(p)} target matrices")
    for k in range(len(blocks)):
        if q[k].shape[0] != gamma or p[k].shape[0] != gamma + 1:
            raise ValueError(f"block {k}: q {tuple(q[k].shape)}, p {tuple(p[k].shape)} for γ={gamma}")
    return gamma


def path_stats(block, q_rows: torch.Tensor, p_rows: torch.Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(p_i(x_i), q_i(x_i)) along one block, for the trace."""
    if not len(block):
        return (), ()
    idx = torch.as_tensor(list(block), dtype=torch.long)
    rows = torch.arange(len(block))
    return tuple(p_rows[rows, idx].tolist()), tuple(q_rows[rows, idx].tolist())
