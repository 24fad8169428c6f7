"""The one forward timer: every figure that times a model call (bench, costs, reference, PACER, probes)
comes from here.

Why one: on CUDA a kernel launch returns before the kernel runs, so a timer that does not synchronise
the device measures launch overhead, not compute. `timed_ms` synchronises before starting the clock
and before stopping it; on CPU the synchronisation is a no-op.

Conventions (k = tokens fed in one forward; a verify of window γ feeds k = γ + 1):
    forward_curve(lm, context, ks) → {k: median ms of one k-token forward after `context`}
The cache is cropped back after every timed call, so each call sees the same context length.
Repeats go round-robin over k, so that load drift on a shared machine hits every k alike.

Example: forward_curve(target, ids, ks=(1, 2, 5)) → {1: 31.0, 2: 64.9, 5: 77.4} means a fixed:1 verify
costs 2.1 target-token forwards and a fixed:4 verify 2.5.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterable


def sync(device: Any = None) -> None:
    """Wait for queued device work (CUDA only). `device` may be a torch.device, a string, an object
    with a `.device`, or None (CPU: nothing to wait for)."""
    dev = getattr(device, "device", device)
    if dev is None or getattr(dev, "type", str(dev).split(":")[0]) != "cuda":
        return
    import torch

    torch.cuda.synchronize()


def timed_ms(fn: Callable[[], Any], device: Any = None) -> float:
    """Wall ms of `fn()`, device-synchronised on both ends."""
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return (time.perf_counter() - t0) * 1e3


def median_ms(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1, device: Any = None) -> float:
    """Median of `repeats` timed calls of `fn` after `warmup` untimed ones."""
    if repeats < 1:
        raise ValueError(f"repeats must be ≥ 1, got {repeats}")
    for _ in range(warmup):
        fn()
    sync(device)
    return statistics.median(timed_ms(fn, device) for _ in range(repeats))


def forward_ms(lm, tokens: list[int]) -> float:
    """Ms of one forward of `tokens` on `lm`'s current cache; the cache is cropped back afterwards."""
    base = lm.length
    ms = timed_ms(lambda: lm.extend(tokens), lm)
    lm.crop(base)
    return ms


def forward_curve(lm, context: list[int], ks: Iterable[int], repeats: int = 5, warmup: int = 1,
                  distinct: bool = True) -> dict[int, float]:
    """Median ms of a k-token forward after `context` (a warm cache), for each k in `ks`.

    `distinct`: feed k different tokens taken from the context (a real verify block), not one token
    repeated. The cache is reset at the start and at the end.
    """
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive token counts, got {ks}")
    if repeats < 1:
        raise ValueError(f"repeats must be ≥ 1, got {repeats}")
    ctx = list(context) if len(context) > 1 else list(context) * 2
    kmax = max(ks)
    feed = (ctx * (kmax // len(ctx) + 1))[:kmax] if distinct else ctx[-1:] * kmax
    lm.reset()
    lm.extend(ctx[:-1])
    for _ in range(warmup):
        forward_ms(lm, feed[: min(2, kmax)])
    times: dict[int, list[float]] = {k: [] for k in ks}
    for _ in range(repeats):
        for k in ks:
            times[k].append(forward_ms(lm, feed[:k]))
    lm.reset()
    return {k: statistics.median(v) for k, v in times.items()}
