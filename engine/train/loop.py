"""The training loop's shared step and schedule, used by the block-drafter, D-PACE, PACER and tiny-target
trainers (engine/train/*): one place for what every loop does after its loss.

    warmup_cosine(step, steps, peak, warmup) -> lr     linear warm-up, then a cosine to zero
    train_step(opt, loss, params, lr, clip) -> norm    set lr, zero grads, backward, clip, step

Schedule, with w = max(1, ⌊warmup·steps⌋) warm-up steps (warmup a fraction of the run):

    lr(step) = peak·(step + 1)/w                               step < w
             = peak·½·(1 + cos(π·(step − w)/max(1, steps − w)))  after

Worked example: peak 1e-3, steps 100, warmup 0.04 → w = 4; lr(0) = 2.5e-4, lr(3) = 1e-3, lr(52) = 5e-4.
Why one helper: the same tail (zero_grad → backward → clip → step) and the same schedule were written in
each loop; a change to one (set_to_none, the clip) now reaches all. Trainers whose schedule has another
shape (PACER's and the tiny target's floors, the draft trainer's time-based progress) keep their formula
and share the step.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch


def warmup_cosine(step: int, steps: int, peak: float, warmup: float) -> float:
    """The learning rate at `step` (module doc); `warmup` is the warm-up's share of `steps`."""
    w = max(1, int(warmup * steps))
    if step < w:
        return peak * (step + 1) / w
    p = (step - w) / max(1, steps - w)
    return peak * 0.5 * (1 + math.cos(math.pi * p))


def train_step(opt: torch.optim.Optimizer, loss: torch.Tensor, params: Iterable[torch.nn.Parameter], lr: float,
               clip: float) -> torch.Tensor:
    """One optimiser step on `loss` at learning rate `lr`, gradients clipped to norm `clip`; the norm before
    clipping (a tensor: reading it is the caller's choice, it synchronises)."""
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()
    return norm
