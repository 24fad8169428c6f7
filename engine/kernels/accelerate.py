"""The one switch onto the fast paths: `accelerate(model, weights, …) -> KernelReport`, called once per model
by engine.models.load.load_model (so a pair on two weights paths calls it once for each of its models).

    accelerate(model, weights='dense', gguf_types=None, act_dtype=None, kernel='auto') -> KernelReport
    paths(weights, dtype, device) -> (path, why)   the path a model would run on, without a model
    status() -> lines                              builds, paths and OpenMP runtimes (`kernels --status`)
    KernelReport.summary()                         one line: weights, path, why, where the library came from

What it switches, by weights path, device and dtype (the only place any of it happens):

    quantized / int8 / int4 (CPU)  every nn.Linear swapped for its quantized layer (engine.kernels.quant); when
                                   all of them are batch-invariant (our qgemm kernel), attention too goes
                                   row by row (engine.kernels.rowwise_attention), so greedy SD equals AR bit for bit
    dense, bf16, CPU               our bf16 kernel for short forwards where the CPU runs it: the linears, the
                                   row-wise attention and the fused decoder layers (engine.kernels.fast_layer)
    dense, fp32, CPU               torch's GEMM with the weight as the large operand, (W xᵀ)ᵀ (use_skinny_linears, here)
    anything else (CUDA, fp16)     torch, untouched

Why one function: the kernels used to be switched on in four places (the fp32 and bf16 patches inside
`HFModel.__init__`, the quantizer's attention switch, the fused layers), chosen by two layers (the loader
quantized, the wrapper's constructor patched), and nothing said which path a model ended on. Now the loader
asks once and keeps the answer (`LoadedModel.kernels`); `python -m engine kernels --status` prints it.
`HFModel` drives whatever model it is handed: a model built by hand runs plain torch unless it is passed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.kernels.quant import QuantReport, quantize_model


@dataclass(frozen=True)
class KernelReport:
    """Which path one model runs on and why (one per model: a pair may run two paths)."""

    weights: str  # the weights path asked for (engine.kernels.quant.WEIGHTS)
    device: str
    dtype: str
    path: str  # 'speclab qgemm (avx512vnni)', 'speclab bgemv', 'torch int8', 'torch fp32 (W xᵀ)ᵀ', 'torch'
    why: str  # one line: why this path and not a faster one
    build: str | None = None  # where our library came from: 'installed' (pip install), 'cache', None = none used
    layers: int = 0  # linear layers routed onto `path`
    quant: QuantReport | None = None  # what quantize_model did, on a quantized path

    def summary(self) -> str:
        src = f", library {self.build}" if self.build else ""
        return f"weights {self.weights} on {self.device} {self.dtype}: {self.path} ({self.layers} linears{src}) — {self.why}"


# ------------------------------------------------------------ the fp32 path: torch's GEMM, weight-major

SKINNY_ROWS = 16  # up to this many rows (a verify block), use the weight-major GEMM below


def _skinny_forward(self, x: torch.Tensor) -> torch.Tensor:
    """y = x Wᵀ + b computed as (W xᵀ)ᵀ when x has few rows.

    Same dot products, other operand order: with W as the GEMM's large left operand the BLAS streams
    the weight once and packs only the small x, where `x @ W.T` packs the whole weight on every call.
    On a 2-core AVX2 CPU this makes a 5-token verify of the 1.5B target ~30 % cheaper (benchmarks.md).
    """
    x2 = x.reshape(-1, x.shape[-1])
    if x2.shape[0] <= SKINNY_ROWS:
        y = torch.mm(self.weight, x2.T).T
    else:
        y = torch.nn.functional.linear(x2, self.weight)
    if self.bias is not None:
        y = y + self.bias
    return y.reshape(*x.shape[:-1], y.shape[-1])


def use_skinny_linears(model: torch.nn.Module) -> int:
    """Route every nn.Linear of `model` through `_skinny_forward` (CPU fp32); returns how many."""
    import types

    n = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and "forward" not in m.__dict__:
            m.forward = types.MethodType(_skinny_forward, m)
            n += 1
    return n


def _dtype_name(dt: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dt, str(dt))


def paths(weights: str, dtype: torch.dtype, device: str = "cpu") -> tuple[str, str]:
    """(path, why) of a model on `weights` / `dtype` / `device` on this machine, without a model: what
    `accelerate` would choose for a model whose every linear fits."""
    from engine.kernels import dense_kernel, qkernel

    if device != "cpu":
        return "torch", f"{device}: torch's own kernels"
    if weights != "dense":
        why = qkernel.available()
        if why is None:
            return f"speclab qgemm ({qkernel.variant()})", "our weight-only kernel runs on this CPU"
        return "torch int4/int8", f"our qgemm kernel does not run here: {why}"
    if dtype == torch.bfloat16:
        why = dense_kernel.available()
        if why is None:
            return "speclab bgemv", f"our bf16 kernel ({dense_kernel.loaded_variant()} build) runs on this CPU"
        return "torch bf16", f"our bf16 kernel does not run here: {why}"
    if dtype == torch.float32:
        return "torch fp32 (W xᵀ)ᵀ", "fp32: torch's GEMM, weight as the large operand (no native kernel of ours)"
    return "torch", f"{_dtype_name(dtype)}: torch's own kernels"


def accelerate(model: torch.nn.Module, weights: str = "dense", gguf_types: dict[str, str] | None = None,
               act_dtype: torch.dtype | None = None, kernel: str = "auto", gguf_blocks=None) -> KernelReport:
    """Put one loaded transformers model (or a bare module) on its fastest path for `weights` here; the report.
    `gguf_types`: the GGUF tensor types of a `quantized` model (engine.models.gguf_types); `act_dtype`: the
    quantized kernels' activation dtype (default the model's); `kernel`: 'auto' or 'torch' (torch's int
    kernels even where ours runs); `gguf_blocks`: the GGUF's own Q4_K / Q5_0 / Q8_0 blocks (engine.models.gguf_blocks),
    read as they are by those layers on our kernel. Raises ValueError in one line (an unknown weights path, a GPU model on a
    quantized path, a GGUF type the quantized path cannot run)."""
    from engine.kernels import dense_kernel, qkernel
    from engine.kernels.fast_decoder import use_fast_decoder
    from engine.kernels.fast_layer import use_dense_kernel, use_fast_layers
    from engine.kernels.rope_table import use_rope_table
    from engine.kernels.rowwise_attention import use_rowwise

    p = next(model.parameters())
    dev, dt = p.device.type, _dtype_name(p.dtype)
    if dev == "cpu":  # every CPU path: a position's cos / sin the same bits in every forward (rope_table's why)
        use_rope_table(model)
    q = quantize_model(model, weights, gguf_types, act_dtype=act_dtype, kernel=kernel,
                       gguf_blocks=gguf_blocks)  # 'dense': records only
    if weights != "dense":
        layers = [m for m in model.modules() if isinstance(m, (qkernel.QGemmLinear,) + _torch_quant())]
        ours = [m for m in layers if isinstance(m, qkernel.QGemmLinear)]
        if layers and len(ours) == len(layers):  # every linear batch-invariant: attention is what is left
            use_rowwise(model)
            use_fast_layers(model)  # fused q|k|v and gate|up on qgemm, no module machinery between (same bits)
            use_fast_decoder(model)  # where every layer is one C call: a step's layers in one call (same bits)
        if ours:
            path = f"speclab qgemm ({qkernel.variant()})"
            why = "our weight-only kernel" + ("" if len(ours) == len(layers) else
                                               f" ({len(layers) - len(ours)} layers on torch's: their shape)")
            tiled = sum(m.bits in qkernel.TILED.values() for m in ours)
            if tiled:
                why += (f"; {tiled} Q4_K / Q6_K layers in sixteen-row units (VNNI lanes"
                        + (" to 8 rows, AMX tiles above)" if qkernel.tiles() else ")"))
            elif qkernel.variant() in qkernel.ONLY_ON[qkernel.Q4KT] and any(m.bits in qkernel.TILED for m in ours):
                why += "; Q4_K / Q6_K as stored (SPECLAB_QTILES=0; unset, sixteen-row units: a flatter verify)"
            why += _step_note(model)
            return KernelReport(weights, dev, dt, path, why, qkernel.built(), len(layers), q)
        why = "kernel='torch' asked" if kernel == "torch" else f"our qgemm kernel does not run here: {qkernel.available()}"
        return KernelReport(weights, dev, dt, "torch int4/int8", why, None, len(layers), q)
    if dev != "cpu":
        return KernelReport(weights, dev, dt, "torch", f"{dev}: torch's own kernels")
    if p.dtype == torch.float32:
        n = use_skinny_linears(model)
        return KernelReport(weights, dev, dt, "torch fp32 (W xᵀ)ᵀ", paths(weights, p.dtype)[1], None, n)
    if p.dtype == torch.bfloat16:
        n = use_dense_kernel(model)
        if n:
            use_fast_decoder(model)  # where every layer is one C call: a step's layers in one call (same bits)
            return KernelReport(weights, dev, dt, "speclab bgemv", f"our bf16 kernel ({dense_kernel.loaded_variant()} "
                                f"build) for forwards of ≤ "
                                f"{dense_kernel.MAX_ROWS} rows (torch's GEMM beyond){_step_note(model)}",
                                dense_kernel.built(), n)
        why = dense_kernel.available() or "no linear layer fits the kernel (bf16, contiguous, K % 32 = 0)"
        return KernelReport(weights, dev, dt, "torch bf16", why)
    return KernelReport(weights, dev, dt, "torch", f"{dt}: torch's own kernels")


def _step_note(model: torch.nn.Module) -> str:
    from engine.kernels.fast_decoder import one_call

    what = one_call(model)
    return f"; a decode step's {what} in one C call" if what else ""


def status() -> list[str]:
    """What `python -m engine kernels --status` prints: per build, whether this CPU runs it and where its
    library comes from; per path, what a model on it runs and why; the OpenMP runtimes in the process."""
    from engine.kernels import dense_kernel, kernel_build, qkernel

    flags = kernel_build.cpu_flags()
    lines = ["kernel builds (engine/kernels/kernel_build.py):"]
    for name, b in kernel_build.BUILDS.items():
        lacks = [f for f in b.needs if f not in flags]
        inst = kernel_build.installed(b)
        runs = "runs on this CPU" if not lacks else f"not for this CPU (lacks {', '.join(lacks)})"
        lines.append(f"  {name:17s} {runs}; " + (f"installed: {inst.name}" if inst else
                                                   "not installed (compiled on first use into the cache)"))
    lines.append("paths (a model whose every linear fits; `--model NAME` loads one and says what it got):")
    for weights, dt in (("dense", torch.float32), ("dense", torch.bfloat16), ("quantized", torch.bfloat16)):
        path, why = paths(weights, dt)
        lines.append(f"  {weights:9s} {_dtype_name(dt):4s} → {path}: {why}")
    src = {"bgemv": dense_kernel.built(), "qgemm": qkernel.built()}
    lines.append("libraries loaded: " + (", ".join(f"{k} from {v}" for k, v in src.items() if v) or "none"))
    rts = kernel_build.openmp_runtimes()
    lines.append(f"OpenMP runtimes mapped: {len(rts)} ({', '.join(rts) or 'none'})")
    return lines


def _torch_quant() -> tuple[type, ...]:
    from engine.kernels.quant import Int4Linear, Int8Linear

    return (Int4Linear, Int8Linear)
