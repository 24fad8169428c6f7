"""The quantized fast path (`--weights quantized`): weight-only int8 / int4 linear layers on torch's own
CPU kernels, swapped into a loaded transformers model so that every probe stays (per-step timings, the
draft's q and the target's p, hidden states for PACER and the block drafter).

Weights paths (`WEIGHTS`):
    dense       the de-quantised bf16 / fp32 weights: the exactness reference
    quantized   each linear at its GGUF tensor's own precision class when the model came from a GGUF
                (`engine.models.gguf_types`): 4-bit types → int4, Q6_K → int6 (where our qgemm kernel runs,
                else int8), 5- and 8-bit types → int8, float → dense; a model without a GGUF record → int8
                everywhere
    int8, int4  one format for every linear (any model)

Formats, W ∈ ℝ^{N×K} (N outputs, K inputs), y = x Wᵀ:
    int8   symmetric per output row:  W ≈ s_n · q_{n,k},  q ∈ [−127, 127],  s_n = max_k |W_{n,k}| / 127
           kernel aten._weight_int8pack_mm(x, q, s)
    int4   asymmetric per group of G = 32 inputs: W ≈ (q − 8) · s_{g,n} + z_{g,n},  q ∈ [0, 15],
           s = (max − min) / 15, z = min + 8 s over the group; kernel aten._weight_int4pack_mm_for_cpu
           (needs N % 16 = 0 and K % G = 0, else the layer falls back to int8).
    q4k    (our qgemm kernel only) a GGUF Q4_K tensor's own blocks, read as the file stores them
           (engine.models.gguf_blocks: the quantized path takes them where the model's GGUF is on disk, after
           checking rows of them against the loaded weights): d·sc·q − dmin·m, 4.5 bits a weight — the GGUF's
           own values and bytes, where int4 re-quantises their de-quantised values at 5 bits (fp16 scale and
           minimum per 32) and moves a weight wherever a group does not span its 16 levels. The 1.5B's
           next-token KL to the dense path 0.0127 → 0.0030, top-1 agreement 93.6 → 95.9 % (scripts/
           quant_fidelity.py, the file below), at 1.003 GB a token against 1.073
    q5_0, q8_0   (our qgemm kernel only) a GGUF Q5_0 / Q8_0 tensor's own blocks in the same way (d·(q − 16),
           d·q per 32; Q5_0 regrouped four blocks to 88 bytes on the VNNI build, the same bytes: kernels/q5_runs.h):
           5.5 and 8.5 bits a weight where int8 groups take 9 — the 0.5B draft's Q4_K_M file is mostly
           Q5_0 (its 896-wide rows are not whole Q4_K blocks) with a Q8_0 head. The draft's linear weights
           489 → 376 MiB, its next-token KL to its dense path 0.0033 → 0.0012, its step 13.7 → 11.0 ms (c on the
           quantized path 0.387 → 0.309; docs/log/2026-12-06-gguf-blocks-q5-q8-and-q8k.md)
    q6_k   (our qgemm kernel, both builds) a GGUF Q6_K tensor's own blocks in the same way:
           (d·sc)·(q − 32) per 16, 6.56 bits a weight — a Q4_K_M file's head, v and half its down projections at
           the GGUF's own values and bytes (docs/log/2026-12-07-q6k-blocks-and-q4k-runs.md)
    int6   (our qgemm kernel only: engine.kernels.qkernel) asymmetric per group of 32 as int4, q ∈ [0, 63];
           the quantized path's format for GGUF Q6_K tensors where q6_k does not run (no GGUF on disk, or
           SPECLAB_GGUF_BLOCKS=0): 7 bits a weight with the scales, against 6.56 in the GGUF and 9 as int8 — 0.11 GB less
           a token for the 1.5B target. Its cost in fidelity, measured against the dense path over 2,154
           teacher-forced positions of 12 dev prompts (1.5B, scripts/quant_fidelity.py,
           docs/results/quant-fidelity-qwen-amd-epyc-avx512bf16.json): mean KL 0.0119 → 0.0127, top-1 agreement
           93.9 → 93.6 % (int4 everywhere: 0.0323, 89.5 %).
Why G = 32: a GGUF Q4_K block is 8 groups of 32 weights, each group d·sc·q − dmin·m with q ∈ 0…15,
so round-to-nearest int4 per 32-group recovers the GGUF's own grid wherever a group spans its range.
Worked example: a group [0.10, 0.25, 0.40] → s = 0.02, z = 0.26; q = [0, 8, 15] → [0.10, 0.26, 0.40].

Why these kernels (measured on a 2-core EPYC with avx512_bf16, docs/log/2026-12-04-quantized-path.md,
`python -m engine kernels`): for one token our qgemm kernel (engine.kernels.qkernel: activations quantized
to int8 per group, integer dot products with AVX-512 VNNI, an AVX2 build elsewhere) reads 4-bit weights at
~28 GB/s and 8-bit at ~34 GB/s, 10–25 % ahead of torch's int4 kernel and 2× its int8 one, against ~20 GB/s
for a dense bf16 GEMV; and it computes each output row the same way whatever the row count, which keeps
greedy exact. torch's kernels (above) are the fallback where qgemm cannot run. Every quantized kernel's
cost grows ~linearly in the rows past two, so the verify curve t(k)/t(1) is much steeper than dense
(`python -m engine costs --weights quantized` measures it) — except for Q4_K and Q6_K on the AVX-512 builds, which
regroup them in sixteen-row units (engine/kernels/qtiles.h) and multiply a unit's rows in VNNI lanes (qlanes.h;
past eight rows on the AMX tiles where they run): each unit's weights unpacked once for every activation row, so a
verify of five rows costs ~1.2 steps on the AMX Xeon measured (qkernel.use_tiles; SPECLAB_QTILES=0 keeps the
blocks as stored). Activations run in bf16 where bf16 is native (torch's int4 kernel in fp32 is ~25× slower
here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

WEIGHTS = ("dense", "quantized", "int8", "int4")
GROUP = 32  # int4 group size: a GGUF Q4_K sub-block (see the module doc)
INNER_K_TILES = 8  # the CPU int4 packing's inner tiling (the only value its kernel documents)
# GGUF tensor types by the format they run in here; any other type is refused, naming the tensor.
GGUF_INT4 = ("Q4_0", "Q4_1", "Q4_K")
GGUF_INT6 = ("Q6_K",)  # 6.56 bits a weight in the GGUF: 7 here (6 + fp16 scale and minimum per 32), against 9 as int8
GGUF_INT8 = ("Q5_0", "Q5_1", "Q5_K", "Q8_0", "Q8_K")
GGUF_DENSE = ("F32", "F16", "BF16")


def check_weights(weights: str) -> str | None:
    """A one-line refusal for an unknown weights path, else None."""
    if weights not in WEIGHTS:
        return f"unknown weights path {weights!r}; choose from {', '.join(WEIGHTS)}"
    return None


class Int8Linear(torch.nn.Module):
    """y = x (s ⊙ q)ᵀ + b with q int8 [N, K] and s [N] (symmetric per output row)."""

    fmt = "int8"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, act_dtype: torch.dtype) -> None:
        super().__init__()
        w = weight.detach().float()
        s = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        self.register_buffer("qweight", torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", s.to(act_dtype))
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().to(act_dtype), requires_grad=False)
        self.in_features, self.out_features = w.shape[1], w.shape[0]
        self.act_dtype = act_dtype

    def dequantized(self) -> torch.Tensor:
        return self.qweight.float() * self.scales.float()[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dt = x.shape, x.dtype
        y = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, shape[-1]).to(self.act_dtype), self.qweight, self.scales)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features).to(dt)


class Int4Linear(torch.nn.Module):
    """y = x Ŵᵀ + b with Ŵ = (q − 8)·s + z per group of GROUP inputs (asymmetric, q ∈ 0…15)."""

    fmt = "int4"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, act_dtype: torch.dtype) -> None:
        super().__init__()
        w = weight.detach().float()
        n, k = w.shape
        g = w.reshape(n, k // GROUP, GROUP)
        lo, hi = g.amin(dim=2), g.amax(dim=2)
        s = ((hi - lo) / 15.0).clamp(min=1e-12)
        q = torch.round((g - lo[..., None]) / s[..., None]).clamp(0, 15).to(torch.int32).reshape(n, k)
        z = lo + 8.0 * s
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, INNER_K_TILES))
        # [K / G, N, 2]: (scale, zero) per group and output, the kernel's layout
        self.register_buffer("scales_zeros", torch.stack([s.T, z.T], dim=2).contiguous().to(act_dtype))
        self._q = None
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().to(act_dtype), requires_grad=False)
        self.in_features, self.out_features = k, n
        self.act_dtype = act_dtype

    @staticmethod
    def fits(weight: torch.Tensor) -> bool:
        n, k = weight.shape
        return n % 16 == 0 and k % GROUP == 0

    def dequantized(self) -> torch.Tensor:
        """Ŵ [N, K] as the kernel sees it (scales and zeros at their stored precision)."""
        eye = torch.eye(self.in_features, dtype=self.act_dtype)
        return torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.packed, GROUP, self.scales_zeros).float().T

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dt = x.shape, x.dtype
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.reshape(-1, shape[-1]).to(self.act_dtype), self.packed,
                                                       GROUP, self.scales_zeros)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features).to(dt)


def quantized_linear(weight: torch.Tensor, bias: torch.Tensor | None, fmt: str,
                     act_dtype: torch.dtype = torch.bfloat16, kernel: str = "auto") -> torch.nn.Module:
    """The layer for `fmt` ('int8' | 'int6' | 'int4'). kernel 'auto': our qgemm kernel (engine.kernels.qkernel:
    4 / 6 / 8 bits per group of 32) where this CPU runs it and K % 32 = 0, else torch's ('torch' forces those);
    torch has no 6-bit layer, so there int6 is int8; a torch int4 layer whose shape its kernel cannot tile is int8."""
    from engine.kernels import qkernel

    if kernel == "auto" and qkernel.QGemmLinear.fits(weight) and qkernel.available() is None:
        return qkernel.QGemmLinear(weight, bias, {"int4": 4, "int6": 6}.get(fmt, 8))
    if fmt == "int4" and Int4Linear.fits(weight):
        return Int4Linear(weight, bias, act_dtype)
    return Int8Linear(weight, bias, act_dtype)


@dataclass(frozen=True)
class QuantReport:
    """What `quantize_model` did: layers per format and weight bytes streamed per forward."""

    weights: str
    layers: dict[str, int] = field(default_factory=dict)  # format → count ('int4', 'int8', 'dense')
    dense_bytes: int = 0  # the swapped layers' weights at the model's dtype
    quant_bytes: int = 0  # the same layers packed
    notes: tuple[str, ...] = ()  # a GGUF's blocks not taken, and why

    def summary(self) -> str:
        parts = ", ".join(f"{n} {f}" for f, n in sorted(self.layers.items()))
        return (f"weights {self.weights}: {parts}; linear weights {self.dense_bytes / 2**20:,.0f} MiB → "
                f"{self.quant_bytes / 2**20:,.0f} MiB" + "".join(f"; {n}" for n in self.notes))


def _layer_bytes(m: torch.nn.Module) -> int:
    return sum(b.numel() * b.element_size() for b in m.buffers())


def plan(model: torch.nn.Module, weights: str, gguf_types: dict[str, str] | None = None) -> dict[str, str]:
    """{linear module name: 'int4' | 'int6' | 'int8' | 'dense'} for a weights path; raises ValueError naming the
    first GGUF tensor whose type the fast path cannot run."""
    err = check_weights(weights)
    if err:
        raise ValueError(err)
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    if weights == "dense":
        return {n: "dense" for n in names}
    if weights in ("int8", "int4"):
        return {n: weights for n in names}
    if not gguf_types:
        return {n: "int8" for n in names}
    out = {}
    for n in names:
        t = gguf_types.get(n + ".weight")
        if t is None and n == "lm_head":  # a tied head: the GGUF stores only the embedding
            t = gguf_types.get("model.embed_tokens.weight")
        if t is None:
            raise ValueError(f"tensor {n}.weight has no GGUF type on record; use --weights int8 or dense")
        if t in GGUF_INT4:
            out[n] = "int4"
        elif t in GGUF_INT6:
            out[n] = "int6"
        elif t in GGUF_INT8:
            out[n] = "int8"
        elif t in GGUF_DENSE:
            out[n] = "dense"
        else:
            raise ValueError(f"tensor {n}.weight is GGUF {t}, which the quantized path cannot run "
                             f"(it runs {', '.join(GGUF_INT4 + GGUF_INT6 + GGUF_INT8 + GGUF_DENSE)}); use --weights dense")
    return out


def _block_layer(lin: torch.nn.Linear, names: list[str], blocks) -> tuple[torch.nn.Module | None, str | None]:
    """(QGemmLinear of the GGUF's own blocks, None) for a linear the provider has (Q4_K, Q5_0, Q8_0, Q6_K), the first
    of `names` whose rows de-quantise to the loaded weight exactly (so the file, the names and the row order are
    the model's); else (None, why) — the caller re-quantises — or (None, None) where the provider has none."""
    from engine.kernels import qkernel

    hits = [n for n in names if n in blocks and qkernel.reads(blocks.bits(n))]  # a format this build reads
    why = None
    n, k = lin.weight.shape
    rows = sorted({0, n // 3, n // 2, n - 1})
    for hit in hits:
        b, bits = blocks(hit), blocks.bits(hit)
        _, per, size = qkernel.BLOCKS[bits]
        if b.shape != (n, k // per * size) or k % per:
            why = why or f"{hit}: GGUF blocks {tuple(b.shape)} do not match the weight {tuple(lin.weight.shape)}"
        elif not torch.equal(qkernel.block_unpack(b[rows], bits).to(lin.weight.dtype), lin.weight[rows]):
            why = why or f"{hit}: the GGUF's blocks are not the loaded weights (another file?)"
        else:
            return qkernel.QGemmLinear.from_blocks(b, lin.bias, bits), None
    return None, why


@torch.inference_mode()
def quantize_model(model: torch.nn.Module, weights: str, gguf_types: dict[str, str] | None = None,
                   act_dtype: torch.dtype | None = None, kernel: str = "auto", gguf_blocks=None) -> QuantReport:
    """Swap each nn.Linear of `model` for its quantized layer per `plan` (in place); the report. Model loading
    calls it through engine.kernels.accelerate.accelerate, which also switches the attention it needs.
    `act_dtype`: the kernels' activation dtype (default the model's; engine.models.load passes bf16 where
    bf16 is native).

    A tied output head keeps the dense tensor for the embedding lookup (a gather: no bandwidth) and
    gets its own packed copy for the head. `model.speclab_weights` records the path (the pair check).
    `gguf_blocks` (engine.models.gguf_blocks.GGUFBlocks): the GGUF's Q4_K, Q5_0, Q8_0 and Q6_K tensors, which
    their layers then read as they are (`q4k`, `q5_0`, `q8_0`, `q6_k`) on our qgemm kernel (Q6_K where the build
    reads it, `qkernel.reads`; elsewhere int6 as the plan says); a tensor whose blocks are not the
    loaded weights is re-quantised and named in the report's notes."""
    p = plan(model, weights, gguf_types)
    model.speclab_weights = weights
    if weights == "dense":
        return QuantReport(weights, {"dense": len(p)})
    dev = next(model.parameters()).device
    if dev.type != "cpu":
        raise ValueError(f"--weights {weights} runs torch's CPU kernels; the model is on {dev}: use --weights dense")
    act = act_dtype or next(model.parameters()).dtype
    counts: dict[str, int] = {}
    notes: list[str] = []
    dense_b = quant_b = 0
    from engine.kernels import qkernel

    blocks_ok = gguf_blocks is not None and kernel == "auto" and qkernel.available() is None
    for name, fmt in p.items():
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        lin = getattr(parent, attr)
        if fmt == "dense":
            counts["dense"] = counts.get("dense", 0) + 1
            continue
        q = None
        if blocks_ok:
            head = name == "lm_head" or lin is model.get_output_embeddings()
            q, why = _block_layer(lin, [name + ".weight"] + (["model.embed_tokens.weight"] if head else []), gguf_blocks)
            if why:
                notes.append(f"{fmt} re-quantised for {why}")
        if q is None:
            q = quantized_linear(lin.weight, lin.bias, fmt, act, kernel)
        if name == "lm_head" or lin is model.get_output_embeddings():
            q.weight = lin.weight  # readers of the head's shape and the reduced head's rows (engine.core.lm)
        kind = f"{q.fmt} ({type(q).__name__})"
        counts[kind] = counts.get(kind, 0) + 1
        dense_b += lin.weight.numel() * lin.weight.element_size()
        quant_b += _layer_bytes(q)
        setattr(parent, attr, q)
    # The attention of a model whose every linear is batch-invariant is switched by engine.kernels.accelerate.
    return QuantReport(weights, counts, dense_b, quant_b, tuple(notes))


def weights_of(model: torch.nn.Module) -> str:
    """The weights path a model was loaded on ('dense' unless `quantize_model` ran)."""
    return getattr(model, "speclab_weights", "dense")
