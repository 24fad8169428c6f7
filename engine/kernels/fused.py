"""The fused decoder layer's two C calls (engine/kernels/fused_layer.h) on either kernel library: the dense bf16
builds (weights: bf16 [N, K] arrays) or qgemm (weights: `QWeight`, up to three packed row segments).

    ARGTYPES                          ctypes signatures of speclab_layer_in / speclab_layer_out (each library
                                      declares them with its own entry points)
    QWeight.of(segments) -> QWeight   the C struct qweight of one product: [(rows, bits, q, s, mn), …]
    layer_in(lib, x, norm, w, b, heads, cos, sin) -> qkv       norm₁, [q|k|v] = xn·Wᵀ + b, rope on q and k
    layer_out(lib, x, a, o, norm, gu, down, inter) -> out      W_o, residual, norm₂, gate|up, silu·up, W_down, residual
    Layer(...)                        the C struct fl_layer: one layer's shapes, norms and weight handles, built once
    layer(lib, ly, x, cos, sin, k, v, past) -> out              the whole layer in one call: the two above, the
                                      cache append into k, v [1, nkv, cap, hd] at row `past`, and the attention
    decoder(lib, lys, ks, vs, x, cos, sin, past) -> out         every layer in one call (engine.kernels.fast_decoder)
    Tail(...)                         the C struct fl_tail: the final norm and the output embedding's handle
    decoder_head(lib, lys, ptrs, x, cos, sin, past, tail) -> (normed, logits)   every layer, the final norm and
                                      the head's product in one call
    rms(lib, x, weight, eps) -> out   the final norm alone, with the bits decoder_head gives it
    attention_split(lib, q, k, v, past, nkv, scale, threads) -> out   the AVX-512 builds' attention on its own
                                      (attn_split.h; None on a build without it): what their layers run

A weight handle is an int (a data pointer, or the address of a QWeight the caller keeps alive); `norm` is
(weight, eps); o, gu, down are (handle, bias or None); gu's rows are gate then up, `inter` rows each.
"""

from __future__ import annotations

import ctypes

import torch

_P, _I, _F = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
ARGTYPES = {
    "speclab_layer_in": [_I, _I, _P, _P, _F, _I, _P, _P, _I, _I, _I, _P, _P, _P, _I],
    "speclab_layer_out": [_I, _I, _P, _P, _I, _P, _P, _P, _F, _I, _P, _P, _P, _P, _P, _I],
    "speclab_layer": [_P, _I, _P, _P, _P, _P, _P, ctypes.c_longlong, _I, _P, _I],
    "speclab_decoder": [_I, _P, _P, _P, _P, _I, _P, _P, _P, _I, _P, _I],
    "speclab_decoder_head": [_I, _P, _P, _P, _P, _I, _P, _P, _P, _I, _P, _P, _P, _P, _I],
    "speclab_rms": [_I, _I, _P, _P, _F, _P],
}


class QWeight(ctypes.Structure):
    """qgemm.c's `struct qweight`: one product's rows in up to three segments of one bit width each."""

    _fields_ = [("nseg", _I), ("rows", _I * 3), ("bits", _I * 3), ("q", _P * 3), ("s", _P * 3), ("mn", _P * 3)]

    @classmethod
    def of(cls, segments: list[tuple[int, int, torch.Tensor, torch.Tensor, torch.Tensor]]) -> "QWeight":
        if not 1 <= len(segments) <= 3:
            raise ValueError(f"a fused product takes 1–3 segments, got {len(segments)}")
        w = cls()
        w.nseg = len(segments)
        for i, (rows, bits, q, s, mn) in enumerate(segments):
            if not (q.is_contiguous() and s.is_contiguous() and mn.is_contiguous()):
                raise ValueError("packed segments must be contiguous")
            w.rows[i], w.bits[i] = rows, bits
            w.q[i], w.s[i], w.mn[i] = q.data_ptr(), s.data_ptr(), mn.data_ptr()
        return w


def _ptr(t: torch.Tensor | None):
    return None if t is None else t.data_ptr()


def layer_in(lib, x: torch.Tensor, norm: tuple[torch.Tensor, float], w: int, b: torch.Tensor | None, n: int,
             heads: tuple[int, int, int], cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [M, D] bf16 → [q|k|v] [M, n] bf16 (n = (nq + 2·nkv)·head_dim), rope applied; cos, sin [M, head_dim]."""
    m, d = x.shape
    nq, nkv, hd = heads
    y = torch.empty(m, n, dtype=torch.bfloat16)
    rc = lib.speclab_layer_in(m, d, x.data_ptr(), norm[0].data_ptr(), norm[1], n, w, _ptr(b), nq, nkv, hd,
                              cos.data_ptr(), sin.data_ptr(), y.data_ptr(), torch.get_num_threads())
    if rc != 0:
        raise RuntimeError(f"speclab_layer_in refused M={m} D={d} N={n} heads={heads} (rc {rc})")
    return y


def layer_out(lib, x: torch.Tensor, a: torch.Tensor, o: tuple, norm: tuple[torch.Tensor, float], gu: tuple,
              down: tuple, inter: int) -> torch.Tensor:
    """The residual stream x [M, D] and the attention's output a [M, Da] → the layer's output [M, D] bf16."""
    m, d = x.shape
    out = torch.empty(m, d, dtype=torch.bfloat16)
    rc = lib.speclab_layer_out(m, d, x.data_ptr(), a.data_ptr(), a.shape[1], o[0], _ptr(o[1]), norm[0].data_ptr(),
                               norm[1], inter, gu[0], _ptr(gu[1]), down[0], _ptr(down[1]), out.data_ptr(),
                               torch.get_num_threads())
    if rc != 0:
        raise RuntimeError(f"speclab_layer_out refused M={m} D={d} Da={a.shape[1]} I={inter} (rc {rc})")
    return out


class Layer(ctypes.Structure):
    """fused_layer.h's `struct fl_layer`: what `layer` needs that does not change from call to call."""

    _fields_ = [("D", _I), ("nq", _I), ("nkv", _I), ("hd", _I), ("I", _I), ("eps1", _F), ("eps2", _F),
                ("scale", _F), ("n1", _P), ("n2", _P), ("wqkv", _P), ("wo", _P), ("wgu", _P), ("wdown", _P),
                ("bqkv", _P), ("bo", _P), ("bgu", _P), ("bdown", _P)]


def layer(lib, ly: Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          past: int) -> torch.Tensor:
    """x [M, D] → the layer's output [M, D] bf16, writing the M new keys / values into rows past … past + M − 1
    of the cache buffers k, v [1, nkv, cap, hd] (cap ≥ past + M; rows contiguous, heads `k.stride(1)` apart)."""
    m = x.shape[0]
    out = torch.empty(m, ly.D, dtype=torch.bfloat16)
    rc = lib.speclab_layer(ctypes.byref(ly), m, x.data_ptr(), cos.data_ptr(), sin.data_ptr(), k.data_ptr(),
                           v.data_ptr(), k.stride(1), past, out.data_ptr(), torch.get_num_threads())
    if rc != 0:
        raise RuntimeError(f"speclab_layer refused M={m} past={past} (rc {rc})")
    return out


def cache_pointers(ks: list[torch.Tensor], vs: list[torch.Tensor]) -> tuple:
    """The layers' key and value buffers ks[l], vs[l] [1, nkv, cap, hd] as `decoder` takes them: (key addresses,
    value addresses, head strides) as ctypes arrays. Valid while those buffers live (the caller keeps them)."""
    n = len(ks)
    return ((ctypes.c_void_p * n)(*[k.data_ptr() for k in ks]), (ctypes.c_void_p * n)(*[v.data_ptr() for v in vs]),
            (ctypes.c_longlong * n)(*[k.stride(1) for k in ks]))


def decoder(lib, lys, ptrs: tuple, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: int) -> torch.Tensor:
    """x [M, D] through every layer (`lys`: a ctypes array of the layers' `Layer` addresses, kept alive by the
    caller) → the last layer's output [M, D] bf16; each layer's M new keys / values written into its buffers
    (`ptrs`: `cache_pointers`) at rows past … past + M − 1, as `layer` writes them."""
    kp, vp, hs = ptrs
    n, m = len(kp), x.shape[0]
    out = torch.empty_like(x)
    rc = lib.speclab_decoder(n, lys, kp, vp, hs, m, x.data_ptr(), cos.data_ptr(), sin.data_ptr(), past,
                             out.data_ptr(), torch.get_num_threads())
    if rc != 0:
        raise RuntimeError(f"speclab_decoder refused {n} layers, M={m} past={past} (rc {rc})")
    return out


class Tail(ctypes.Structure):
    """fused_layer.h's `struct fl_tail`: the decoder's final norm (weight, eps) and the output embedding's product
    (V rows; a weight handle of the layers' library, no bias)."""

    _fields_ = [("nw", _P), ("eps", _F), ("V", _I), ("w", _P)]


def decoder_head(lib, lys, ptrs: tuple, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, past: int,
                 tail: Tail) -> tuple[torch.Tensor, torch.Tensor]:
    """`decoder`, then in the same call the final norm and the head: (normed states [M, D], logits [M, V]), both
    bf16 — the bits of `decoder`, `rms` and the library's own product (speclab_bgemv / speclab_qgemm) in turn."""
    kp, vp, hs = ptrs
    n, m = len(kp), x.shape[0]
    out, normed = torch.empty_like(x), torch.empty_like(x)
    logits = torch.empty(m, tail.V, dtype=torch.bfloat16)
    rc = lib.speclab_decoder_head(n, lys, kp, vp, hs, m, x.data_ptr(), cos.data_ptr(), sin.data_ptr(), past,
                                  out.data_ptr(), ctypes.byref(tail), normed.data_ptr(), logits.data_ptr(),
                                  torch.get_num_threads())
    if rc != 0:
        raise RuntimeError(f"speclab_decoder_head refused {n} layers, M={m} past={past} V={tail.V} (rc {rc})")
    return normed, logits


def rms(lib, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., D] bf16 → bf16(w · bf16(x / sqrt(mean(x²) + eps))) row by row, as the C layers and the decoder's
    tail compute their norms (transformers' RMSNorm up to the order of the sum of squares)."""
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty_like(x2)
    if lib.speclab_rms(x2.shape[0], x2.shape[1], x2.data_ptr(), weight.data_ptr(), eps, out.data_ptr()) != 0:
        raise RuntimeError(f"speclab_rms refused D={x2.shape[1]}")
    return out.view(x.shape)


def attention_split(lib, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int, scale: float,
                    threads: int | None = None) -> torch.Tensor | None:
    """attn_split.h's attention: q [M, nq, hd] bf16 after `past` cached rows; k, v [1, nkv, cap, hd] holding the
    past + M rows (rows contiguous, heads `k.stride(1)` apart) → [M, nq, hd] bf16, row i seeing keys 0 … past + i.
    None where the library has no such entry (the AVX2 builds run attn_row.h)."""
    f = getattr(lib, "speclab_attn_split", None)
    if f is None:
        return None
    f.restype, f.argtypes = ctypes.c_int, [_I] * 5 + [_P] * 3 + [ctypes.c_longlong, _F, _P, _I]
    q = q.contiguous()
    m, nq, hd = q.shape
    out = torch.empty_like(q)
    rc = f(m, nq, k.shape[1], hd, past, q.data_ptr(), k.data_ptr(), v.data_ptr(), k.stride(1), scale,
           out.data_ptr(), torch.get_num_threads() if threads is None else threads)
    if rc != 0:
        raise RuntimeError(f"speclab_attn_split refused M={m} nq={nq} nkv={k.shape[1]} hd={hd} past={past} (rc {rc})")
    return out
