"""How much of a decode step is Python and framework, not kernels: `python -m engine overhead`.

One-token steps (`lm.extend([t])`, the autoregressive step every path makes) on a warm cache, timed
twice, interleaved per repeat: plainly (wall) and under torch's profiler, which adds up the time the
operators themselves ran (their self CPU time; a foreign kernel called through ctypes counts as the
Python around it, so for our qgemm kernel its own time is clocked separately with `perf_counter`):

    kernel share     Σ operator (and qgemm kernel) time / profiled wall
    overhead share   1 − kernel share: module dispatch, cache bookkeeping, masks, argument handling
    top operators    where the kernel time goes (matmul kernels, attention, cache concatenation)

Worked example: a 140 ms step of which operators ran 128 ms → overhead share 8.6 %.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch


def _qgemm_clock(model: torch.nn.Module) -> tuple[list[float], list]:
    """Wrap each QGemmLinear's forward to accumulate its wall time (seconds) into a one-cell list."""
    from engine.kernels.qkernel import QGemmLinear

    spent, restore = [0.0], []
    for m in model.modules():
        if isinstance(m, QGemmLinear):
            fwd = m.forward

            def timed(x, _f=fwd):
                t = time.perf_counter()
                y = _f(x)
                spent[0] += time.perf_counter() - t
                return y
            m.forward = timed
            restore.append(m)
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
        spent, wrapped = _qgemm_clock(lm.model)
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                t = time.perf_counter()
                for _ in range(steps):
                    lm.extend([context[-1]])
                wall = time.perf_counter() - t
        finally:
            for m in wrapped:
                del m.forward
        ops = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e6  # µs → s
        kernel_shares.append(min(1.0, (ops + spent[0]) / wall))
        for e in prof.key_averages():
            tops[e.key] = tops.get(e.key, 0.0) + e.self_cpu_time_total / 1e3 / steps / repeats
        if spent[0]:
            tops["qgemm (ctypes)"] = tops.get("qgemm (ctypes)", 0.0) + 1e3 * spent[0] / steps / repeats
    lm.crop(base)
    share = statistics.median(kernel_shares)
    top = sorted(tops.items(), key=lambda kv: -kv[1])[:6]
    return {"step_ms": 1e3 * statistics.median(walls), "kernel_share": share, "overhead_share": 1 - share,
            "top_ms_per_step": {k: round(v, 3) for k, v in top}, "steps": steps, "repeats": repeats,
            "context_len": len(context), "weights": getattr(lm, "weights", "dense")}


def format_overhead(rows: list[dict[str, Any]]) -> str:
    lines = ["| weights | step (ms) | tokens/s | kernel share | overhead share | top operators (ms/step) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        top = ", ".join(f"{k} {v:.1f}" for k, v in list(r["top_ms_per_step"].items())[:3])
        lines.append(f"| {r['weights']} | {r['step_ms']:.1f} | {1e3 / r['step_ms']:.2f} | {100 * r['kernel_share']:.1f} % "
                     f"| {100 * r['overhead_share']:.1f} % | {top} |")
    return "\n".join(lines)
