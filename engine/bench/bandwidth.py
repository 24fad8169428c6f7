"""The machine's memory read bandwidth, measured the way a one-token decode step reads its weights.

A decode step of a model this size streams every weight once from memory (far more bytes than any
cache holds) on the run's threads, so its floor is bytes ÷ bandwidth (engine.bench.roofline). This
probe measures that bandwidth in the same regime:

    B = nbytes ÷ t,   t = the smaller of two medians over `repeats` passes, interleaved, each over a buffer
                      of nbytes (≥ 512 MB: 10–100× any L3 a 2-core VM sees) on `threads` threads, after
                      one untimed pass of each that faults every page in:
                        torch   one reduction x.sum() over it as float32 (one stream a thread)
                        runs    our C loop reading each thread's share as RUNS runs side by side
                                (engine/kernels/read_probe.h; where the dense kernel library loads)

Why two: the roofline must be a ceiling our kernels cannot pass. One stream a thread was the fastest read on the
EPYCs, but on a 2-core Xeon with AMX the dense kernel's tiles (16 weight rows at once) streamed 29 GB/s where
x.sum() read 23.7, and eight runs side by side read 33–34 (2026-12-07: 1, 2, 4, 8, 16, 32 runs → 24.7, 31.0,
33.7, 34.2, 33.7, 32.8 GB/s): more cache-line requests in flight. Both arms are recorded (`arms`).

Worked example: 536,870,912 bytes summed in 0.0537 s (median of 7) → B = 10.0 GB/s, the ~10 GB/s a
2-core AMX Xeon gives; 21.5 ms → 25.0 GB/s, an EPYC of the same size.

Why a torch reduction still: it is the same library, the same OpenMP pool and the same thread count the decode
steps run on, and a sum does one add per 4 bytes read — far below what two AVX2 cores compute — so the memory
is the limit, as it is for a GEMV; and it runs where no C kernel does. Why the median: on a shared 2-core machine a repeat
disturbed by another process reads slow, never fast, and the median of an odd count ignores a
minority of such repeats (the minimum would report a burst the steady state never sees).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field

import torch

RUNS = 8  # runs read side by side a thread in the C arm: the fastest count on the AMX Xeon (4–16 within 3 %)
MB = 1_000_000  # bandwidths are in decimal GB/s (10⁹ bytes), as memory vendors and llama.cpp state them


@dataclass(frozen=True)
class BandwidthConfig:
    nbytes: int = 512 * 2**20  # ≥ 512 MiB: every cache level many times over, a decode step's regime
    threads: int = 2  # the thread count the lab's decode runs use on its 2-core machines
    repeats: int = 7  # odd, so the median is one measured pass; ~0.4–0.7 s in all at 10–25 GB/s
    warmup: int = 1  # untimed passes: the first touches every page (page faults are not bandwidth)


@dataclass(frozen=True)
class Bandwidth:
    """One probe's result: `gb_per_s` = nbytes ÷ median seconds ÷ 10⁹."""

    gb_per_s: float
    nbytes: int
    threads: int
    repeats: int
    seconds: tuple[float, ...] = field(default_factory=tuple)  # every timed pass of the faster arm, in order
    arms: dict[str, float] = field(default_factory=dict)  # each read's GB/s (median pass): 'torch', 'runs'

    def to_dict(self) -> dict:
        d = asdict(self)
        d["seconds"] = [round(s, 6) for s in self.seconds]
        d["arms"] = {k: round(v, 3) for k, v in self.arms.items()}
        d["method"] = (f"the faster median wall time of two reads of nbytes, interleaved: x.sum() over a float32 "
                       f"tensor (torch) and {RUNS} runs side by side a thread (runs, engine/kernels/read_probe.h)"
                       if "runs" in self.arms else
                       "median wall time of x.sum() over a float32 tensor of nbytes, torch threads as given")
        return d


def gb_per_s(nbytes: int, seconds: float) -> float:
    """nbytes read in `seconds` as GB/s (10⁹ bytes/s): gb_per_s(10**9, 0.1) = 10.0."""
    if not seconds > 0:
        raise ValueError(f"a read of {nbytes} bytes cannot take {seconds} s")
    return nbytes / seconds / 1e9


def check(cfg: BandwidthConfig) -> None:
    """One line for a configuration the probe cannot run."""
    if cfg.nbytes < 4 or cfg.nbytes % 4:
        raise ValueError(f"bandwidth probe: nbytes must be a positive multiple of 4, got {cfg.nbytes}")
    if cfg.threads < 1 or cfg.repeats < 1 or cfg.warmup < 0:
        raise ValueError(f"bandwidth probe: threads and repeats must be ≥ 1 and warmup ≥ 0, got {cfg}")


def buffer(cfg: BandwidthConfig = BandwidthConfig()) -> torch.Tensor:
    """A probe buffer of cfg.nbytes, written once (every page resident), for repeated `measure(cfg, buf)` calls:
    a run that probes beside every round allocates and faults in its 512 MiB once, not each time."""
    check(cfg)
    return torch.ones(cfg.nbytes // 4, dtype=torch.float32)


def measure(cfg: BandwidthConfig = BandwidthConfig(), buf: torch.Tensor | None = None) -> Bandwidth:
    """The read bandwidth on `cfg.threads` threads (torch's thread count is restored afterwards); on `buf`
    (`buffer(cfg)`) when given, else on a buffer of its own."""
    check(cfg)
    if buf is not None and buf.numel() * buf.element_size() != cfg.nbytes:
        raise ValueError(f"bandwidth probe: the buffer holds {buf.numel() * buf.element_size()} bytes, "
                         f"the configuration reads {cfg.nbytes}")
    before = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        x = buffer(cfg) if buf is None else buf
        reads = {"torch": x.sum}
        runs = _runs_read(x, cfg.threads)
        if runs is not None:
            reads["runs"] = runs
        for _ in range(cfg.warmup):
            for read in reads.values():
                read()
        times: dict[str, list[float]] = {k: [] for k in reads}
        for _ in range(cfg.repeats):
            for name, read in reads.items():
                t0 = time.perf_counter()
                read()
                times[name].append(time.perf_counter() - t0)
        del x
    finally:
        torch.set_num_threads(before)
    arms = {k: gb_per_s(cfg.nbytes, statistics.median(v)) for k, v in times.items()}
    best = max(arms, key=arms.get)
    return Bandwidth(arms[best], cfg.nbytes, cfg.threads, cfg.repeats, tuple(times[best]), arms)


def _runs_read(x: torch.Tensor, threads: int):
    """The C arm's read of x (RUNS runs a thread), or None where the dense kernel library does not load here or
    x's size does not split into whole lines per run and thread (a tiny probe)."""
    from engine.kernels import dense_kernel

    nbytes = x.numel() * x.element_size()
    if dense_kernel.available() is not None or nbytes % (64 * RUNS * threads):
        return None
    return lambda: dense_kernel.read_words(x, RUNS, threads)
