"""A rotary embedding whose values do not depend on the call: each position's cos / sin computed once, off torch's
vector maths, and read from a table by every forward after.

    takes(rot) -> bool                       a rotary module this table stands in for (the default rope, inv_freq fixed)
    span(rot, past, q, dtype, device)        cos, sin [1, q, hd] of positions past … past + q − 1
    rows(rot, position_ids, dtype, device)   cos, sin [b, q, hd] of any positions
    use_rope_table(model) -> bool            route the decoder's rotary module through the table; True when it did

Notation (transformers' default rope, LlamaRotaryEmbedding / Qwen2RotaryEmbedding): for position p and frequency
i < hd/2, θ_{p,i} = fl32(p · inv_freq_i); cos row p = [cos θ_{p,·}, cos θ_{p,·}] · attention_scaling, sin likewise,
rounded to the model's dtype. Here θ is that same fp32 product, cos θ is evaluated in float64 (numpy) and rounded
once to fp32, then scaled in fp32 and rounded to the dtype: transformers' formula with the cosine correctly rounded
(torch's is within an ulp of it, so bf16 rows agree but at a rounding midpoint).

Why: on torch 2.13 with MKL, a float tensor's cos on two threads returned, on the first call of a fresh process's
decode, values up to 2,534 ulp off on about half the elements (the AVX2 build's test process: 5 of 30 runs; later
calls exact to an ulp; scripts/torch_cos_first_call.py saw it in plain torch once in 112 processes). transformers'
rotary module calls it on every forward, so a position's cos could take other bits in a prefill than in a later
step, and a verify's logits then differed from one-row steps' (tests/unit/kernels/test_q6k.py's AVX2 run failed ~1 in
6). With the table each position's values are computed once, deterministically, and every forward — a prefill
through the decoder's own layers, a step, a verify, the fast decoder's — reads the same bits
(docs/log/2026-12-08-rope-table.md).
"""

from __future__ import annotations

import types

import numpy as np
import torch

FIRST = 4096  # positions a table first holds (doubled as needed): 1–2 MB for these models' head sizes


def takes(rot: torch.nn.Module) -> bool:
    """The default rope with a fixed inv_freq buffer: the only kind whose rows are a function of the position
    alone (dynamic and long-rope kinds rescale inv_freq with the sequence length; they keep their own forward)."""
    return (getattr(rot, "rope_type", None) == "default" and isinstance(getattr(rot, "inv_freq", None), torch.Tensor)
            and rot.inv_freq.dim() == 1 and isinstance(getattr(rot, "attention_scaling", None), (int, float)))


def _values(inv_freq: torch.Tensor, scaling: float, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 cos, sin [n, hd] for positions 0 … n − 1 (the module docstring's formula)."""
    theta = torch.arange(n, dtype=torch.float32)[:, None] * inv_freq.detach().to("cpu", torch.float32)[None]
    t = theta.numpy().astype(np.float64)
    s = torch.tensor(scaling, dtype=torch.float32)
    cos = torch.from_numpy(np.cos(t).astype(np.float32)) * s
    sin = torch.from_numpy(np.sin(t).astype(np.float32)) * s
    return torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)


def _table(rot: torch.nn.Module, n: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's table in `dtype` on `device`, at least n positions long; rebuilt where inv_freq was replaced
    or changed in place (its pointer, version and dtype are the key). The lookup is the per-step path (a few µs)."""
    inv = rot.inv_freq
    key = (inv.data_ptr(), inv._version, inv.dtype, rot.attention_scaling)
    cache = rot.__dict__.get("_speclab_rope_table")
    if cache is not None and cache["key"] == key:
        got = cache["cast"].get((dtype, device))
        if got is not None and got[0].shape[0] >= n:
            return got
    return _build(rot, n, dtype, device, key)


def _build(rot: torch.nn.Module, n: int, dtype: torch.dtype, device, key) -> tuple[torch.Tensor, torch.Tensor]:
    cache = rot.__dict__.get("_speclab_rope_table")
    if cache is None or cache["key"] != key:
        cache = rot.__dict__["_speclab_rope_table"] = {"key": key, "f32": None, "cast": {}}
    # plain tensors even when first asked inside inference_mode: a training forward may save them for backward
    with torch.inference_mode(False), torch.no_grad():
        f32 = cache["f32"]
        if f32 is None or f32[0].shape[0] < n:
            size = max(FIRST, 2 * n, 0 if f32 is None else f32[0].shape[0])
            f32 = cache["f32"] = _values(rot.inv_freq, float(rot.attention_scaling), size)
            cache["cast"] = {}
        got = cache["cast"].get((dtype, device))
        if got is None:
            got = cache["cast"][(dtype, device)] = tuple(t.to(device, dtype) for t in f32)
    return got


def span(rot: torch.nn.Module, past: int, q: int, dtype: torch.dtype, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [1, q, hd] of positions past … past + q − 1 (views of the table: no copy)."""
    cos, sin = _table(rot, past + q, dtype, device)
    return cos[None, past:past + q], sin[None, past:past + q]


def rows(rot: torch.nn.Module, position_ids: torch.Tensor, dtype: torch.dtype, device="cpu"):
    """cos, sin [b, q, hd] of position_ids [b, q] (any positions ≥ 0)."""
    pos = position_ids.long()
    if pos.numel() and int(pos.min()) < 0:
        raise ValueError(f"a rope position is negative: {int(pos.min())}")
    hi = int(pos.max()) + 1 if pos.numel() else 0
    cos, sin = _table(rot, hi, dtype, device)
    pos = pos.to(cos.device)
    return cos[pos], sin[pos]


def _forward(self, x: torch.Tensor, position_ids: torch.Tensor):
    """The rotary module's forward on the table: the same (cos, sin) in x's dtype and device."""
    return rows(self, position_ids, x.dtype, x.device)


def use_rope_table(model: torch.nn.Module) -> bool:
    """Patch the decoder's rotary module of `model` (a transformers Llama / Qwen2-style model, or its decoder) to
    read the table; True when it is patched (already or now). Other rope kinds and modules without one: False,
    unchanged."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", model)
    rot = getattr(decoder, "rotary_emb", None)
    if rot is None or not takes(rot):
        return False
    mine = getattr(rot.__dict__.get("forward"), "__func__", None) is _forward
    if "forward" in rot.__dict__ and not mine:
        return False  # someone else's forward: theirs stands
    rot.forward = types.MethodType(_forward, rot)
    return True
