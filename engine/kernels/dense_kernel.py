"""Our own dense bf16 kernel for short forwards on CPU (engine/kernels/bf16_kernels.c): the dense path's decode steps
and verifies read each weight once at the memory's speed, and compute every output row the same way
whatever the row count.

    available() -> str | None           None when the kernel runs here, else why not (one line)
    bgemv(x, w, b) -> y                  y[M, N] = x[M, K] · w[N, K]ᵀ + b, bf16 in and out, M ≤ MAX_ROWS
    long_linear(x, w, b) -> y            a longer forward (a prefill) on the CPU's fastest GEMM (float32 on AVX2)
    attention(q, k, v, scale) -> o       causal attention of a few query rows on the KV cache, row by row
    (the library also holds speclab_layer_in / _out, fused_layer.h, which engine.kernels.fused calls)
    kernel_of(model) -> str              'speclab bgemv' once engine.kernels.fast_layer.use_dense_kernel routed
                                         the model's linears, attention and decoder layers onto these kernels

Why (measured on a 2-core EPYC with avx512_bf16, memory read ~25 GB/s; `python -m engine kernels`):
torch's bf16 GEMV streams the 1.5B target's 8960×1536 and 1536×8960 MLP weights at 11–12 GB/s, ours at
20–27 GB/s (profiled); with the attention kernel and engine.kernels.fast_layer the target's one-token forward
falls from 296 to 111 ms in the bench's cost probe (docs/log/2026-12-05-dense-kernel.md). vLLM's CPU build gets its bf16 speed the
same way, from its own kernels.

Why batch-invariant (bf16_kernels.c): with every linear computing a row alone and attention computing a query
row alone (rowwise_attention), a k-token verify gives the same logits as k one-token steps, so greedy
speculative decoding on the dense path reproduces its autoregressive output bit for bit, as on the
quantized path. A forward of more than MAX_ROWS rows (a prefill, shared by every run of a prompt) runs
torch's GEMM, which is compute-bound and fast there.

Where it runs: a CPU with AMX tiles (amx_tile + amx_bf16: Intel Sapphire Rapids and newer) runs bf16_kernels.c's
AMX build (bgemv-amx: every product on TDPBF16PS, ~29–30 GB/s at one to four activation rows where vdpbf16ps
falls to 18–19 at four; where the OS refuses the tile state the AVX-512 build runs and the report says so); a CPU
with avx512f + avx512bw + avx512_bf16 (AMD Zen 4, Intel Cooper Lake and newer) runs bf16_kernels.c (vdpbf16ps); a CPU with AVX2 + FMA only runs bf16_kernels_avx2.c (each bf16 widened exactly to
float32 in registers, then FMAs; torch's own bf16 GEMV there is ~4× slower than its fp32 one). Both need a C
compiler (or the install step's build). Elsewhere, or with SPECLAB_DENSE_KERNEL=torch, the dense path is torch's.
"""

from __future__ import annotations

import ctypes
import os

import torch

from engine.kernels import fused
from engine.kernels.kernel_build import BUILDS, cpu_flags, library, load_library

VARIANTS = {  # build → CPU flags it needs, fastest first: AVX-512 BF16 dot products, else AVX2 widening + FMA
    name: b.needs for name, b in BUILDS.items() if b.source in ("bf16_kernels.c", "bf16_kernels_avx2.c")}
MAX_ROWS = 64  # a verify of up to 63 drafts; a longer forward is a prefill (torch's compute-bound GEMM)
_lib = None
_why: str | None = None
_built: str | None = None  # where the loaded library came from: 'installed' (pip install) or 'cache'
_variant: str | None = None  # the build loaded: 'bgemv-amx' (AMX tiles), 'bgemv' (AVX-512 BF16) or 'bgemv-avx2'
_amx_refused: str | None = None  # why the AMX build was passed over on this machine (the kernel refused the tiles)


def variant(skip: tuple[str, ...] = ()) -> str | None:
    """The build this CPU runs ('bgemv-amx', 'bgemv', 'bgemv-avx2'), or None. SPECLAB_BGEMV=<build> forces one
    (tests)."""
    flags = cpu_flags()
    forced = os.environ.get("SPECLAB_BGEMV")
    for name, need in VARIANTS.items():
        if name not in skip and forced in (None, "", name) and all(f in flags for f in need):
            return name
    return None


def available() -> str | None:
    """None when the kernel runs on this machine; else the reason (opted out, CPU flags, no compiler)."""
    global _lib, _why, _built, _variant, _amx_refused
    if _lib is not None or _why is not None:
        return _why
    if os.environ.get("SPECLAB_DENSE_KERNEL", "auto") == "torch":
        _why = "disabled by SPECLAB_DENSE_KERNEL=torch"
        return _why
    name = variant()
    if name is None:
        missing = [f for f in VARIANTS["bgemv-avx2"] if f not in cpu_flags()]
        _why = f"this CPU lacks {', '.join(missing) or 'the forced build ' + str(os.environ.get('SPECLAB_BGEMV'))}"
        return _why
    try:
        lib, how = _open(name)
    except OSError as e:
        _why = str(e).splitlines()[0]
        if name != "bgemv-amx":
            return _why
        lib = None  # a compiler that does not know the tile instructions: the AVX-512 build, as below
        _amx_refused = f"the AMX build failed ({_why}); the AVX-512 BF16 build runs"
    if name == "bgemv-amx" and (lib is None or not lib.speclab_amx_ok()):
        # or the CPU lists AMX but the OS did not grant the tile state (arch_prctl): the next build runs
        _amx_refused = _amx_refused or "the OS refused the AMX tile state (arch_prctl XTILEDATA); the AVX-512 BF16 build runs"
        name = variant(skip=("bgemv-amx",))
        if name is None:
            _why = _amx_refused
            return _why
        try:
            lib, how = _open(name)
        except OSError as e:
            _why = str(e).splitlines()[0]
            return _why
        _why = None
    _lib, _built, _variant = lib, how, name
    return _why


def _open(name: str) -> tuple[ctypes.CDLL, str]:
    path, how = library(BUILDS[name])
    fns = {"speclab_bgemv": [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4 + [ctypes.c_int],
           "speclab_attn": [ctypes.c_int] * 5 + [ctypes.c_void_p] * 3 + [ctypes.c_longlong, ctypes.c_float,
                                                                         ctypes.c_void_p, ctypes.c_int],
           "speclab_read": [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int, ctypes.c_void_p],
           **fused.ARGTYPES}
    if name == "bgemv-amx":
        fns["speclab_amx_ok"] = []
    return load_library(path, fns), how


def read_words(buf: torch.Tensor, streams: int, threads: int) -> int:
    """The sum of `buf`'s bytes read as 64-bit words, each thread's share as `streams` runs side by side
    (read_probe.h: the bandwidth probe's own read; call `available()` first). Raises ValueError for a size the
    loop does not take (a multiple of 64 · streams · threads bytes)."""
    if not buf.is_contiguous() or buf.device.type != "cpu":
        raise ValueError("read_words: a contiguous CPU tensor")
    nbytes = buf.numel() * buf.element_size()
    out = ctypes.c_uint64(0)
    if nbytes % 8 or _lib.speclab_read(buf.data_ptr(), nbytes // 8, streams, threads, ctypes.byref(out)):
        raise ValueError(f"read_words: {nbytes} bytes is not a multiple of 64 · {streams} streams · {threads} threads")
    return out.value


def loaded_variant() -> str | None:
    """The build `available()` loaded ('bgemv (AMX passed over: why)' where the AMX build was), else None."""
    if _lib is None:
        return None
    return f"{_variant} (AMX passed over: {_amx_refused})" if _amx_refused and _variant != "bgemv-amx" else _variant


def built() -> str | None:
    """'installed' or 'cache' once `available()` loaded the library, else None."""
    return _built if _lib is not None else None


def bgemv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] · w[N, K]ᵀ (+ b[N]) → [M, N], all bf16 on CPU (call `available()` first)."""
    x = x.contiguous()
    m, k = x.shape
    n = w.shape[0]
    if not w.is_contiguous() or w.shape[1] != k:
        raise ValueError(f"bgemv needs a contiguous weight [N, {k}], got {tuple(w.shape)}")
    y = torch.empty(m, n, dtype=torch.bfloat16)
    rc = _lib.speclab_bgemv(m, n, k, x.data_ptr(), w.data_ptr(), None if b is None else b.data_ptr(),
                            y.data_ptr(), torch.get_num_threads())
    if rc != 0:
        raise RuntimeError(f"bgemv refused shape M={m} N={n} K={k}" + (" (out of memory)" if rc == 2 else ""))
    return y


def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor | None:
    """Causal attention of q query rows [1, H, q, D] on L cached keys / values [1, Hkv, L, D] (the last q of them
    the queries' own), each row alone: out_i = softmax(scale · q_i K[:n_i]ᵀ) V[:n_i], n_i = L − q + i + 1.
    Returns [1, q, H, D] bf16, or None where the kernel does not take the tensors (the caller's torch path)."""
    if _lib is None or query.dtype != torch.bfloat16 or key.dtype != torch.bfloat16 or value.dtype != torch.bfloat16:
        return None
    b, h, q, d = query.shape
    hkv, n = key.shape[1], key.shape[2]
    if (b != 1 or d % 32 or d > 512 or h % hkv or q > n or key.stride()[2:] != (d, 1)
            or value.stride() != key.stride() or key.device.type != "cpu"):
        return None
    qs = query[0].transpose(0, 1).contiguous()  # [q, H, D]
    out = torch.empty(1, q, h, d, dtype=torch.bfloat16)
    rc = _lib.speclab_attn(q, h, hkv, d, n, qs.data_ptr(), key.data_ptr(), value.data_ptr(), key.stride(1),
                           float(scale), out.data_ptr(), torch.get_num_threads())
    return out if rc == 0 else None


def fits(weight: torch.Tensor) -> bool:
    """A weight the kernel takes: bf16, on CPU, contiguous, K a multiple of 32."""
    return (weight.dtype == torch.bfloat16 and weight.device.type == "cpu" and weight.dim() == 2
            and weight.is_contiguous() and weight.shape[1] % 32 == 0)


_native_bf16: bool | None = None


def native_bf16_gemm() -> bool:
    """Whether torch's bf16 GEMM runs on bf16 instructions here (avx512_bf16 or AMX), i.e. is the fast one."""
    global _native_bf16
    if _native_bf16 is None:
        _native_bf16 = bool({"avx512_bf16", "amx_bf16"} & cpu_flags())
    return _native_bf16


def long_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] · weight[N, K]ᵀ (+ bias) for a long bf16 forward (a prefill: compute-bound) on the fastest GEMM
    this CPU has. Where bf16 is native, torch's bf16 GEMM. Elsewhere (AVX2) torch's bf16 GEMM runs at ~11
    GFLOP/s against ~60 for float32 on 2 threads, so the weight is widened to float32 a chunk of rows at a time
    (≈ 8 MB, cache-sized; the whole head widened at once would be 0.9 GB) and multiplied in float32: measured
    at M = 100 on a 2-core AVX2 EPYC, 224 → 56 ms for the 1536→8960 MLP weight, 4.2 → 1.1 s for the 151,936-row
    head. The result is rounded to bf16 once, as torch's bf16 GEMM does (float32 accumulation in both)."""
    if native_bf16_gemm() or x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16 or x.device.type != "cpu":
        return torch.nn.functional.linear(x, weight, bias)
    x32 = x.float()
    n, k = weight.shape
    y = torch.empty(x.shape[0], n, dtype=torch.float32)
    rows = max(256, (1 << 21) // max(k, 1))
    for n0 in range(0, n, rows):
        torch.mm(x32, weight[n0:n0 + rows].float().T, out=y[:, n0:n0 + rows])
    if bias is not None:
        y += bias.float()
    return y.to(torch.bfloat16)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear on the kernel for a short bf16 forward, on the CPU's fastest GEMM otherwise (`long_linear`; same
    result up to rounding: all accumulate in float32)."""
    rows = x.numel() // x.shape[-1] if x.numel() else 0
    if 0 < rows <= MAX_ROWS and x.dtype == torch.bfloat16 and not x.requires_grad and _lib is not None:
        y = bgemv(x.reshape(rows, x.shape[-1]), weight, bias)
        return y.reshape(*x.shape[:-1], weight.shape[0])
    # grad mode, not requires_grad: a model's own Parameters (o_proj, down_proj) keep requires_grad=True under
    # inference_mode, and sending them to F.linear ran a dense AVX2 prefill's o and down products on torch's bf16
    # GEMM at ~11 GFLOP/s (a 300-token 1.5B prefill 32.8 s; 14 s once they too run here)
    if rows and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        y = long_linear(x.reshape(rows, x.shape[-1]), weight, bias)
        return y.reshape(*x.shape[:-1], weight.shape[0])
    return torch.nn.functional.linear(x, weight, bias)


def kernel_of(model: torch.nn.Module) -> str:
    """'speclab bgemv' when `use_dense_kernel` routed the model's linears, else 'torch'."""
    return "speclab bgemv" if getattr(model, "speclab_dense_kernel", False) else "torch"
