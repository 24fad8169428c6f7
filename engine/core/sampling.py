"""Logits → probabilities, applied identically to draft (q) and target (p).

Speculative sampling is lossless with respect to the *processed* target distribution: whatever
temperature / top-k / top-p we apply to the target must be applied to the draft too, otherwise the
draft is just a worse proposal (still lossless, but the acceptance rate drops).

Convention (Leviathan et al., HF, vLLM): p = target distribution, q = draft distribution.

Greedy decoding (temperature 0) is represented by a one-hot distribution on the argmax, so the
token-level verifier needs no special case: min(1, p/q) is 1 on a match and 0 otherwise.

Worked example: logits [2, 1, 0], temperature 1, top_k 2 → softmax over [2, 1] = [0.731, 0.269, 0].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0  # greedy by default: the Spec-Bench convention, and exactly checkable
    top_k: int = 0  # 0 = off; HF's convention
    top_p: float = 1.0  # 1.0 = off
    seed: int = 0  # seeds the per-request generator so runs are reproducible

    def __post_init__(self) -> None:
        if not (self.temperature >= 0.0) or self.temperature > 100:
            raise ValueError(f"temperature must be in [0, 100], got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "seed": self.seed}


def argmax_ids(x: torch.Tensor) -> torch.Tensor:
    """x.argmax(-1, keepdim=True): the first maximal index of each row (NaN counting as the maximum, as torch's).
    Why not torch's own on the CPU: its argmax over a 49,152-entry float32 row took ~70 µs on a 2-core Xeon, NumPy's
    ~3 µs, same index — ~1 % of a SmolLM2-135M decode step, paid once a target step and once a drafted token."""
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) and x.dim() >= 1 and x.shape[-1]:
        return torch.from_numpy(np.asarray(x.detach().numpy().argmax(-1))).unsqueeze(-1)
    return x.argmax(-1, keepdim=True)


def probs_from_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Map logits [..., V] to the processed distribution [..., V] (float32, rows sum to 1)."""
    logits = logits.float()
    if cfg.greedy:
        out = torch.zeros_like(logits)
        out.scatter_(-1, argmax_ids(logits), 1.0)
        return out
    logits = logits / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = torch.topk(logits, cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, idx = torch.sort(logits, dim=-1, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the mass *before* it already reaches top_p; the top token always stays.
        drop_sorted = (cum - sorted_logits.softmax(-1)) >= cfg.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def sample_from(probs: torch.Tensor, u: float) -> int:
    """Inverse-CDF sample of one token from a 1-D distribution with a given uniform u ∈ [0, 1).

    Taking the uniform as an argument keeps the verifiers pure: the same (dists, uniforms) always give
    the same tokens, so enumeration and replay tests can drive the real code. A distribution with one entry of
    mass (greedy's one-hot p) returns that entry without the float64 cumulative sum (~50 µs at 49k entries on a
    2-core Xeon): for every u ∈ [0, 1) the inverse CDF gives it anyway.
    """
    if probs.device.type == "cpu" and probs.dim() == 1 and probs.dtype in (torch.float32, torch.float64):
        a = probs.detach().numpy()
        # one-hot (greedy's p): the inverse CDF gives its index for every u. The bits counted as integers (~4 µs
        # against ~25 for the float count; a −0.0 counts as mass there, so such a row takes the cumulative sum)
        if int(np.count_nonzero(a.view(np.uint32 if a.dtype == np.float32 else np.uint64))) == 1:
            i = int(a.argmax())
            if a[i] > 0:
                return i
    cdf = probs.double().cumsum(0)
    total = float(cdf[-1])
    if not total > 0:
        raise ValueError("cannot sample from a distribution with zero mass")
    idx = int(torch.searchsorted(cdf, torch.tensor([u * total], dtype=cdf.dtype), right=True)[0])
    if idx >= probs.shape[0]:  # u·total rounded up to total: take the last token with mass
        idx = int(torch.nonzero(probs > 0)[-1])
    return idx


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last dim; 0·log 0 = 0."""
    p = probs.float()
    return -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)


class Draw(NamedTuple):
    token: int
    q: torch.Tensor  # the processed distribution it was drawn from (verification uses it)
    shown: float  # q(token); greedy: the softmax confidence (q itself is one-hot)
    entropy: float  # nats, of the same distribution as `shown`
    q_max: float  # max_x q(x) before the draw (greedy: = shown)


def draw_token(logits: torch.Tensor, sc: SamplingConfig, gen: torch.Generator) -> Draw:
    """Draw one draft token from a logits row [V] — the only place a drafter samples.

        q     = probs_from_logits(logits, sc)     temperature / top-k / top-p, as for the target
        token = argmax q (greedy)  or  inverse-CDF sample of q with one uniform from `gen`

    Greedy q is one-hot, so policies and traces see the draft's softmax confidence softmax(logits)
    instead; q_max is what a rule may read without looking at the sampled token (PACER)."""
    q = probs_from_logits(logits, sc)
    soft = q if not sc.greedy else logits.softmax(-1)
    tok = int(argmax_ids(q)) if sc.greedy else sample_from(q, float(torch.rand((), generator=gen)))
    shown = float(soft[tok])
    return Draw(tok, q, shown, float(entropy(soft)), shown if sc.greedy else float(soft.max()))
