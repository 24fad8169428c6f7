"""A decode step's whole decoder in one C call (engine/kernels/fused_layer.h's speclab_decoder): the embedding and
the rope tables in torch, then every layer — norm, q|k|v, rope, the cache append, attention, W_o, the MLP — in one
OpenMP parallel region, then the final norm.

    use_fast_decoder(model) -> bool   route the decoder's short forwards there when every layer has the one-call
                                      C layer (engine.kernels.fast_layer); True when it did. Where the final norm
                                      is an RMS norm and the head a bias-free product of the same library, the
                                      final norm becomes the C norm on every path, and `step_head` runs the
                                      layers, that norm and the head in one call
    one_call(model) -> str            what a step runs in one C call (the kernel report says it)

Why (profiled, SmolLM2-135M dense on a 2-core Zen 1): with the layer in one C call each, a step still spent ~5 ms
of ~24 ms in Python — 30 layers' module calls, guards, cache bookkeeping and ctypes argument conversion, and the
decoder's own mask and rope machinery. Here that is one guard, one call and one bookkeeping pass per step.

Bits: each layer is speclab_layer's own body (fl_layer_body), so a step here equals the one-call layers' step bit
for bit, and stays batch-invariant (a k-row verify equals k one-row steps). Anything else — a batch, a tree or
padding mask, positions that do not follow the cache, hidden states or attentions asked for, a cache that does not
grow in place, a prefill longer than dense_kernel.MAX_ROWS — runs the decoder's own forward (and the layers' C
calls), unchanged.
"""

from __future__ import annotations

import ctypes
import os
import types
import weakref

import torch

from engine.kernels import dense_kernel, fast_layer, fused, rope_table

# SPECLAB_FAST_DECODER=0 keeps the per-layer calls (tests compare the two)
ENABLED = [os.environ.get("SPECLAB_FAST_DECODER", "1") != "0"]
_SHAPE = ("D", "nq", "nkv", "hd", "I")


def use_fast_decoder(model: torch.nn.Module) -> bool:
    """Patch `model`'s decoder when every layer runs the one-call C layer of one library and shape."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    layers = list(getattr(decoder, "layers", None) or [])
    fs = [getattr(layer, "_speclab_fused", None) for layer in layers]
    if (not layers or "forward" in decoder.__dict__ or any(f is None or f["one"] is None for f in fs)
            or any(f["mod"] is not fs[0]["mod"] for f in fs)
            or any(tuple(getattr(f["one"], a) for a in _SHAPE) != tuple(getattr(fs[0]["one"], a) for a in _SHAPE)
                   for f in fs)
            or not all(hasattr(decoder, a) for a in ("embed_tokens", "rotary_emb", "norm"))):
        return False
    decoder._speclab_fs = fs
    decoder._speclab_lys = (ctypes.c_void_p * len(fs))(*[ctypes.addressof(f["one"]) for f in fs])
    decoder._speclab_slow = decoder.forward
    decoder.forward = types.MethodType(_decoder_forward, decoder)
    decoder._speclab_step = types.MethodType(step, decoder)
    tail = _tail(model, decoder, fs[0])
    if tail is not None:
        # every path's final norm is then the tail's (the C norm's bits), so a step through the modules and one
        # through speclab_decoder_head agree bit for bit
        norm = decoder.norm
        norm.forward = types.MethodType(_c_norm, norm)
        decoder._speclab_tail = tail
        decoder._speclab_step_head = types.MethodType(step_head, decoder)
    return True


def one_call(model: torch.nn.Module) -> str:
    """What a decode step of `model` runs in one C call, for its kernel report: 'layers, final norm and head',
    'layers', or '' (the layers' own calls)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    if getattr(decoder, "_speclab_step", None) is None:
        return ""
    return "layers, final norm and head" if getattr(decoder, "_speclab_tail", None) is not None else "layers"


def _c_norm(self, x: torch.Tensor) -> torch.Tensor:
    """The final norm as the tail computes it (fused.rms); transformers' own where that does not apply: another
    dtype or device, or a forward that needs gradients (the C norm has none)."""
    if (x.dtype != torch.bfloat16 or x.device.type != "cpu" or x.shape[-1] % 8
            or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))):
        return type(self).forward(self, x)
    return fused.rms(self._speclab_mod._lib, x, self.weight, self.variance_epsilon)


def _tail(model, decoder, f0: dict):
    """(fused.Tail, what it points into) where the decoder's final norm is an RMS norm of bf16 weights and the output
    embedding a bias-free product of the layers' own library — the dense kernel's patched bf16 nn.Linear, or a
    quantized QGemmLinear; else None (the step then calls the head after the decoder, as before)."""
    norm = getattr(decoder, "norm", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    w = getattr(norm, "weight", None)
    if (head is None or w is None or "forward" in norm.__dict__ or not hasattr(norm, "variance_epsilon")
            or w.dtype != torch.bfloat16 or w.shape != (f0["one"].D,) or getattr(head, "bias", None) is not None
            or getattr(head, "in_features", None) != f0["one"].D):
        return None
    mod, keep = f0["mod"], [w.detach().contiguous()]
    if mod is dense_kernel and isinstance(head, torch.nn.Linear) and "forward" in head.__dict__:
        hw = head.weight.detach()
        if hw.dtype != torch.bfloat16 or not hw.is_contiguous():
            return None
        keep.append(hw)
        handle = hw.data_ptr()
    elif mod is not dense_kernel and type(head).__name__ == "QGemmLinear":
        if not all(t.is_contiguous() for t in (head.q, head.s, head.mn)):
            return None
        qw = fused.QWeight.of([(head.out_features, head.bits, head.q, head.s, head.mn)])
        keep += [head.q, head.s, head.mn, qw]
        handle = ctypes.addressof(qw)
    else:
        return None
    if not hasattr(mod._lib, "speclab_decoder_head"):
        return None
    norm._speclab_mod = mod  # the module, its library looked up at each call (as the layers' callers do)
    return fused.Tail(nw=keep[0].data_ptr(), eps=float(norm.variance_epsilon), V=int(head.out_features), w=handle), keep


def _output(hidden: torch.Tensor, cache):
    from transformers.modeling_outputs import BaseModelOutputWithPast

    key = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
    return BaseModelOutputWithPast(last_hidden_state=hidden, **{key: cache})


_PLAIN_KEYS = {"input_ids", "attention_mask", "position_ids", "cache", "past_key_values", "use_cache", "inputs_embeds"}


def _rooms(self, kw: dict):
    """(input ids [1, q], cache, its layers, their buffers' `fused.cache_pointers`, past, position ids [1, q]) when
    this call takes the one-call decoder; else None."""
    ids, cache = kw.get("input_ids"), kw.get("cache", kw.get("past_key_values"))
    if (kw.get("inputs_embeds") is not None or kw.get("use_cache") is False
            or any(v not in (None, False) for k, v in kw.items() if k not in _PLAIN_KEYS)
            or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[0] != 1):
        return None
    got = _cache_rooms(self, cache, ids.shape[1])
    if got is None:
        return None
    lays, ptrs, past = got
    q = ids.shape[1]
    mask, pos = kw.get("attention_mask"), kw.get("position_ids")
    if mask is not None and not (mask.dim() == 2 and mask.shape == (1, past + q) and bool(mask.all())):
        return None
    want = torch.arange(past, past + q, device=ids.device).unsqueeze(0)  # positions that follow the cache
    if pos is not None and not (pos.shape == (1, q) and torch.equal(pos.to(want.device), want)):
        return None
    return ids, cache, lays, ptrs, past, want


def _cache_rooms(self, cache, q: int):
    """(the cache's layers, their buffers' `fused.cache_pointers`, past) when a forward of q rows on this cache can
    take the one-call decoder (the path is on, no grad, no hidden states or attentions asked, q ≤ MAX_ROWS, every
    layer's buffer grows in place at one length); else None."""
    if (not ENABLED[0] or not fast_layer.ONE_CALL[0] or torch.is_grad_enabled() or cache is None
            or getattr(self.config, "output_hidden_states", False) or getattr(self.config, "output_attentions", False)
            or not 1 <= q <= dense_kernel.MAX_ROWS):
        return None
    got = _same_rooms(self, cache, q)
    if got is None:
        f0 = self._speclab_fs[0]["one"]
        rooms = []
        for i in range(len(self._speclab_fs)):
            room = fast_layer.cache_room(cache, i, q, f0.nkv, f0.hd)
            if room is None or (rooms and room[3] != rooms[0][3]):
                return None
            rooms.append(room)
        lays, ks, vs = [r[0] for r in rooms], [r[1] for r in rooms], [r[2] for r in rooms]
        ptrs = fused.cache_pointers(ks, vs)
        # weak references: a finished request's cache and buffers are not kept alive by the memo
        self._speclab_rooms = (weakref.ref(cache), [weakref.ref(t) for t in lays + ks + vs], ptrs)
        got = lays, ptrs, rooms[0][3]
    return got


def _same_rooms(self, cache, q: int):
    """(layers, pointers, past) from the last step's checked rooms when every layer's `reserve(q)` hands back the
    same buffers at one length; else None (the full check runs). Why: the full check — dtype, shape and strides of
    every layer's buffers, and the pointer arrays — was ~0.35 ms of SmolLM2-135M's ~17 ms step on a 2-core Zen 1,
    for buffers that change only when one grows."""
    memo = getattr(self, "_speclab_rooms", None)
    if memo is None or memo[0]() is not cache:
        return None
    _, refs, ptrs = memo
    layers = getattr(cache, "layers", ())
    n = len(layers)
    if 3 * n != len(refs) or not n:
        return None
    pasts = set()
    for i, lay in enumerate(layers):
        room = lay.reserve(q) if refs[i]() is lay else None
        if room is None or room[0] is not refs[n + i]() or room[1] is not refs[2 * n + i]():
            return None
        pasts.add(room[2])
    return (layers, ptrs, pasts.pop()) if len(pasts) == 1 else None


def _decoder_forward(self, *args, **kw):
    got = None if args else _rooms(self, kw)
    if got is None:
        return self._speclab_slow(*args, **kw)
    ids, cache, lays, ptrs, past, pos = got
    h = _run(self, ids, lays, ptrs, past, pos)
    return self._speclab_slow(*args, **kw) if h is None else _output(h, cache)


def step(self, ids: torch.Tensor, cache, start: int) -> torch.Tensor | None:
    """The decoder's output [1, q, D] (after its final norm) for ids [1, q] at positions start … start + q − 1, fed
    after the cache's rows — the one-call path without the module call, its keyword checks and its output record
    (engine.core.lm.HFModel's plain forwards call it); None where that path does not apply (the cache does not
    hold `start` rows, a grown buffer, …): the caller then runs the model's own forward. Same bits as a forward
    through the patched decoder."""
    if ids.dim() != 2 or ids.shape[0] != 1:
        return None
    got = _cache_rooms(self, cache, ids.shape[1])
    if got is None or got[2] != start:
        return None
    return _run(self, ids, got[0], got[1], start, None)


def step_head(self, ids: torch.Tensor, cache, start: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`step` with the final norm and the output embedding in the same C call (fused.decoder_head): (normed states
    [1, q, D], logits [1, q, V] bf16), the bits of `step` then the head's own forward; None where `step` declines."""
    if ids.dim() != 2 or ids.shape[0] != 1:
        return None
    got = _cache_rooms(self, cache, ids.shape[1])
    if got is None or got[2] != start:
        return None
    return _run(self, ids, got[0], got[1], start, None, head=True)


def _run(self, ids: torch.Tensor, lays, ptrs, past: int, pos: torch.Tensor | None, head: bool = False):
    """Embedding, rope, every layer in one C call, the cache's lengths advanced, the final norm: [1, q, D] (with
    `head`: and the logits [1, q, V], the norm and the head in the same call); None (nothing advanced) when the
    embedding or the rope tables are not bf16."""
    q = ids.shape[1]
    h = self.embed_tokens(ids)
    cos, sin = _rope(self, h, past, q, pos)
    if h.dtype != torch.bfloat16 or cos.dtype != torch.bfloat16:
        return None
    hd = self._speclab_fs[0]["one"].hd
    args = (self._speclab_fs[0]["mod"]._lib, self._speclab_lys, ptrs, h.reshape(q, -1).contiguous(),
            cos.reshape(q, hd).contiguous(), sin.reshape(q, hd).contiguous(), past)
    if head:
        normed, logits = fused.decoder_head(*args, self._speclab_tail[0])
        for lay in lays:
            lay.advance(q)
        return normed.view(1, q, -1), logits.view(1, q, -1)
    out = fused.decoder(*args)
    for lay in lays:
        lay.advance(q)
    return self.norm(out.view(1, q, -1))


def _rope(self, h: torch.Tensor, past: int, q: int, pos: torch.Tensor | None):
    """cos, sin [1, q, hd] of positions past … past + q − 1: for the default rope, rows of the table
    (engine.kernels.rope_table: each position computed once, the bits every other path reads too); other rope types
    call the module each time. Why a table: the rotary module's eight small ops were ~0.17 ms of a SmolLM2-135M step
    after the layers' call, a step of ~8–12 ms."""
    rot = self.rotary_emb
    if pos is None and rope_table.takes(rot):
        return rope_table.span(rot, past, q, h.dtype, h.device)
    if pos is None:
        pos = torch.arange(past, past + q, device=h.device).unsqueeze(0)
    return rot(h, position_ids=pos)
