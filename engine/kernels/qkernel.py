"""Our own weight-only quantized matmul (engine/kernels/qgemm.c) for x86 CPUs: built once with the system C
compiler by the install step (engine.kernels.kernel_build; else once into the user cache): an AMX build where
the CPU has AMX int8 tiles (the VNNI build's code, and its Q4_K / Q6_K products of more than eight rows on the
tiles), else an AVX-512 VNNI build, else an AVX2 build, called through ctypes on tensors' raw memory.

    available() -> str | None         None when the kernel can run here, else why not (one line)
    variant() -> str                  'amx' | 'avx512vnni' | 'avx2' (SPECLAB_QGEMM=<build> forces one)
    tiles() -> bool                   whether Q4_K and Q6_K can run on AMX tiles here (the AMX build, tile state granted)
    use_tiles() -> bool               whether Q4_K / Q6_K layers loaded now take the sixteen-row layouts (the default on
                                      the AVX-512 builds; SPECLAB_QTILES=0: as stored)
    QGemmLinear(weight, bias, bits)   4-, 6- or 8-bit weights per group of 32 inputs, asymmetric:
                                      Ŵ = s·q + mn with q ∈ 0…2^bits − 1, s and mn fp16 per (row, group)
    QGemmLinear.from_blocks(blocks, bias, bits)   a GGUF tensor's own blocks, read as the file stores them
                                      (qgemm.c's header): Q4K (Q4_K: d·sc·q − dmin·m, 4.5 bits a weight), Q50
                                      (Q5_0: d·(q − 16), 5.5 bits), Q80 (Q8_0: d·q, 8.5 bits)
    block_unpack(blocks, bits) -> Ŵ   llama.cpp's dequantize_row_* of those in torch (float32), the reference
    q4k_pack / q50_pack / q80_pack(weight) -> blocks   plain encoders, for tests (llama.cpp's own search
                                      better scales for Q4_K)

Why our own: torch's int4 / int8 CPU kernels (aten._weight_int4pack_mm_for_cpu, _weight_int8pack_mm)
stream ~8 GB/s of packed int4 on a 2-core EPYC, a third of what llama.cpp reaches on the same GGUF.
This kernel does what llama.cpp does for Q4_K × Q8_K: activations quantized to int8 per group, integer
dot products with VNNI (vpdpbusd), one scale per group (docs/log/2026-12-04-quantized-path.md).
It also makes the logits batch-invariant (see qgemm.c): a k-token verify equals k one-token steps
bit for bit, so greedy speculative decoding on this path reproduces its autoregressive output exactly.

Worked example (4-bit): a group spanning [−0.3, 1.2] has s = 0.1, mn = −0.3; a weight of 0.52 is stored
as q = round(8.2) = 8 and read back as 0.1·8 − 0.3 = 0.5.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path

import torch

from engine.kernels.dense_kernel import long_linear
from engine.kernels import fused
from engine.kernels.block_codecs import (  # noqa: F401 (the codecs are read through this module too)
    BLOCK_FMT, BLOCKS, GROUP, Q4K, Q4K_BLOCK, Q4K_BYTES, Q4KT, Q5R, Q6K, Q6KT, Q50, Q80, as_gguf_blocks, block_unpack,
    q4k_codes, q4k_pack, q4k_unpack, q4kt_pack, q5r_pack, q6k_pack, q6k_unpack, q6kt_pack, q50_pack, q50_unpack,
    q80_pack, q80_unpack)
from engine.kernels.kernel_build import BUILDS, cpu_flags, library, load_library  # cpu_flags: tests stub it here

SOURCE = Path(__file__).with_name("qgemm.c")
VARIANTS = {  # build → (CPU flags it needs, compiler flags), the first the CPU has wins (engine.kernels.kernel_build)
    name.split("-", 1)[1]: (b.needs, b.cflags) for name, b in BUILDS.items() if b.source == SOURCE.name}
BITS = (4, 6, 8, Q4K, Q50, Q80, Q6K, Q5R, Q4KT, Q6KT)  # the formats qgemm.c reads
ONLY_ON = {Q5R: ("avx512vnni", "amx"), Q4KT: ("avx512vnni", "amx"), Q6KT: ("avx512vnni", "amx")}  # layouts only some builds read (elsewhere: as stored)
BASE = {Q5R: Q50, Q4KT: Q4K, Q6KT: Q6K}  # a regrouped layout → the GGUF format it holds
TILED = {Q4K: Q4KT, Q6K: Q6KT}  # a GGUF format → its sixteen-row layout (VNNI lanes; AMX tiles past 8 rows)
MAX_K = GROUP * 512  # qgemm.c's MAXG groups: the widest input a call takes
_lib = None
_why: str | None = None
_built: str | None = None  # where the loaded library came from: 'installed' (pip install) or 'cache'
_fallback: str | None = None  # why the AMX build was passed over for the VNNI build (it did not compile here)


def variant() -> str | None:
    """The build this CPU runs (None: neither AVX-512 VNNI nor AVX2 + F16C + FMA)."""
    flags = cpu_flags()
    forced = os.environ.get("SPECLAB_QGEMM")
    for name, (need, _) in VARIANTS.items():
        if name == "amx" and _fallback:
            continue
        if (forced in (None, "", name)) and all(f in flags for f in need):
            return name
    return None


def reads(bits: int) -> bool:
    """Whether this CPU's build reads the format (`ONLY_ON`: the regrouped layouts Q5R, Q4KT and Q6KT on the AVX-512
    VNNI and AMX builds — the sixteen-row ones on vpdpbusd lanes, and past eight rows on the AMX tiles where the OS
    granted them)."""
    if bits not in ONLY_ON:
        return True
    return variant() in ONLY_ON[bits]


def tiles() -> bool:
    """Whether Q4_K and Q6_K blocks can run on AMX tiles here: the AMX build loaded and the tile state granted
    (arch_prctl)."""
    return variant() == "amx" and available() is None and bool(_lib.speclab_amx_ok())


def use_tiles() -> bool:
    """Whether a Q4_K / Q6_K layer loaded now takes the sixteen-row layouts (Q4KT, Q6KT): on the AVX-512 VNNI and AMX
    builds, unless SPECLAB_QTILES=0 keeps the blocks as stored (rows_q4k / rows_q6k).

    Why the default since 2026-12-07 (docs/log/2026-12-07-panel-on-tiles.md): a product of up to eight rows runs
    on vpdpbusd lanes (qlanes.h; every row count on the VNNI build), more rows on the AMX tiles (qtiles.h) where
    they run, the same bits either way; on the AMX Xeon measured, the 1.5B target's one-token step is the stored
    layout's (47.5–48.2 against 47.5–50.9 ms, two interleaved rounds) and its five-token forward 1.20–1.22× a step
    against 1.67–1.72×; with the VNNI build forced there (the Zen 4's code), the step 1.09× faster and the five-token
    forward 1.24–1.27× against 1.37–1.48×. Before the lanes, the tiles alone made the verify as
    flat but the step 1.31× slower (docs/log/2026-12-07-amx-int8-tiles.md), and this was an opt-in. The choice is
    made at load: every run of a loaded model — AR and speculative alike — uses the same kernel, so greedy stays
    exact."""
    return (os.environ.get("SPECLAB_QTILES", "1") != "0" and available() is None
            and variant() in ONLY_ON[Q4KT])


def available() -> str | None:
    """None when the kernel runs on this machine; else the reason (missing CPU flags, no compiler)."""
    global _lib, _why, _built, _fallback
    if _lib is not None or _why is not None:
        return _why
    if os.environ.get("SPECLAB_NO_QGEMM"):
        _why = "disabled by SPECLAB_NO_QGEMM"
        return _why
    name = variant()
    if name is None:
        missing = [f for f in VARIANTS["avx2"][0] if f not in cpu_flags()]
        _why = f"this CPU lacks {', '.join(missing) or 'the forced build ' + str(os.environ.get('SPECLAB_QGEMM'))}"
        return _why
    try:
        _lib, _built = _open(name)
    except OSError as e:
        _why = str(e).splitlines()[0]
        if name == "amx":  # a compiler without the tile instructions: the VNNI build (every format but the tile layouts)
            try:
                _lib, _built = _open("avx512vnni")
                _why, _fallback = None, f"the AMX build failed ({_why}); the AVX-512 VNNI build runs"
            except OSError as e2:
                _why = str(e2).splitlines()[0]
    return _why


def _open(name: str) -> tuple[ctypes.CDLL, str]:
    path, how = library(BUILDS[f"qgemm-{name}"])
    fns = {"speclab_qgemm": [ctypes.c_int] * 4 + [ctypes.c_void_p] * 5 + [ctypes.c_int],
           "speclab_dequant": [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4 + [ctypes.c_int], **fused.ARGTYPES}
    if name == "amx":
        fns["speclab_amx_ok"] = []
        fns["speclab_panel_tiles"] = [ctypes.c_int]
        fns["speclab_tile_panels"] = []
    if name in LONG_BUILDS:  # the AVX-512 builds: the panel, and the sixteen-row units' lanes
        fns["speclab_qt_lanes"] = [ctypes.c_int]
        fns["speclab_lane_units"] = []
        fns["speclab_qgemm_long"] = fns["speclab_qgemm"]
        fns["speclab_long"] = [ctypes.c_int]
    return load_library(path, fns), how


def built() -> str | None:
    """'installed' or 'cache' once `available()` loaded the library, else None."""
    return _built if _lib is not None else None


def pack(weight: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q packed uint8, s fp16 [N, G], mn fp16 [N, G]) of weight [N, K] (K % 32 = 0): round to nearest
    on the group's own grid between its min and max."""
    w = weight.detach().float()
    n, k = w.shape
    g = w.reshape(n, k // GROUP, GROUP)
    lo, hi = g.amin(dim=2), g.amax(dim=2)
    levels = (1 << bits) - 1
    s = ((hi - lo) / levels).to(torch.float16)
    mn = lo.to(torch.float16)
    sf = s.float().clamp(min=1e-12)  # the stored (rounded) scale, so q is chosen for what is read back
    q = torch.round((g - mn.float()[..., None]) / sf[..., None]).clamp(0, levels).to(torch.uint8)
    if bits == 4:
        q = (q[..., :16] | (q[..., 16:] << 4)).reshape(n, k // 2)
    elif bits == 6:  # qgemm.c's layout: per pair of groups 16 + 16 bytes of low nibbles, then 8 + 8 of top bits
        lo, hi = q & 0x0F, q >> 4
        nib = lo[..., :16] | (lo[..., 16:] << 4)  # [N, G, 16]
        top = hi[..., 0:8] | (hi[..., 8:16] << 2) | (hi[..., 16:24] << 4) | (hi[..., 24:32] << 6)  # [N, G, 8]
        G, even = k // GROUP, k // GROUP // 2 * 2
        parts = [torch.cat([nib[:, :even].reshape(n, even // 2, 32), top[:, :even].reshape(n, even // 2, 16)],
                           dim=2).reshape(n, even * 24)]
        if G > even:  # a last lone group: its 16 bytes of nibbles, then its 8 of top bits
            parts += [nib[:, even], top[:, even]]
        q = torch.cat(parts, dim=1)
    else:
        q = q.reshape(n, k)
    return q.contiguous(), s.contiguous(), mn.contiguous()


def _shape(q: torch.Tensor, s: torch.Tensor, bits: int) -> tuple[int, int]:
    """(N, K) of a packed weight: from its scales, or for a GGUF block format (no separate scales) its blocks."""
    if bits in BLOCKS:
        _, per, size = BLOCKS[bits]
        return q.shape[0], q.shape[1] // size * per
    return s.shape[0], s.shape[1] * GROUP


def unpack(q: torch.Tensor, s: torch.Tensor, mn: torch.Tensor, bits: int) -> torch.Tensor:
    """Ŵ [N, K] (float32) as the kernel reads it."""
    if bits in BLOCK_FMT:
        return block_unpack(q, bits)
    n, G = s.shape
    if bits == 4:
        b = q.reshape(n, G, 16)
        qq = torch.cat([b & 0x0F, b >> 4], dim=2).float()
    elif bits == 6:
        even = G // 2 * 2
        pairs = q[:, :even * 24].reshape(n, even // 2, 48)
        b = pairs[..., :32].reshape(n, even, 16)
        t = pairs[..., 32:].reshape(n, even, 8)
        if G > even:
            b = torch.cat([b, q[:, even * 24:even * 24 + 16].reshape(n, 1, 16)], dim=1)
            t = torch.cat([t, q[:, even * 24 + 16:].reshape(n, 1, 8)], dim=1)
        top = torch.cat([(t >> sh) & 3 for sh in (0, 2, 4, 6)], dim=2)  # q[0…7], q[8…15], q[16…23], q[24…31]
        qq = (torch.cat([b & 0x0F, b >> 4], dim=2) | (top << 4)).float()
    else:
        qq = q.reshape(n, G, GROUP).float()
    return (qq * s.float()[..., None] + mn.float()[..., None]).reshape(n, G * GROUP)


def _product(name: str, x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, mn: torch.Tensor, bits: int) -> torch.Tensor:
    """y [M, N] bf16 = x [M, K] bf16 · Ŵᵀ by the library's product `name` (speclab_qgemm / speclab_qgemm_long)."""
    x = x.contiguous()
    m, k = x.shape
    n, kw = _shape(q, s, bits)
    if k != kw:
        raise ValueError(f"activations of width {k} against weights of width {kw}")
    fn = getattr(_lib, name, None) if _lib is not None else None
    if fn is None:
        raise RuntimeError(f"this CPU's qgemm build ({variant()}) has no {name}")
    y = torch.empty(m, n, dtype=torch.bfloat16)
    if fn(bits, m, n, k, x.data_ptr(), q.data_ptr(), s.data_ptr(), mn.data_ptr(), y.data_ptr(), torch.get_num_threads()):
        raise RuntimeError(f"{name} refused shape M={m} N={n} K={k} ({BLOCK_FMT.get(bits, f'{bits}-bit')})")
    return y


def qgemm(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, mn: torch.Tensor, bits: int) -> torch.Tensor:
    """x [M, K] bf16 · Ŵᵀ → [M, N] bf16 on the kernel (call `available()` first)."""
    return _product("speclab_qgemm", x, q, s, mn, bits)


def qgemm_long(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, mn: torch.Tensor, bits: int) -> torch.Tensor:
    """x [M, K] bf16 · Ŵᵀ → [M, N] bf16 by the panel product (qpanel.h; a build in LONG_BUILDS): the one-row
    product's sums in another order, for a forward whose rows are cached once (`long_forward`)."""
    return _product("speclab_qgemm_long", x, q, s, mn, bits)


def dequant_bf16(q: torch.Tensor, s: torch.Tensor, mn: torch.Tensor, bits: int) -> torch.Tensor:
    """Ŵ [N, K] in bf16 on the kernel's side (a long forward's dense GEMM reads it)."""
    n, k = _shape(q, s, bits)
    out = torch.empty(n, k, dtype=torch.bfloat16)
    if _lib.speclab_dequant(bits, n, k, q.data_ptr(), s.data_ptr(), mn.data_ptr(), out.data_ptr(),
                            torch.get_num_threads()) != 0:
        raise RuntimeError(f"dequant refused shape N={n} K={k}")
    return out


# A forward of more rows than this (a prefill) de-quantises and runs the CPU's fastest GEMM, per build (None:
# never). AVX2: our integer kernel runs a prefill as fast as torch's float32 GEMM on weights already widened,
# and the de-quantise + widen costs ~40 ms per 8960×1536 weight on top — measured on a 2-core Zen 1, K = 1536,
# N = 8960: M = 75 qgemm 38.5 ms against 66.7 ms de-quantised, M = 300 152 against 168 (docs/log/
# 2026-12-06-quantized-prefill-on-avx2.md). AVX-512 VNNI: bf16 GEMM where bf16 is native, past 64 rows.
DENSE_ROWS = {"amx": 64, "avx512vnni": 64, "avx2": None}


def dense_rows() -> int | None:
    """Rows past which this CPU's build de-quantises for a long forward (`DENSE_ROWS`); None: never."""
    return DENSE_ROWS.get(variant() or "", None)


# The panel product (qpanel.h: speclab_qgemm_long, and par_gemv's panel_run in the fused layers), on the builds that
# have it, for a long forward that only caches (a prompt's prefill, a draft's catch-up: inside `long_forward`). Not
# batch-invariant against speclab_qgemm (the same sums in another order), so never a verify: a forward outside
# `long_forward` keeps the one-row product (or the de-quantised GEMM past DENSE_ROWS) as before. PANEL_ROWS per
# build: (lo, hi) — the panel for lo < rows ≤ hi (hi None: every longer forward; past hi the de-quantised GEMM);
# Q6_K (scales per 16) from 2·lo + 2 rows. Measured 2026-12-07 on a 2-core Xeon with AMX
# (docs/log/2026-12-07-panel-prefill.md), products alone on the 0.5B's and 1.5B's shapes in every format: against
# the one-row product 1.1–2.3× faster at 16 rows (Q6_K 0.68–0.74×; 0.98–1.20× at 32), 1.5–4.1× at 64; against the
# de-quantised GEMM on AMX bf16 tiles 0.83–1.28× at 64 rows (Q6_K the 0.83), 0.66–0.96× at 128, 0.48–0.67× at
# 256 (so hi = 64 there; with the panel's sums on the tiles since, 1.03–1.37× the de-quantised GEMM at 128 rows for
# a Q4_K, Q8_0 or Q5_0 product alone, whole prefills of 96–128 tokens were level with it — 0.94–1.21×, this host's
# noise, docs/log/2026-12-07-panel-on-tiles.md — so hi stays 64); against the AVX-512 bf16 GEMM (oneDNN capped to
# AVX512_CORE_BF16 on that Xeon: a proxy for the VNNI build's Zen 4, to be measured there) 2.6–3.8× at 64 to 512
# rows (so no hi). The fused layers' products (≤ 64 rows) take lo alone: hi must stay ≥ 64.
LONG_BUILDS = ("avx512vnni", "amx")
PANEL_ROWS = {"amx": (15, 64), "avx512vnni": (15, None)}
_long = threading.local()
_long_lock = threading.RLock()  # the C side's switch (speclab_long) is one per library: one prefill at a time


@contextlib.contextmanager
def long_forward():
    """Within: a quantized product of more rows than `PANEL_ROWS` allow takes the panel product — a linear's forward
    (QGemmLinear.forward) and the fused layers' products alike (speclab_long). For forwards whose outputs are cached
    once, never verified against one-row steps: HFModel.prefill."""
    with _long_lock:
        before = getattr(_long, "on", False)
        _long.on = True
        fn = getattr(_lib, "speclab_long", None) if _lib is not None and variant() in LONG_BUILDS else None
        lo = PANEL_ROWS.get(variant() or "", (None, None))[0]
        was = fn(lo if lo is not None and os.environ.get("SPECLAB_QPANEL", "1") != "0" else 0) if fn else 0
        tf = getattr(_lib, "speclab_panel_tiles", None) if fn and variant() == "amx" else None
        tiles_was = tf(int(panel_tiles())) if tf else 1
        try:
            yield
        finally:
            _long.on = before
            if fn:
                fn(was)
            if tf:
                tf(tiles_was)


def panel_tiles() -> bool:
    """Whether the panel product's integer sums run on AMX tiles here (qpanel.h's tpanel_rows: the AMX build with the
    tile state granted; the formats of groups of 32, Q6_K keeps vpdpbusd). The same bits either way; a product alone
    1.0–1.4× faster at 64–256 rows, whole prefills of 32–64 tokens 1.08–1.16× (docs/log/2026-12-07-panel-on-tiles.md).
    `SPECLAB_QPANEL_TILES=0`: vpdpbusd (a comparison arm)."""
    return tiles() and os.environ.get("SPECLAB_QPANEL_TILES", "1") != "0"


def takes_panel(rows: int, bits: int | None = None) -> bool:
    """Whether a forward of `rows` rows (of format `bits`; None: any the panel reads) takes the panel product here,
    now: inside `long_forward`, on a build with it, in its PANEL_ROWS range (`SPECLAB_QPANEL=0`: never)."""
    if not getattr(_long, "on", False) or bits == Q6KT or os.environ.get("SPECLAB_QPANEL", "1") == "0":
        return False
    lo, hi = PANEL_ROWS.get(variant() or "", (None, None))
    if lo is not None and bits == Q6K:  # scales per 16: four products a scale (par_gemv takes the same rows)
        lo = 2 * lo + 1
    return lo is not None and rows > lo and (hi is None or rows <= hi)


class QGemmLinear(torch.nn.Module):
    """y = x Ŵᵀ + b on the qgemm kernel (activations in bf16, quantized to int8 per group inside)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, bits: int,
                 packed: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None) -> None:
        super().__init__()
        if bits not in BITS:
            raise ValueError(f"qgemm takes {', '.join(map(str, BITS[:3]))}-bit weights or Q4_K / Q5_0 / Q8_0 / Q6_K "
                             f"blocks, not {bits}")
        q, s, mn = packed if packed is not None else pack(weight, bits)
        self.register_buffer("q", q)
        self.register_buffer("s", s)
        self.register_buffer("mn", mn)
        self.bits = bits
        self.fmt = BLOCK_FMT.get(bits, f"int{bits}")
        self.batch_invariant = True  # each output row is computed the same way whatever M is (qgemm.c)
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach().to(torch.bfloat16), requires_grad=False)
        self.out_features, self.in_features = _shape(q, s, bits) if packed is not None else weight.shape
        self.act_dtype = torch.bfloat16
        self.dense_rows = dense_rows()  # looked up once: variant() reads the CPU's flags

    @classmethod
    def from_blocks(cls, blocks: torch.Tensor, bias: torch.Tensor | None, bits: int = Q4K) -> "QGemmLinear":
        """The layer of a GGUF tensor's blocks, read as they are (no scales of ours: `s` and `mn` are empty):
        Q4K [N, K/256·144], Q50 [N, K/32·22], Q80 [N, K/32·34], Q6K [N, K/256·210], uint8 (a format this build
        `reads`; Q50 rows of whole groups of four blocks are regrouped to Q5R where the build reads that)."""
        if bits not in BLOCKS:
            raise ValueError(f"GGUF blocks are Q4K, Q50, Q80 or Q6K, not {bits}")
        name, per, size = BLOCKS[bits]
        if not reads(bits):
            raise ValueError(f"{name} blocks are read by the {' or '.join(ONLY_ON[bits])} build only; this CPU runs "
                             f"{variant()}")
        if blocks.dtype != torch.uint8 or blocks.dim() != 2 or blocks.shape[1] % size or blocks.shape[1] == 0:
            raise ValueError(f"{name} blocks must be uint8 [N, K/{per}·{size}], got {tuple(blocks.shape)} {blocks.dtype}")
        if bits == Q50 and reads(Q5R) and blocks.shape[1] % (4 * size) == 0:  # four blocks a step (q5_runs.h)
            blocks, bits = q5r_pack(blocks), Q5R
        elif bits in TILED and blocks.shape[0] % 16 == 0 and use_tiles():  # sixteen rows a unit on the tiles
            blocks, bits = (q4kt_pack if bits == Q4K else q6kt_pack)(blocks), TILED[bits]
        empty = torch.empty(blocks.shape[0], 0, dtype=torch.float16)
        return cls(None, bias, bits, packed=(blocks.contiguous(), empty, empty.clone()))

    @staticmethod
    def fits(weight: torch.Tensor) -> bool:
        return weight.shape[1] % GROUP == 0

    def dequantized(self) -> torch.Tensor:
        return unpack(self.q, self.s, self.mn, self.bits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, dt = x.shape, x.dtype
        x2 = x.reshape(-1, shape[-1]).to(torch.bfloat16)
        with torch.inference_mode():
            if takes_panel(x2.shape[0], self.bits):  # a prefill's rows, cached once (not a verify)
                y = qgemm_long(x2, self.q, self.s, self.mn, self.bits)
            elif self.dense_rows is not None and x2.shape[0] > self.dense_rows:  # shared by every run of a prompt: batch invariance is not at stake
                y = long_linear(x2, dequant_bf16(self.q, self.s, self.mn, self.bits))
            else:
                y = qgemm(x2, self.q, self.s, self.mn, self.bits)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], self.out_features).to(dt)
