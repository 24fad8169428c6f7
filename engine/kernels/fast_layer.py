"""A lean decoder-layer forward for short forwards of Llama / Qwen2-shaped models on our kernels (the bf16
GEMV, or the quantized qgemm): one fused q|k|v product, one fused gate|up product, the row-wise attention
kernel, and nothing else between.

    use_dense_kernel(model) -> int    route a bf16 model onto our kernels: every linear the kernel takes, the
                                      row-wise attention, and these layers (how many linears)
    use_fast_layers(model) -> int     patch each decoder layer that has the shape and whose projections all run on
                                      one of our kernels (how many; engine.kernels.accelerate calls it for a
                                      quantized model whose every linear is on qgemm); a forward of more
                                      than dense_kernel.MAX_ROWS rows, a batch, a padded or tree mask, or
                                      anything unexpected runs the layer's own transformers forward

A Llama / Qwen2 layer on either kernel goes further where it can (`_fusable`): the C layer of fused_layer.h — one
call (`speclab_layer`) where the KV cache grows in place (engine.core.kv_cache: the call writes the new keys and
values into its buffer and attends there), else two calls around the attention (norm₁, q|k|v, rope; then W_o,
the residual, norm₂, gate|up, silu·up, W_down, the residual) — one parallel region a call instead of ~25 torch
ops and five kernel wake-ups (`SPECLAB_LAYER_CALLS=3` keeps the two calls; engine.kernels.fast_decoder goes on
to one call for every layer of a step). It is batch-invariant (lossless greedy
speculation holds) but not bit-identical to the transformers layer: its norms sum in row order
(tests/unit/kernels/test_fused.py). `SPECLAB_FUSED_LAYER=0` (or `FUSED[0] = False`) keeps the lean Python layer below.

Per layer, x the layer's input [1, q, d] (q ≤ MAX_ROWS rows after a cached prefix):

    h   = x + W_o · attn(rope(W_qkv · norm₁(x) + b_qkv))      W_qkv = [W_q; W_k; W_v] (rows stacked)
    out = h + W_down · (silu(g) ⊙ u),   [g; u] = W_gu · norm₂(h)                W_gu = [W_gate; W_up]

Why (profiled): on a 2-core CPU the 0.5B draft's forward was ~45 ms of which ~14 ms were not weight reads but Python and
small ops between them — ten module calls, seven kernel calls and two dozen tensor ops per layer
(docs/log/2026-12-05-dense-kernel.md). Fusing halves the kernel calls and skips the module machinery; the
norms, rope and activation are the model's own functions, so nothing is re-implemented.

Exact: our kernels compute each output row from its own weight row alone (bf16_kernels.c, qgemm.c), so a row of the
fused product is bit-identical to the same row of the separate products, and the attention is the same
kernel call; the patched layer returns the bits the unpatched one does (tests/unit/kernels/test_fast_layer.py).
The fused weights are one buffer, and each projection's weight (or packed q, s, mn) becomes a view of its rows:
no extra memory. Measured on the quantized path (a 2-core Zen 1 EPYC, AVX2): see docs/log/2026-12-06-avx2-kernels-and-quantized-fast-layers.md.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import types
from typing import Callable

import torch

from engine.kernels import dense_kernel, fused, rope_table
from engine.kernels.rowwise_attention import _plain_causal, rowwise_attention, use_rowwise

PROJECTIONS = (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")), ("mlp", ("gate_proj", "up_proj", "down_proj")))


def _kind(lin) -> str | None:
    """'dense' for a bf16 nn.Linear our bf16 kernel takes, 'qgemm' for a linear on our quantized kernel."""
    if isinstance(lin, torch.nn.Linear):
        return "dense" if dense_kernel.fits(lin.weight) else None
    from engine.kernels.qkernel import QGemmLinear

    return "qgemm" if isinstance(lin, QGemmLinear) else None


def _fits(layer: torch.nn.Module) -> str | None:
    """The kind ('dense' | 'qgemm') every projection of `layer` runs on, or None (no lean forward)."""
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    if attn is None or mlp is None or not hasattr(layer, "input_layernorm") or not hasattr(layer, "post_attention_layernorm"):
        return None
    kinds = {_kind(getattr(getattr(layer, owner), n, None)) for owner, names in PROJECTIONS for n in names}
    if len(kinds) != 1 or None in kinds:
        return None
    cfg = getattr(attn, "config", None)
    rope = getattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb", None)
    ok = (cfg is not None and rope is not None and getattr(attn, "sliding_window", None) is None
          and hasattr(attn, "layer_idx") and hasattr(attn, "head_dim") and hasattr(mlp, "act_fn")
          and attn.k_proj.out_features == attn.v_proj.out_features)
    return kinds.pop() if ok else None


def _fuse(lins: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One contiguous [Σ N_i, K] weight (and bias) of `lins`; each Linear's weight becomes a view of its rows."""
    w = torch.cat([lin.weight.detach() for lin in lins])
    has_bias = [lin.bias is not None for lin in lins]
    b = None
    if any(has_bias):
        b = torch.cat([lin.bias.detach() if lin.bias is not None else lin.weight.new_zeros(lin.weight.shape[0])
                       for lin in lins])
    row = 0
    for lin in lins:
        n = lin.weight.shape[0]
        lin.weight = torch.nn.Parameter(w[row:row + n], requires_grad=False)
        if lin.bias is not None:
            lin.bias = torch.nn.Parameter(b[row:row + n], requires_grad=False)
        row += n
    return w, b


def _q_parts(lins: list) -> tuple[list[tuple], torch.Tensor | None]:
    """The packed row segments [(rows, bits, q, s, mn), …] of `lins` stacked along N, and their bias (bf16, zeros
    where a linear has none; None where none has one). Linears of one format are stacked into one segment and
    each linear's packed buffers become views of its rows (no extra memory); mixed formats (a GGUF's Q6_K v_proj
    beside Q4_K q and k) keep a segment each."""
    if len({lin.bits for lin in lins}) > 1:
        segs = [seg for lin in lins for seg in _q_parts([lin])[0]]
    elif len(lins) == 1:
        segs = [(lins[0].out_features, lins[0].bits, lins[0].q, lins[0].s, lins[0].mn)]
    else:
        q, s, mn = (torch.cat([getattr(lin, k) for lin in lins]) for k in ("q", "s", "mn"))
        row = 0
        for lin in lins:
            n = lin.out_features
            lin.q, lin.s, lin.mn = q[row:row + n], s[row:row + n], mn[row:row + n]
            row += n
        segs = [(row, lins[0].bits, q, s, mn)]
    bias = None
    if any(lin.bias is not None for lin in lins):
        bias = torch.cat([lin.bias.detach() if lin.bias is not None else torch.zeros(lin.out_features, dtype=torch.bfloat16)
                          for lin in lins])
    return segs, bias


def _q_product(lins: list) -> Callable[[torch.Tensor], torch.Tensor]:
    """x [M, K] bf16 → [x Ŵ_1ᵀ + b_1 | x Ŵ_2ᵀ + b_2 | …] on our quantized kernel (engine.kernels.qkernel), one
    call per segment of `_q_parts`. Bits: the kernel computes each row from its own weight row alone, and the bias
    is added in bf16 as QGemmLinear.forward adds it."""
    from engine.kernels import qkernel

    segs, bias = _q_parts(lins)

    def product(x: torch.Tensor) -> torch.Tensor:
        ys = [qkernel.qgemm(x, q, s, mn, bits) for _, bits, q, s, mn in segs]
        y = ys[0] if len(ys) == 1 else torch.cat(ys, dim=-1)
        return y if bias is None else y + bias
    product.parts = (segs, bias)
    return product


def _products(layer: torch.nn.Module, kind: str) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The layer's four products, x [q, K] bf16 → y [q, N] bf16 with bias: qkv (fused), o, gu (fused), down."""
    attn, mlp = layer.self_attn, layer.mlp
    groups = {"qkv": [attn.q_proj, attn.k_proj, attn.v_proj], "o": [attn.o_proj],
              "gu": [mlp.gate_proj, mlp.up_proj], "down": [mlp.down_proj]}
    if kind == "qgemm":
        return {k: _q_product(lins) for k, lins in groups.items()}
    layer._speclab_qkv, layer._speclab_gu = _fuse(groups["qkv"]), _fuse(groups["gu"])
    w = {"qkv": layer._speclab_qkv, "gu": layer._speclab_gu, "o": (attn.o_proj.weight, attn.o_proj.bias),
         "down": (mlp.down_proj.weight, mlp.down_proj.bias)}
    return {k: functools.partial(dense_kernel.bgemv, w=wb[0], b=wb[1]) for k, wb in w.items()}


_mask_memo: list = [None, None, False]  # (mask object, (q, kv), plain causal?): one check per forward, not per layer


def _plain(mask, q: int, kv: int) -> bool:
    if mask is None:
        return True
    if _mask_memo[0] is mask and _mask_memo[1] == (q, kv):
        return _mask_memo[2]
    ok = _plain_causal(mask, q, kv)
    _mask_memo[:] = [mask, (q, kv), ok]
    return ok


def _takes(self, hidden_states, attention_mask, cache, position_embeddings) -> bool:
    """Whether the lean forwards take this call: one sequence of ≤ MAX_ROWS bf16 rows after a cached prefix, a
    plain causal mask, no grad (anything else runs the layer's own transformers forward)."""
    b, q, _ = hidden_states.shape
    return not (b != 1 or q > dense_kernel.MAX_ROWS or cache is None or position_embeddings is None
                or hidden_states.dtype != torch.bfloat16 or torch.is_grad_enabled()
                or not _plain(attention_mask, q, cache.get_seq_length(self.self_attn.layer_idx) + q))


def _heads(self, qkv: torch.Tensor, q: int):
    """[q|k|v] rows [q, N] → query, key and value heads [1, H, q, hd] (views)."""
    hd, (nq, nkv) = self.self_attn.head_dim, self._speclab_heads
    qs, ks, vs = qkv.split((nq * hd, nkv * hd, nkv * hd), dim=-1)
    return (qs.view(1, q, nq, hd).transpose(1, 2), ks.reshape(1, q, nkv, hd).transpose(1, 2),
            vs.reshape(1, q, nkv, hd).transpose(1, 2))


def _attend(self, qs, ks, vs, cache) -> torch.Tensor:
    """Append k, v to the cache and attend, row by row: the heads' outputs concatenated, [q, H·hd]."""
    attn = self.self_attn
    ks, vs = cache.update(ks, vs, attn.layer_idx)
    o = dense_kernel.attention(qs, ks, vs, attn.scaling)
    if o is None:  # a cache layout the kernel does not take: the same rule in torch
        o, _ = rowwise_attention(attn, qs, ks, vs, None, scaling=attn.scaling)
    return o.reshape(qs.shape[2], -1)


def _fast_forward(self, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                  position_embeddings=None, **kwargs):
    if cache is None:
        cache = kwargs.get("past_key_values")
    if not _takes(self, hidden_states, attention_mask, cache, position_embeddings):
        return self._speclab_slow(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                  cache=cache, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    b, q, d = hidden_states.shape
    mm = self._speclab_mm
    qs, ks, vs = _heads(self, mm["qkv"](self.input_layernorm(hidden_states).reshape(q, d)), q)
    cos, sin = position_embeddings
    qs, ks = self._speclab_rope(qs, ks, cos, sin)
    h = hidden_states + mm["o"](_attend(self, qs, ks, vs, cache)).view(b, q, d)
    y = self.post_attention_layernorm(h).reshape(q, d)
    g, u = mm["gu"](y).split(self._speclab_inter, dim=-1)
    return h + mm["down"](self.mlp.act_fn(g) * u).view(b, q, d)


# layers take fused_layer.h where they can; SPECLAB_FUSED_LAYER=0 keeps the lean Python layer (the transformers
# layer's bits on our kernels), and tests switch it off to hold that layer to them
FUSED = [os.environ.get("SPECLAB_FUSED_LAYER", "1") != "0"]
# with a growing cache the C layer is one call (speclab_layer: the cache append and the attention inside);
# SPECLAB_LAYER_CALLS=3 keeps it in three (layer_in, attention, layer_out), and tests compare the two
ONE_CALL = [os.environ.get("SPECLAB_LAYER_CALLS", "1") != "3"]


def _fusable(layer: torch.nn.Module) -> bool:
    """A Llama / Qwen2 layer the C layer (fused_layer.h) computes as transformers does: RMS norms, the
    rotate-half rope, silu."""
    attn, mlp = layer.self_attn, layer.mlp
    mod = type(attn).__module__
    n1, n2 = layer.input_layernorm, layer.post_attention_layernorm
    return (FUSED[0] and mod.endswith((".modeling_llama", ".modeling_qwen2"))
            and all(hasattr(n, "variance_epsilon") and getattr(n, "weight", None) is not None
                    and n.weight.dtype == torch.bfloat16 and n.weight.shape == (attn.q_proj.in_features,)
                    for n in (n1, n2))
            and getattr(getattr(mlp, "config", None), "hidden_act", None) == "silu"
            and attn.head_dim % 16 == 0 and attn.head_dim <= 512 and hasattr(attn, "scaling"))


def _fused_weights(layer: torch.nn.Module, kind: str) -> dict | None:
    """The C layer's kernel module and weight handles for `layer` (its products already built by `_products`),
    or None where that library lacks the layer, a product has more than three packed segments or is too wide."""
    attn, mlp = layer.self_attn, layer.mlp
    if kind == "dense":
        mod = dense_kernel
        wb = {"qkv": layer._speclab_qkv, "gu": layer._speclab_gu, "o": (attn.o_proj.weight, attn.o_proj.bias),
              "down": (mlp.down_proj.weight, mlp.down_proj.bias)}
        handles = {k: (w.data_ptr(), b) for k, (w, b) in wb.items()}
        keep = []
    else:
        from engine.kernels import qkernel

        mod = qkernel
        parts = {k: f.parts for k, f in layer._speclab_mm.items()}
        widest = max(attn.q_proj.in_features, attn.o_proj.in_features, mlp.down_proj.in_features)
        if any(len(segs) > 3 for segs, _ in parts.values()) or widest > qkernel.MAX_K:
            return None  # qgemm.c's per-call scale table holds K ≤ MAX_K; speclab_qgemm refuses wider too
        keep = [fused.QWeight.of(segs) for segs, _ in parts.values()]
        handles = {k: (ctypes.addressof(w), parts[k][1]) for k, w in zip(parts, keep)}
    if mod._lib is None or not hasattr(mod._lib, "speclab_layer_in"):
        return None
    n1, n2 = layer.input_layernorm, layer.post_attention_layernorm
    norms = {"n1": (n1.weight.detach().contiguous(), float(n1.variance_epsilon)),
             "n2": (n2.weight.detach().contiguous(), float(n2.variance_epsilon))}
    one = None
    hd = attn.head_dim
    if hasattr(mod._lib, "speclab_layer") and hd % 32 == 0:  # speclab_layer's attention rows: 32-wide steps
        one = fused.Layer(D=attn.q_proj.in_features, nq=attn.q_proj.out_features // hd,
                          nkv=attn.k_proj.out_features // hd, hd=hd, I=mlp.gate_proj.out_features,
                          eps1=norms["n1"][1], eps2=norms["n2"][1], scale=float(attn.scaling),
                          n1=norms["n1"][0].data_ptr(), n2=norms["n2"][0].data_ptr())
        for key in ("qkv", "o", "gu", "down"):
            setattr(one, "w" + key, handles[key][0])
            setattr(one, "b" + key, fused._ptr(handles[key][1]))
    # the library's module, not the library: it is looked up at each call, as the kernels' other callers do, so
    # the overhead probe's clock (engine.bench.overhead) sees these calls too
    return {"mod": mod, **handles, "keep": keep, "n_qkv": attn.q_proj.out_features + 2 * attn.k_proj.out_features,
            **norms, "one": one}


def cache_room(cache, idx: int, q: int, nkv: int, hd: int):
    """(cache layer, key buffer, value buffer, first free row) where the layer's cache grows in place
    (engine.core.kv_cache.GrowingLayer.reserve) in the layout speclab_layer writes; else None."""
    layers = getattr(cache, "layers", None)
    lay = layers[idx] if layers is not None and idx < len(layers) else None
    room = lay.reserve(q) if hasattr(lay, "reserve") else None
    if room is None:
        return None
    k, v, past = room
    if (k.dtype != torch.bfloat16 or v.dtype != torch.bfloat16 or k.shape[:2] != (1, nkv) or k.shape[-1] != hd
            or k.stride()[2:] != (hd, 1) or v.stride() != k.stride() or k.device.type != "cpu"):
        return None
    return lay, k, v, past


def _fused_forward(self, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                   position_embeddings=None, **kwargs):
    """The layer in two C calls around the attention (fused_layer.h): norm₁, q|k|v and rope; then W_o, the
    residual, norm₂, gate|up, silu·up, W_down and the residual. Same guards as `_fast_forward`."""
    if cache is None:
        cache = kwargs.get("past_key_values")
    if (not _takes(self, hidden_states, attention_mask, cache, position_embeddings)
            or position_embeddings[0].dtype != torch.bfloat16):
        return self._speclab_slow(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                  cache=cache, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    b, q, d = hidden_states.shape
    hd, (nq, nkv) = self.self_attn.head_dim, self._speclab_heads
    x = hidden_states.reshape(q, d).contiguous()
    cos, sin = position_embeddings
    f = self._speclab_fused
    room = cache_room(cache, self.self_attn.layer_idx, q, nkv, hd) if (f["one"] is not None and ONE_CALL[0]) else None
    if room is not None:
        lay, k, v, past = room
        out = fused.layer(f["mod"]._lib, f["one"], x, cos.reshape(q, hd).contiguous(), sin.reshape(q, hd).contiguous(),
                          k, v, past)
        lay.advance(q)
        return out.view(b, q, d)
    qkv = fused.layer_in(f["mod"]._lib, x, f["n1"], *f["qkv"], f["n_qkv"], (nq, nkv, hd),
                         cos.reshape(q, hd).contiguous(), sin.reshape(q, hd).contiguous())
    o = _attend(self, *_heads(self, qkv, q), cache).contiguous()
    out = fused.layer_out(f["mod"]._lib, x, o, f["o"], f["n2"], f["gu"], f["down"], self._speclab_inter)
    return out.view(b, q, d)


def use_fast_layers(model: torch.nn.Module) -> int:
    """Patch every decoder layer of `model` that has the Llama / Qwen2 shape and whose projections our kernel
    takes (use_dense_kernel calls it); returns how many."""
    if dense_kernel.available() is not None:
        return 0
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers = getattr(decoder, "layers", None) or []
    n = 0
    for layer in layers:
        kind = None if "forward" in layer.__dict__ else _fits(layer)
        if kind is None:
            continue
        attn, mlp = layer.self_attn, layer.mlp
        layer._speclab_heads = (attn.q_proj.out_features // attn.head_dim, attn.k_proj.out_features // attn.head_dim)
        layer._speclab_inter = mlp.gate_proj.out_features
        layer._speclab_mm = _products(layer, kind)
        layer._speclab_rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        layer._speclab_slow = layer.forward
        layer._speclab_fused = _fused_weights(layer, kind) if _fusable(layer) else None
        fused_ = layer._speclab_fused is not None
        layer.forward = types.MethodType(_fused_forward if fused_ else _fast_forward, layer)
        n += 1
    if n:
        # the layers' bits are batch-invariant only if their cos / sin are: one table, every forward (rope_table)
        rope_table.use_rope_table(model)
    return n


def _kernel_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return dense_kernel.linear(x, self.weight, self.bias)


def use_dense_kernel(model: torch.nn.Module) -> int:
    """Route every bf16 nn.Linear of `model` the kernel takes through it, the attention through the
    batch-invariant row-wise one and the decoder layers through `use_fast_layers`; returns how many linears
    (0, and nothing changed, where the kernel does not run here or no linear fits). Marks the model
    `speclab_dense_kernel = True` when it did (dense_kernel.kernel_of)."""
    if dense_kernel.available() is not None:
        return 0
    lins = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and "forward" not in m.__dict__
            and dense_kernel.fits(m.weight) and (m.bias is None or m.bias.dtype == torch.bfloat16)]
    if not lins:
        return 0
    for m in lins:
        m.forward = types.MethodType(_kernel_forward, m)
    if hasattr(model, "config"):  # a transformers model (a bare Linear has no attention)
        use_rowwise(model)
        use_fast_layers(model)  # fused q|k|v and gate|up, no module machinery between kernels (same bits)
    model.speclab_dense_kernel = True
    return len(lins)
