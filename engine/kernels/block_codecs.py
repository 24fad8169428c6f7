"""GGUF block formats in torch: llama.cpp's de-quantisers (the reference qgemm.c is tested against) and plain
round-to-nearest encoders (for tests of the layouts; llama.cpp searches better scales).

    block_unpack(blocks, bits) -> Ŵ          Q4_K: (d·sc)·q − dmin·m;  Q5_0: d·(q − 16);  Q8_0: d·q;
                                              Q6_K: (d·sc[i / 16])·(q − 32)   — float32, as llama.cpp computes them
    q4k_pack / q50_pack / q80_pack / q6k_pack(weight) -> blocks
    q5r_pack(blocks) / as_gguf_blocks(q, bits)   Q5_0's blocks regrouped four to 88 bytes (q5_runs.h) and back
    q4kt_pack / q6kt_pack(blocks)             Q4_K's / Q6_K's blocks regrouped sixteen rows at a time (qtiles.h);
                                              back by as_gguf_blocks too

The format codes (Q4K, Q50, …) are qgemm.c's; BLOCKS is the one table of their shapes.
Worked example (Q8_0): a block whose largest-magnitude weight is −0.254 gets d = −0.254 / −127 = 0.002, and a
weight of 0.1 is stored as round(0.1 / 0.002) = 50.
"""

from __future__ import annotations

import torch

GROUP = 32
Q4K = 41  # qgemm.c's code for GGUF Q4_K blocks read verbatim
Q50, Q80 = 50, 80  # qgemm.c's codes for GGUF Q5_0 and Q8_0 blocks read verbatim
Q6K = 61  # qgemm.c's code for GGUF Q6_K blocks read verbatim (q6k_rows.h's layout; both builds)
Q5R = 55  # qgemm.c's code for Q5_0 blocks regrouped four to 88 bytes, lossless (q5_runs.h: the VNNI build, K % 128 = 0)
Q4KT = 43  # qgemm.c's code for Q4_K blocks regrouped sixteen rows at a time, lossless (qtiles.h: the AMX build, N % 16 = 0)
Q6KT = 63  # likewise Q6_K's blocks (qtiles.h: the AMX build, N % 16 = 0)
Q4K_BLOCK, Q4K_BYTES = 256, 144  # weights and bytes of one Q4_K block
# A GGUF block format read verbatim (and Q5R, Q5_0's blocks regrouped four at a time) → (its GGUF name, weights a
# block, bytes a block): the one table of their shapes
BLOCKS = {Q4K: ("Q4_K", Q4K_BLOCK, Q4K_BYTES), Q50: ("Q5_0", GROUP, 22), Q80: ("Q8_0", GROUP, 34),
          Q6K: ("Q6_K", 256, 210), Q5R: ("Q5_0", 128, 88), Q4KT: ("Q4_K", Q4K_BLOCK, Q4K_BYTES),
          Q6KT: ("Q6_K", 256, 210)}
BLOCK_FMT = {Q4K: "q4k", Q50: "q5_0", Q80: "q8_0", Q6K: "q6_k", Q5R: "q5_0", Q4KT: "q4k", Q6KT: "q6_k"}  # a GGUF block format's name in reports


def q4k_codes(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(d, dmin [N, B] float32; sc, m [N, B, 8] int; q [N, B, 8, 32] int) of Q4_K blocks [N, B·144] uint8."""
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, Q4K_BYTES)
    dd = b[..., :4].contiguous().view(torch.float16).float()  # [N, B, 2]: d, dmin
    c = b[..., 4:16].long()
    lo, hi = c[..., :4], c[..., 8:12]
    sc = torch.cat([lo & 63, (hi & 15) | ((lo >> 6) << 4)], dim=-1)  # llama.cpp's get_scale_min_k4
    m = torch.cat([c[..., 4:8] & 63, (hi >> 4) | ((c[..., 4:8] >> 6) << 4)], dim=-1)
    runs = b[..., 16:].reshape(n, -1, 4, 32).long()  # a pair of groups per 32 bytes: low nibbles, then high
    q = torch.stack([runs & 15, runs >> 4], dim=3).reshape(n, -1, 8, 32)
    return dd[..., 0], dd[..., 1], sc, m, q


def q4k_unpack(blocks: torch.Tensor) -> torch.Tensor:
    """Ŵ [N, K] (float32) of Q4_K blocks: y = (d·sc)·q − dmin·m, each product in float32 as llama.cpp computes it."""
    d, dmin, sc, m, q = q4k_codes(blocks)
    s = d[..., None] * sc.float()  # exact: an fp16 times a 6-bit integer
    mn = dmin[..., None] * m.float()
    return (s[..., None] * q.float() - mn[..., None]).reshape(blocks.shape[0], -1)


def q4k_pack(weight: torch.Tensor) -> torch.Tensor:
    """Q4_K blocks [N, K/256·144] uint8 of weight [N, K] (K % 256 = 0): per group of 32 the scale and minimum of
    its range (the minimum clipped at 0 from above, as Q4_K subtracts it), both as 6-bit codes under the block's
    fp16 d and dmin, then q rounded on the group's grid. Plain round-to-nearest: for tests of the layout."""
    w = weight.detach().float()
    n, k = w.shape
    if k % Q4K_BLOCK:
        raise ValueError(f"Q4_K needs rows of a multiple of {Q4K_BLOCK} weights, got {k}")
    g = w.reshape(n, k // Q4K_BLOCK, 8, 32)
    mins = (-g.amin(dim=3)).clamp(min=0)  # m·dmin ≥ 0
    scales = (g.amax(dim=3) + mins) / 15
    d = (scales.amax(dim=2) / 63).to(torch.float16)
    dmin = (mins.amax(dim=2) / 63).to(torch.float16)
    sc = torch.where(d.float()[..., None] > 0, scales / d.float()[..., None].clamp(min=1e-30), 0).round().clamp(0, 63).long()
    mc = torch.where(dmin.float()[..., None] > 0, mins / dmin.float()[..., None].clamp(min=1e-30), 0).round().clamp(0, 63).long()
    s = d.float()[..., None] * sc.float()
    q = ((g + (dmin.float()[..., None] * mc.float())[..., None]) / s[..., None].clamp(min=1e-30)).round().clamp(0, 15).long()
    q = torch.where(s[..., None] > 0, q, 0)
    codes = torch.cat([sc[..., :4] | ((sc[..., 4:] >> 4) << 6), mc[..., :4] | ((mc[..., 4:] >> 4) << 6),
                       (sc[..., 4:] & 15) | ((mc[..., 4:] & 15) << 4)], dim=-1).to(torch.uint8)  # [N, B, 12]
    runs = (q.reshape(n, -1, 4, 2, 32)[..., 0, :] | (q.reshape(n, -1, 4, 2, 32)[..., 1, :] << 4)).to(torch.uint8)
    head = torch.stack([d, dmin], dim=-1).view(torch.uint8)  # [N, B, 4]: d then dmin, little-endian fp16
    return torch.cat([head, codes, runs.reshape(n, -1, 128)], dim=-1).reshape(n, -1).contiguous()


def _b32(blocks: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d [N, G] float32, the block bytes after d [N, G, 20 | 32]) of Q5_0 / Q8_0 blocks [N, G·22 | G·34]."""
    b = blocks.reshape(blocks.shape[0], -1, BLOCKS[bits][2])
    return b[..., :2].contiguous().view(torch.float16)[..., 0].float(), b[..., 2:]


def q50_unpack(blocks: torch.Tensor) -> torch.Tensor:
    """Ŵ [N, K] (float32) of Q5_0 blocks: d·(q − 16), q = nibble | fifth bit from qh (llama.cpp's layout)."""
    d, rest = _b32(blocks, Q50)
    qh = rest[..., :4].long()
    bitsw = qh[..., 0] | (qh[..., 1] << 8) | (qh[..., 2] << 16) | (qh[..., 3] << 24)  # [N, G]
    nib = rest[..., 4:].long()
    q = torch.cat([nib & 15, nib >> 4], dim=-1) | (((bitsw[..., None] >> torch.arange(32)) & 1) << 4)
    return (d[..., None] * (q - 16).float()).reshape(blocks.shape[0], -1)


def q80_unpack(blocks: torch.Tensor) -> torch.Tensor:
    """Ŵ [N, K] (float32) of Q8_0 blocks: d·q, q signed."""
    d, rest = _b32(blocks, Q80)
    return (d[..., None] * rest.contiguous().view(torch.int8).float()).reshape(blocks.shape[0], -1)


def _q6k_parts(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q [N, B, 256] 0…63 in weight order, scale bytes [N, B, 16], d's bytes [N, B, 2]) of Q6_K blocks."""
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, 210)
    ql, qh = b[..., :128].long().reshape(n, -1, 2, 64), b[..., 128:192].long().reshape(n, -1, 2, 32)
    lo, hi = ql[..., :32], ql[..., 32:]
    q = torch.cat([lo & 15 | (qh & 3) << 4, hi & 15 | (qh >> 2 & 3) << 4,
                   lo >> 4 | (qh >> 4 & 3) << 4, hi >> 4 | (qh >> 6 & 3) << 4], dim=-1)  # [N, B, 2 halves, 128]
    return q.reshape(n, -1, 256), b[..., 192:208].long(), b[..., 208:].long()


def q6k_unpack(blocks: torch.Tensor) -> torch.Tensor:
    """Ŵ [N, K] (float32) of Q6_K blocks (q6k_rows.h's layout): (d·sc[i / 16])·(q − 32), d·sc exact in float32."""
    n = blocks.shape[0]
    q, sc, d = _q6k_parts(blocks)
    s = (d.to(torch.uint8).contiguous().view(torch.float16).float()
         * sc.to(torch.uint8).view(torch.int8).float())  # [N, B, 16]
    return (s[..., None] * (q.reshape(n, -1, 16, 16) - 32).float()).reshape(n, -1)


def q6k_pack(weight: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks [N, K/256·210] uint8 of weight [N, K] (K % 256 = 0): per 16 weights a scale max|w| / 32 as an
    int8 code under the block's fp16 d, q = round(w / (d·sc)) + 32 in 0…63. Plain round-to-nearest, for tests
    (llama.cpp searches better scales)."""
    w = weight.detach().float()
    n, k = w.shape
    if k % 256:
        raise ValueError(f"Q6_K needs rows of a multiple of 256 weights, got {k}")
    g = w.reshape(n, k // 256, 16, 16)
    at = g.abs().argmax(dim=3, keepdim=True)
    scale = g.gather(3, at)[..., 0] / -32  # the value of largest magnitude maps to −32, as ggml's make_qx_quants
    d = (scale.abs().amax(dim=2) / 127).to(torch.float16)
    sc = torch.where(d.float()[..., None] > 0, scale / d.float()[..., None].clamp(min=1e-30), 0).round().clamp(-127, 127)
    s = d.float()[..., None] * sc
    q = torch.where(s[..., None] != 0, g / torch.where(s != 0, s, 1)[..., None], 0).round().clamp(-32, 31).long() + 32
    return _q6k_blocks(q.reshape(n, -1, 256), sc.to(torch.int8).view(torch.uint8).long(),
                       d[..., None].contiguous().view(torch.uint8).long())


def _q6k_blocks(q: torch.Tensor, sc: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks [N, B·210] uint8 of q [N, B, 256] (0…63, in weight order), the scale bytes sc [N, B, 16] and d's
    two bytes [N, B, 2]."""
    n = q.shape[0]
    q = q.reshape(n, -1, 2, 4, 32)  # [N, B, half, part, 32]: parts are weights 0…31, 32…63, 64…95, 96…127
    ql = (q[..., 0, :] & 15 | (q[..., 2, :] & 15) << 4, q[..., 1, :] & 15 | (q[..., 3, :] & 15) << 4)
    qh = q[..., 0, :] >> 4 | (q[..., 1, :] >> 4) << 2 | (q[..., 2, :] >> 4) << 4 | (q[..., 3, :] >> 4) << 6
    parts = [torch.cat(ql, dim=-1).reshape(n, -1, 128), qh.reshape(n, -1, 64), sc.long(), d.long()]
    return torch.cat(parts, dim=-1).to(torch.uint8).reshape(n, -1).contiguous()


def q5r_pack(blocks: torch.Tensor) -> torch.Tensor:
    """Q5_0 blocks [N, G·22] (G % 4 = 0) regrouped four to 88 bytes (q5_runs.h): d₀…₃, qh bits 0–15 of each, qh bits
    16–31 of each, the four blocks' nibbles. The same bytes in another order."""
    n = blocks.shape[0]
    b = blocks.reshape(n, -1, 4, 22)
    parts = [b[..., 0:2], b[..., 2:4], b[..., 4:6], b[..., 6:]]  # d, qh low half, qh high half, nibbles
    return torch.cat([p.reshape(n, b.shape[1], -1) for p in parts], dim=-1).reshape(n, -1).contiguous()


def q4kt_pack(blocks: torch.Tensor) -> torch.Tensor:
    """Q4_K blocks [N, B·144] (N % 16 = 0) regrouped sixteen rows at a time (qtiles.h): per unit of sixteen rows
    and block, the rows' four head dwords (d | dmin, w0, w1, w2) dword by dword, then per run of 32 nibble bytes and
    each 4 of them, the sixteen rows' 4 bytes. The same bytes in another order, in a tensor of the same shape."""
    n = blocks.shape[0]
    if n % 16:
        raise ValueError(f"Q4_K tiles take rows in sixteens, got {n}")
    b = blocks.reshape(n // 16, 16, -1, Q4K_BYTES)  # [U, row, B, 144]
    head = b[..., :16].reshape(n // 16, 16, b.shape[2], 4, 4).permute(0, 2, 3, 1, 4)  # [U, B, dword, row, 4]
    runs = b[..., 16:].reshape(n // 16, 16, b.shape[2], 4, 8, 4).permute(0, 2, 3, 4, 1, 5)  # [U, B, run, k4, row, 4]
    unit = torch.cat([head.reshape(n // 16, b.shape[2], -1), runs.reshape(n // 16, b.shape[2], -1)], dim=-1)
    return unit.reshape(n, -1).contiguous()


def q6kt_pack(blocks: torch.Tensor) -> torch.Tensor:
    """Q6_K blocks [N, B·210] (N % 16 = 0) regrouped sixteen rows at a time (qtiles.h): per unit of sixteen rows and
    block, the rows' d (fp16), the scale bytes sub-block by sub-block, then per pair p of sub-blocks 256 bytes of
    low nibbles (sub-block 2p low, 2p+1 high) and per four sub-blocks 256 bytes of top bit pairs (sub-block 4r+s at
    bits 2s, 2s+1), each 256 bytes in a tile's B order [k4][row][4]. The same information in the same 210 bytes a row
    and block (not the same bytes: the weights' bits are regrouped)."""
    n = blocks.shape[0]
    if n % 16:
        raise ValueError(f"Q6_K tiles take rows in sixteens, got {n}")
    q, sc, d = _q6k_parts(blocks)
    U, B = n // 16, q.shape[1]
    q = q.reshape(U, 16, B, 16, 4, 4).permute(0, 2, 3, 4, 1, 5)  # [U, B, sub-block, k4, row, 4]
    ql = (q[:, :, 0::2] & 15) | (q[:, :, 1::2] & 15) << 4  # [U, B, 8 pairs, k4, row, 4]
    top = (q >> 4).reshape(U, B, 4, 4, 4, 16, 4)  # [U, B, r, s, k4, row, 4]
    qh = top[:, :, :, 0] | top[:, :, :, 1] << 2 | top[:, :, :, 2] << 4 | top[:, :, :, 3] << 6
    head = [d.reshape(U, 16, B, 2).permute(0, 2, 1, 3).reshape(U, B, 32),
            sc.reshape(U, 16, B, 16).permute(0, 2, 3, 1).reshape(U, B, 256)]
    unit = torch.cat(head + [ql.reshape(U, B, 2048), qh.reshape(U, B, 1024)], dim=-1)
    return unit.to(torch.uint8).reshape(n, -1).contiguous()


def _q6kt_blocks(t: torch.Tensor) -> torch.Tensor:
    """q6kt_pack's inverse: Q6_K blocks in the GGUF's own layout."""
    n = t.shape[0]
    U = n // 16
    u = t.reshape(U, -1, 3360).long()
    B = u.shape[1]
    d = u[..., :32].reshape(U, B, 16, 2).permute(0, 2, 1, 3)  # [U, row, B, 2]
    sc = u[..., 32:288].reshape(U, B, 16, 16).permute(0, 3, 1, 2)  # [U, row, B, 16]
    ql = u[..., 288:2336].reshape(U, B, 8, 4, 16, 4)
    qh = u[..., 2336:].reshape(U, B, 4, 4, 16, 4)
    lo = torch.stack([ql & 15, ql >> 4], dim=3).reshape(U, B, 16, 4, 16, 4)  # [U, B, sub-block, k4, row, 4]
    hi = torch.stack([qh >> (2 * s) & 3 for s in range(4)], dim=3).reshape(U, B, 16, 4, 16, 4)
    q = (lo | hi << 4).permute(0, 4, 1, 2, 3, 5).reshape(n, B, 256)
    return _q6k_blocks(q, sc.reshape(n, B, 16), d.reshape(n, B, 2))


def as_gguf_blocks(q: torch.Tensor, bits: int) -> torch.Tensor:
    """A layer's blocks in the GGUF's own layout (Q5R regrouped back to Q5_0, Q4KT back to Q4_K; every other format
    as it is)."""
    if bits == Q6KT:
        return _q6kt_blocks(q)
    if bits == Q4KT:
        n = q.shape[0]
        u = q.reshape(n // 16, -1, 16 * Q4K_BYTES)  # [U, B, 2304]
        head = u[..., :256].reshape(n // 16, u.shape[1], 4, 16, 4).permute(0, 3, 1, 2, 4)  # [U, row, B, dword, 4]
        runs = u[..., 256:].reshape(n // 16, u.shape[1], 4, 8, 16, 4).permute(0, 4, 1, 2, 3, 5)  # [U, row, B, run, k4, 4]
        rows = torch.cat([head.reshape(n // 16, 16, u.shape[1], 16), runs.reshape(n // 16, 16, u.shape[1], 128)], dim=-1)
        return rows.reshape(n, -1).contiguous()
    if bits != Q5R:
        return q
    n = q.shape[0]
    r = q.reshape(n, -1, 88)
    d, lo, hi, nib = r[..., 0:8], r[..., 8:16], r[..., 16:24], r[..., 24:]
    per = [t.reshape(n, r.shape[1], 4, -1) for t in (d, lo, hi, nib)]
    return torch.cat(per, dim=-1).reshape(n, -1).contiguous()


def block_unpack(blocks: torch.Tensor, bits: int) -> torch.Tensor:
    """Ŵ [N, K] (float32) of a GGUF block format's blocks (Q4K, Q50, Q80, Q6K), as llama.cpp de-quantises them."""
    if bits == Q5R:
        return q50_unpack(as_gguf_blocks(blocks, Q5R))
    if bits in (Q4KT, Q6KT):
        return block_unpack(as_gguf_blocks(blocks, bits), {Q4KT: Q4K, Q6KT: Q6K}[bits])
    return {Q4K: q4k_unpack, Q50: q50_unpack, Q80: q80_unpack, Q6K: q6k_unpack}[bits](blocks)


def _b32_pack(weight: torch.Tensor, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(d fp16 [N, G], q int [N, G, 32] in lo…hi) of symmetric round-to-nearest per group of 32 (ggml's choice of
    d: the value of largest magnitude maps to lo, as quantize_row_q5_0 / q8_0 do)."""
    w = weight.detach().float()
    n, k = w.shape
    if k % GROUP:
        raise ValueError(f"Q5_0 / Q8_0 need rows of a multiple of {GROUP} weights, got {k}")
    g = w.reshape(n, k // GROUP, GROUP)
    at = g.abs().argmax(dim=2, keepdim=True)
    d = (g.gather(2, at)[..., 0] / lo).to(torch.float16)
    inv = torch.where(d.float() != 0, 1 / d.float().clamp(min=-3e38, max=3e38), 0)
    return d, (g * inv[..., None]).round().clamp(lo, hi).long()


def q50_pack(weight: torch.Tensor) -> torch.Tensor:
    """Q5_0 blocks [N, K/32·22] uint8 of weight [N, K]: d (fp16), qh, 16 bytes of nibbles. For tests."""
    d, q = _b32_pack(weight, -16, 15)
    q = q + 16
    n, G = d.shape
    qh = ((q >> 4) << torch.arange(32)).sum(dim=-1)  # [N, G] the fifth bits
    qh_b = torch.stack([(qh >> (8 * i)) & 255 for i in range(4)], dim=-1)
    nib = (q[..., :16] & 15) | ((q[..., 16:] & 15) << 4)
    head = d[..., None].contiguous().view(torch.uint8)  # [N, G, 2]
    return torch.cat([head, qh_b.to(torch.uint8), nib.to(torch.uint8)], dim=-1).reshape(n, G * 22).contiguous()


def q80_pack(weight: torch.Tensor) -> torch.Tensor:
    """Q8_0 blocks [N, K/32·34] uint8 of weight [N, K]: d (fp16), 32 signed bytes. For tests."""
    d, q = _b32_pack(weight, -127, 127)  # d = x_max / −127 (ggml takes |x|max / 127: either sign reads back)
    n, G = d.shape
    head = d[..., None].contiguous().view(torch.uint8)
    return torch.cat([head, q.to(torch.int8).view(torch.uint8)], dim=-1).reshape(n, G * 34).contiguous()
