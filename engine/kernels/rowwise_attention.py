"""Batch-invariant attention for the quantized path: each query row of a short forward is computed alone,
on exactly the keys it may see, by the same call an autoregressive step makes.

Why: greedy speculative decoding equals autoregressive decoding only if the target's logits at a
position do not depend on how many positions were computed in the same forward. On the quantized path
every linear layer is batch-invariant (engine/kernels/qgemm.c computes each row the same way for any M),
RMSNorm, RoPE and the residual adds are per row; what is left is attention, whose fused kernel blocks a
k-row query differently from a one-row query, so the two round differently (seen: 2 of 30 greedy runs
diverged after a near-tie). Here a forward of q ≤ MAX_ROWS rows under a plain causal mask runs row i as

    out_i = softmax(q_i K[:n]ᵀ · scale) V[:n],   n = L − q + i + 1      (L keys in the cache, no mask)

— the very operations (shapes, kernels, no mask) that the autoregressive step at that position runs, so the
outputs are bit-identical. Written out (two matmuls and a float32 softmax, the query heads grouped onto their
key-value head) rather than through torch's fused SDPA, whose single-query path cost 0.4 ms a layer here
(11 ms of an 81 ms step of the 1.5B target). In bf16 where our kernels run (engine.kernels.dense_kernel), the
same rule runs in one C call per layer (float32 scores and sums): torch's small bf16 matmuls cost ~135 µs
each here, ~22 ms of a 3-row verify of the 1.5B target. Anything else (a long prefill, a tree mask, a padded batch) goes to torch's
SDPA unchanged: prefills are shared by both runs, and tree verification is not claimed exact here.

Registered as the transformers attention implementation "speclab_rowwise" (`use_rowwise(model)`).
"""

from __future__ import annotations

import torch

from engine.kernels import dense_kernel

NAME = "speclab_rowwise"
MAX_ROWS = 32  # a verify of up to 31 drafts; a longer forward is a prefill
_registered = False


def _plain_causal(mask: torch.Tensor | None, q: int, kv: int) -> bool:
    """True when `mask` is None or the causal pattern of q rows ending at key kv − 1 (no padding)."""
    if mask is None:
        return True
    if mask.dim() != 4 or mask.shape[0] != 1 or mask.shape[-2:] != (q, kv):
        return False
    allowed = mask[0, 0] if mask.dtype == torch.bool else mask[0, 0] == 0
    want = torch.ones(q, kv, dtype=torch.bool, device=mask.device).tril(kv - q)
    return bool(torch.equal(allowed, want))


def rowwise_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """query [B, H, q, D], key/value [B, Hkv, L, D] → ([B, q, H, D], None), as transformers expects."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    b, h, q, _ = query.shape
    kv = key.shape[2]
    if b != 1 or q > MAX_ROWS or dropout or not _plain_causal(attention_mask, q, kv):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    hkv, d = key.shape[1], query.shape[-1]
    scale = scaling if scaling is not None else d ** -0.5
    fast = dense_kernel.attention(query, key, value, scale)  # the same row-by-row rule in one C call (bf16)
    if fast is not None:
        return fast, None
    k, v = key[0], value[0]  # [Hkv, L, D]
    rows = []
    for i in range(q):
        n = kv - q + i + 1
        qg = query[0, :, i].reshape(hkv, h // hkv, d)  # the query heads of each key-value head
        w = torch.softmax(torch.matmul(qg, k[:, :n].transpose(1, 2)).float() * scale, dim=-1).to(v.dtype)
        rows.append(torch.matmul(w, v[:, :n]).reshape(h, d))  # [H, D]
    return torch.stack(rows, dim=0)[None].contiguous(), None  # [1, q, H, D]


def register() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(NAME, rowwise_attention)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])  # the masks SDPA gets
    _registered = True


def use_rowwise(model: torch.nn.Module) -> None:
    """Switch a loaded transformers model to the batch-invariant attention."""
    register()
    model.config._attn_implementation = NAME
    for m in model.modules():  # sub-configs some models keep per layer
        cfg = getattr(m, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = NAME
