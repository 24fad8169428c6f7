"""How much of a decode step is Python and framework, not kernels: `python -m engine overhead`.

One-token steps (`lm.extend([t])`, the autoregressive step every path makes) on a warm cache, timed
twice, interleaved per repeat: plainly (wall) and under torch's profiler, which adds up the time the
operators themselves ran (their self CPU time; a foreign kernel called through ctypes counts as the
Python around it, so our C kernels' own calls — quantized qgemm, dense bf16 GEMV and attention — are
clocked separately with `perf_counter`):

    kernel share     Σ operator (and our C kernels') time / profiled wall
    overhead share   1 − kernel share: module dispatch, cache bookkeeping, masks, argument handling
    top operators    where the kernel time goes (matmul kernels, attention, cache concatenation)

Worked example: a 140 ms step of which operators ran 128 ms → overhead share 8.6 %.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch


class _ClockedLib:
    """Stands in for a ctypes library: every `speclab_*` call it forwards adds its wall time to `spent[0]`
    (seconds). The profiler cannot see inside a foreign function, so this is how our C kernels' own time
    is counted as kernel time and not as the Python around it."""

    def __init__(self, lib, spent: list[float]):
        self._lib, self._spent = lib, spent

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if not name.startswith("speclab_"):
            return fn

        def timed(*args, _f=fn):
            t = time.perf_counter()
            try:
                return _f(*args)
            finally:
                self._spent[0] += time.perf_counter() - t
        return timed


def _kernel_clock() -> tuple[list[float], list]:
    """Route our C libraries (the quantized qgemm and the dense bf16 kernels) through `_ClockedLib`;
    returns the one-cell clock and what to restore."""
    from engine.kernels import dense_kernel, qkernel

    spent, restore = [0.0], []
    for mod in (qkernel, dense_kernel):
        if mod._lib is not None:
            restore.append((mod, mod._lib))
            mod._lib = _ClockedLib(mod._lib, spent)
    return spent, restore


@torch.inference_mode()
def measure(lm, context: list[int], steps: int = 8, repeats: int = 3) -> dict[str, Any]:
    """Wall and kernel time of `steps` one-token extends after `context`, `repeats` times each way."""
    from torch.profiler import ProfilerActivity, profile

    lm.reset()
    lm.prefill(context)
    base = lm.length
    walls, kernel_shares, tops = [], [], {}
    for _ in range(repeats):
        lm.crop(base)
        t = time.perf_counter()
        for _ in range(steps):
            lm.extend([context[-1]])
        walls.append((time.perf_counter() - t) / steps)
        lm.crop(base)
        spent, wrapped = _kernel_clock()
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t = time.perf_counter()
                for _ in range(steps):
                    lm.extend([context[-1]])
                wall = time.perf_counter() - t
        finally:
            for mod, lib in wrapped:
                mod._lib = lib
        ops = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e6  # µs → s
        kernel_shares.append(min(1.0, (ops + spent[0]) / wall))
        for e in prof.key_averages():
            tops[e.key] = tops.get(e.key, 0.0) + e.self_cpu_time_total / 1e3 / steps / repeats
        if spent[0]:
            tops["speclab C kernels"] = tops.get("speclab C kernels", 0.0) + 1e3 * spent[0] / steps / repeats
    lm.crop(base)
    share = statistics.median(kernel_shares)
    top = sorted(tops.items(), key=lambda kv: -kv[1])[:6]
    return {"step_ms": 1e3 * statistics.median(walls), "kernel_share": share, "overhead_share": 1 - share,
            "top_ms_per_step": {k: round(v, 3) for k, v in top}, "steps": steps, "repeats": repeats,
            "context_len": len(context), "weights": getattr(lm, "weights", "dense")}


def busy_rows(lm, context: list[int], steps: int, repeats: int, threads: int, quiet_ms: float,
              hog=None, choose=None) -> list[dict[str, Any]]:
    """The same steps beside a process holding one core (engine.bench.cores.Hog): at `threads`, and at the
    threads the busy machine leaves free (`choose_threads`, checked with the hog running). Each row's
    `vs_quiet` = quiet step ÷ busy step (1.0: unharmed; the issue's bar is ≥ 0.5). Threads are restored."""
    from engine.bench.cores import Hog, choose_threads

    hog, choose = hog or Hog, choose or choose_threads
    out = []
    try:
        with hog():
            chosen = choose(threads)
            for cond, n in (("busy", threads), ("busy, threads chosen", chosen)):
                if cond != "busy" and n == threads:
                    continue
                torch.set_num_threads(n)
                r = measure(lm, context, steps, repeats)
                out.append(r | {"condition": cond, "threads": n, "vs_quiet": round(quiet_ms / r["step_ms"], 3)})
    finally:
        torch.set_num_threads(threads)
    return out


def format_overhead(rows: list[dict[str, Any]]) -> str:
    lines = ["| weights | machine | threads | step (ms) | tokens/s | kernel share | overhead share | top operators (ms/step) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        top = ", ".join(f"{k} {v:.1f}" for k, v in list(r["top_ms_per_step"].items())[:3])
        cond = r.get("condition", "quiet") + (f" ({r['vs_quiet']:.2f}× quiet)" if "vs_quiet" in r else "")
        lines.append(f"| {r['weights']} | {cond} | {r.get('threads', '')} | {r['step_ms']:.1f} | {1e3 / r['step_ms']:.2f} "
                     f"| {100 * r['kernel_share']:.1f} % | {100 * r['overhead_share']:.1f} % | {top} |")
    return "\n".join(lines)
