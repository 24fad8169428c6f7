"""A lean decoder-layer forward for short forwards of Llama / Qwen2-shaped models on our bf16 kernels: one
fused q|k|v product, one fused gate|up product, the row-wise attention kernel, and nothing else between.

    use_dense_kernel(model) -> int    route a bf16 model onto our kernels: every linear the kernel takes, the
                                      row-wise attention, and these layers (how many linears)
    use_fast_layers(model) -> int     patch each decoder layer that has the shape (how many); a forward of more
                                      than dense_kernel.MAX_ROWS rows, a batch, a padded or tree mask, or
                                      anything unexpected runs the layer's own transformers forward

Per layer, x the layer's input [1, q, d] (q ≤ MAX_ROWS rows after a cached prefix):

    h   = x + W_o · attn(rope(W_qkv · norm₁(x) + b_qkv))      W_qkv = [W_q; W_k; W_v] (rows stacked)
    out = h + W_down · (silu(g) ⊙ u),   [g; u] = W_gu · norm₂(h)                W_gu = [W_gate; W_up]

Why (profiled): on a 2-core CPU the 0.5B draft's forward was ~45 ms of which ~14 ms were not weight reads but Python and
small ops between them — ten module calls, seven kernel calls and two dozen tensor ops per layer
(docs/log/2026-12-05-dense-kernel.md). Fusing halves the kernel calls and skips the module machinery; the
norms, rope and activation are the model's own functions, so nothing is re-implemented.

Exact: our kernel computes each output row from its own weight row alone (bf16_kernels.c), so a row of the
fused product is bit-identical to the same row of the separate products, and the attention is the same
kernel call; the patched layer returns the bits the unpatched one does (tests/unit/kernels/test_fast_layer.py).
The fused weights are one buffer, and each projection's weight becomes a view of its rows: no extra memory.
"""

from __future__ import annotations

import sys
import types

import torch

from engine.kernels import dense_kernel
from engine.kernels.rowwise_attention import _plain_causal, rowwise_attention, use_rowwise

PROJECTIONS = (("self_attn", ("q_proj", "k_proj", "v_proj", "o_proj")), ("mlp", ("gate_proj", "up_proj", "down_proj")))


def _fits(layer: torch.nn.Module) -> bool:
    attn, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    if attn is None or mlp is None or not hasattr(layer, "input_layernorm") or not hasattr(layer, "post_attention_layernorm"):
        return False
    for owner, names in PROJECTIONS:
        for n in names:
            lin = getattr(getattr(layer, owner), n, None)
            if not isinstance(lin, torch.nn.Linear) or not dense_kernel.fits(lin.weight):
                return False
    cfg = getattr(attn, "config", None)
    rope = getattr(sys.modules.get(type(attn).__module__), "apply_rotary_pos_emb", None)
    return (cfg is not None and rope is not None and getattr(attn, "sliding_window", None) is None
            and hasattr(attn, "layer_idx") and hasattr(attn, "head_dim") and hasattr(mlp, "act_fn")
            and attn.k_proj.weight.shape == attn.v_proj.weight.shape)


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


_mask_memo: list = [None, None, False]  # (mask object, (q, kv), plain causal?): one check per forward, not per layer


def _plain(mask, q: int, kv: int) -> bool:
    if mask is None:
        return True
    if _mask_memo[0] is mask and _mask_memo[1] == (q, kv):
        return _mask_memo[2]
    ok = _plain_causal(mask, q, kv)
    _mask_memo[:] = [mask, (q, kv), ok]
    return ok


def _fast_forward(self, hidden_states, attention_mask=None, position_ids=None, cache=None, use_cache=False,
                  position_embeddings=None, **kwargs):
    if cache is None:
        cache = kwargs.get("past_key_values")
    b, q, d = hidden_states.shape
    if (b != 1 or q > dense_kernel.MAX_ROWS or cache is None or position_embeddings is None
            or hidden_states.dtype != torch.bfloat16 or torch.is_grad_enabled()
            or not _plain(attention_mask, q, cache.get_seq_length(self.self_attn.layer_idx) + q)):
        return self._speclab_slow(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                  cache=cache, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    attn, mlp = self.self_attn, self.mlp
    hd, (nq, nkv) = attn.head_dim, self._speclab_heads
    x = self.input_layernorm(hidden_states).reshape(q, d)
    qkv = dense_kernel.bgemv(x, self._speclab_qkv[0], self._speclab_qkv[1])
    qs, ks, vs = qkv.split((nq * hd, nkv * hd, nkv * hd), dim=-1)
    qs = qs.view(1, q, nq, hd).transpose(1, 2)
    ks = ks.view(1, q, nkv, hd).transpose(1, 2)
    vs = vs.reshape(1, q, nkv, hd).transpose(1, 2)
    cos, sin = position_embeddings
    qs, ks = self._speclab_rope(qs, ks, cos, sin)
    ks, vs = cache.update(ks, vs, attn.layer_idx)
    o = dense_kernel.attention(qs, ks, vs, attn.scaling)
    if o is None:  # a cache layout the kernel does not take: the same rule in torch
        o, _ = rowwise_attention(attn, qs, ks, vs, None, scaling=attn.scaling)
    h = hidden_states + dense_kernel.bgemv(o.reshape(q, nq * hd), attn.o_proj.weight, attn.o_proj.bias).view(b, q, d)
    y = self.post_attention_layernorm(h).reshape(q, d)
    g, u = dense_kernel.bgemv(y, self._speclab_gu[0], self._speclab_gu[1]).split(self._speclab_inter, dim=-1)
    return h + dense_kernel.bgemv(mlp.act_fn(g) * u, mlp.down_proj.weight, mlp.down_proj.bias).view(b, q, d)


def use_fast_layers(model: torch.nn.Module) -> int:
    """Patch every decoder layer of `model` that has the Llama / Qwen2 shape and whose projections our kernel
    takes (use_dense_kernel calls it); returns how many."""
    if dense_kernel.available() is not None:
        return 0
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers = getattr(decoder, "layers", None) or []
    n = 0
    for layer in layers:
        if "forward" in layer.__dict__ or not _fits(layer):
            continue
        attn, mlp = layer.self_attn, layer.mlp
        layer._speclab_heads = (attn.q_proj.weight.shape[0] // attn.head_dim, attn.k_proj.weight.shape[0] // attn.head_dim)
        layer._speclab_inter = mlp.gate_proj.weight.shape[0]
        layer._speclab_qkv = _fuse([attn.q_proj, attn.k_proj, attn.v_proj])
        layer._speclab_gu = _fuse([mlp.gate_proj, mlp.up_proj])
        layer._speclab_rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
        layer._speclab_slow = layer.forward
        layer.forward = types.MethodType(_fast_forward, layer)
        n += 1
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
