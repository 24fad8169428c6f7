"""The weight-only matmul kernels side by side: `python -m engine kernels`.

For each Linear shape of a model (default: Qwen2.5-Coder-1.5B's: the MLP's 1536→8960 and 8960→1536,
attention's 1536→1536, the 151,936-row head) and each row count M (1 = an AR step, k + 1 = a verify of
k drafts), every kernel runs on the same random weights, round-robin, and the best of `repeats` calls
is kept (the minimum is what a loaded 2-core machine lets through least disturbed):

    bf16      torch.nn.functional.linear (the dense path where our bf16 kernel does not run)
    bgemv     our dense bf16 kernel (engine.kernels.dense_kernel), where the CPU runs it: the dense path's default
    torch4    aten._weight_int4pack_mm_for_cpu (int4, groups of 32)
    torch8    aten._weight_int8pack_mm (int8 per row)
    qgemm4     our kernel, 4-bit groups of 32 (engine.kernels.qkernel), where the CPU runs it
    qgemm6     our kernel, 6-bit groups of 32 (int6: what a GGUF's Q6_K tensors become without their blocks)
    qgemm8     our kernel, 8-bit groups of 32
    q4k, q5_0, q8_0, q6_k   our kernel on GGUF Q4_K (K % 256 = 0), Q5_0, Q8_0 and Q6_K (K % 256 = 0) blocks as a
               GGUF stores them (the quantized path's formats where the model's GGUF is on disk; plain encoders of
               the same weights)

Reported: ms per call, GB/s of weight bytes read, and each kernel's time relative to bf16.
"""

from __future__ import annotations

import time
from typing import Any

import torch

QWEN_SHAPES = ((1536, 8960), (8960, 1536), (1536, 1536), (1536, 151936))  # (K inputs, N outputs)


def kernels_for(weight: torch.Tensor) -> dict[str, tuple[torch.nn.Module, float]]:
    """{name: (layer, weight bytes it reads per call)} for one dense weight [N, K]."""
    from engine.kernels import dense_kernel, qkernel
    from engine.kernels.accelerate import accelerate
    from engine.kernels.quant import Int4Linear, Int8Linear

    n, k = weight.shape
    lin = torch.nn.Linear(k, n, bias=False, dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(weight)
    out = {"bf16": (lin, 2.0 * n * k), "torch4": (Int4Linear(weight, None, torch.bfloat16), 0.5 * n * k + 8.0 * n * k / 32),
           "torch8": (Int8Linear(weight, None, torch.bfloat16), 1.0 * n * k)}
    if dense_kernel.available() is None:
        fast = torch.nn.Linear(k, n, bias=False, dtype=torch.bfloat16)
        fast.weight = lin.weight
        accelerate(fast)  # the dense bf16 path: its linear onto our kernel
        out["bgemv"] = (fast, 2.0 * n * k)
    if qkernel.available() is None:
        out["qgemm4"] = (qkernel.QGemmLinear(weight, None, 4), 0.5 * n * k + 4.0 * n * k / 32)
        out["qgemm6"] = (qkernel.QGemmLinear(weight, None, 6), 0.75 * n * k + 4.0 * n * k / 32)
        out["qgemm8"] = (qkernel.QGemmLinear(weight, None, 8), 1.0 * n * k + 4.0 * n * k / 32)
        blocks = [(qkernel.Q50, qkernel.q50_pack), (qkernel.Q80, qkernel.q80_pack)]
        if k % qkernel.BLOCKS[qkernel.Q4K][1] == 0:
            blocks.insert(0, (qkernel.Q4K, qkernel.q4k_pack))
            if qkernel.reads(qkernel.Q6K):
                blocks.append((qkernel.Q6K, qkernel.q6k_pack))
        for bits, pack in blocks:
            b = pack(weight)
            out[qkernel.BLOCK_FMT[bits]] = (qkernel.QGemmLinear.from_blocks(b, None, bits), float(b.numel()))
    return out


@torch.inference_mode()
def compare(shapes=QWEN_SHAPES, ms=(1, 2, 4, 8, 16), repeats: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    rows = []
    g = torch.Generator().manual_seed(seed)
    for k, n in shapes:
        layers = kernels_for(torch.randn(n, k, generator=g) * 0.02)
        for m in ms:
            x = torch.randn(m, k, generator=g).to(torch.bfloat16)
            best = {name: float("inf") for name in layers}
            for name, (layer, _) in layers.items():
                layer(x)  # warm
            for _ in range(repeats):
                for name, (layer, _) in layers.items():
                    t = time.perf_counter()
                    layer(x)
                    best[name] = min(best[name], time.perf_counter() - t)
            for name, (_, nbytes) in layers.items():
                rows.append({"K": k, "N": n, "M": m, "kernel": name, "ms": 1e3 * best[name],
                             "gb_per_s": nbytes / best[name] / 1e9, "vs_bf16": best[name] / best["bf16"]})
    return rows


def format_kernels(rows: list[dict[str, Any]]) -> str:
    names = list(dict.fromkeys(r["kernel"] for r in rows))
    lines = ["| K → N | M | " + " | ".join(f"{n} ms (GB/s)" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for key in dict.fromkeys((r["K"], r["N"], r["M"]) for r in rows):
        cells = {r["kernel"]: r for r in rows if (r["K"], r["N"], r["M"]) == key}
        lines.append(f"| {key[0]} → {key[1]} | {key[2]} | "
                     + " | ".join(f"{cells[n]['ms']:.2f} ({cells[n]['gb_per_s']:.1f})" for n in names) + " |")
    return "\n".join(lines)
