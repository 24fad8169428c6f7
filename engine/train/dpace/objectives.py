"""Block-drafter training objectives: uniform CE, DFlash decay, D-PACE and its ablations.

Position weights (k = 1 … B−1 is the block position, position 0 the anchor; ce = −log q):

  uniform      w_k = 1                                              weighted mean
  dflash       w_k = exp(−(k−1)/γ), γ = 7 / 5 / 4 for B = 16 / 10 / 8   weighted mean    (DFlash Eq. 4)
  dpace        w̄_j = Σ_{m≥j} Π_{i≤m} q̃_i,  q̃ = (1−α) q + α,  detached   Σ ce·w̄ / batch (official)
  dpace-mean   the same weights, weighted mean Σ ce·w̄ / Σ w̄ (normalisation control)
  dpace-cum    cumulative-confidence only  w = Π_{i≤j} q̃_i               Σ / batch
  dpace-cont   continuation value only     w = w̄_j / Π_{i≤j} q̃_i        Σ / batch

Invalid positions (the anchor slot, past the sequence end, outside the response) get q̃ = 1 inside
the product and weight 0, as in the official code (Lucas-TY/D-PACE, SpecForge `_dpace_weight`).
Reductions: "mean" = Σ ce·w / Σ w; "sum" = Σ ce·w / batch_size (number of sequences).

Special cases (tests/unit/train/dpace/test_objectives.py): α = 1 makes q̃ ≡ 1, so full D-PACE weights become the fixed
linear schedule w̄_j = (#valid positions ≥ j) = B − j for a full block, and the official loss is
Σ_j (B − j)·ce_j / batch — a linearly decaying, *summed* CE, not a uniform one; the cumulative-only
variant at α = 1 is the uniform (summed) CE. α = 0 is gradient ascent on the surrogate S̃.

Training runs with these objectives: engine/train/dpace/fit.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.train.dpace.training_trace import OBJECTIVES

DFLASH_GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}


def dflash_gamma(block_size: int) -> float:
    """DFlash's recommended decay constant for a block size (7/5/4 for 16/10/8; else interpolate B/2.2)."""
    return DFLASH_GAMMA.get(block_size, round(block_size / 2.2, 2))


# ------------------------------------------------------------------ weights


def dflash_weights(block_size: int, gamma: float) -> torch.Tensor:
    """[B] with w_0 = 0 (anchor) and w_k = exp(−(k−1)/γ) for k ≥ 1."""
    k = torch.arange(block_size, dtype=torch.float32)
    w = torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def dpace_weights(ce: torch.Tensor, valid: torch.Tensor, alpha: float, variant: str = "full") -> torch.Tensor:
    """Detached D-PACE weights from per-position CE [..., B] and a validity mask [..., B].

    variant: "full" (w̄ = suffix sum of prefix products), "cumulative" (prefix product),
    "continuation" (w̄ / prefix product). Invalid positions get weight 0.
    """
    with torch.no_grad():
        v = valid.to(ce.dtype)
        q = torch.exp(-ce.detach())
        s = torch.where(valid, (1.0 - alpha) * q + alpha, torch.ones_like(q))
        prefix = torch.cumprod(s, dim=-1)
        suffix = torch.flip(torch.cumsum(torch.flip(prefix * v, [-1]), -1), [-1])
        if variant == "full":
            w = suffix
        elif variant == "cumulative":
            w = prefix
        elif variant == "continuation":
            w = suffix / prefix.clamp_min(1e-30)
        else:
            raise ValueError(f"unknown D-PACE variant {variant!r}")
        return (w * v).detach()


def surrogate(q: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """S = Σ_k Π_{i≤k} q_i per block (invalid positions: factor 1, not summed). q, valid [..., B]."""
    v = valid.to(q.dtype)
    p = torch.cumprod(torch.where(valid, q, torch.ones_like(q)), -1)
    return (p * v).sum(-1)


@dataclass(frozen=True)
class Objective:
    name: str  # one of OBJECTIVES
    alpha: float | None = None  # D-PACE smoothing
    gamma: float | None = None  # DFlash decay

    @property
    def reduction(self) -> str:
        return "mean" if self.name in ("uniform", "dflash", "dpace-mean") else "sum"

    @property
    def label(self) -> str:
        if self.name == "dflash":
            return f"dflash(γ={self.gamma:g})"
        if self.name.startswith("dpace"):
            return f"{self.name}(α={self.alpha:g})"
        return self.name

    def weights(self, ce: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if self.name == "uniform":
            return valid.to(ce.dtype)
        if self.name == "dflash":
            return dflash_weights(ce.shape[-1], self.gamma).to(ce.dtype) * valid.to(ce.dtype)
        variant = {"dpace": "full", "dpace-mean": "full", "dpace-cum": "cumulative",
                   "dpace-cont": "continuation"}[self.name]
        return dpace_weights(ce, valid, self.alpha, variant)

    def loss(self, ce: torch.Tensor, valid: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, detached weights). ce [b, N, B] with grad; valid [b, N, B] bool."""
        w = self.weights(ce, valid)
        tot = (ce * w).sum()
        if self.reduction == "mean":
            return tot / w.sum().clamp_min(1e-12), w
        return tot / batch_size, w


def make_objective(name: str, alpha: float = 0.5, gamma: float = 0.0, block_size: int = 8) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
    if name == "dflash":
        return Objective(name, gamma=gamma or dflash_gamma(block_size))
    if name.startswith("dpace"):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        return Objective(name, alpha=alpha)
    return Objective(name)


class StepStats:
    """Running means between two training-trace `log` records (engine.train.dpace.training_trace): per
    block position the mean q_k = exp(−CE_k) and the objective's weight share, the surrogate S, the loss.
    Shared by the tiny/SmolLM2 trainer (train/dpace/fit.py) and the Qwen one (train/blockdata/train.py)."""

    def __init__(self, block: int) -> None:
        self.q, self.nq, self.w = torch.zeros(block), torch.zeros(block), torch.zeros(block)
        self.S, self.nS, self.loss, self.n = 0.0, 0, 0.0, 0

    @torch.no_grad()
    def add(self, ce: torch.Tensor, valid: torch.Tensor, w: torch.Tensor, loss: torch.Tensor) -> None:
        q = torch.exp(-ce.detach())
        self.q += (q * valid).sum((0, 1))
        self.nq += valid.sum((0, 1))
        self.w += w.float().sum((0, 1))
        has = valid[..., 1]
        self.S += float(surrogate(q, valid)[has].sum())
        self.nS += int(has.sum())
        self.loss += float(loss)
        self.n += 1

    def record(self, step: int, lr: float, wall_s: float) -> dict:
        """The `log` record of the steps added since the last one; then starts over."""
        qm = (self.q / self.nq.clamp_min(1))[1:]
        ws = self.w[1:] / self.w[1:].sum().clamp_min(1e-30)
        rec = {"type": "log", "step": step, "loss": round(self.loss / self.n, 6), "lr": round(lr, 8),
               "q": [round(float(x), 5) for x in qm], "weight_share": [round(float(x), 5) for x in ws],
               "surrogate": round(self.S / max(1, self.nS), 5), "wall_s": round(wall_s, 2)}
        self.__init__(len(self.q))
        return rec
