"""A KV cache that grows in place: transformers' DynamicCache with layers that write each step's keys and
values into a preallocated buffer instead of concatenating the whole cache again.

    GrowingCache()        a DynamicCache (crop, batch_repeat_interleave, … as before) of GrowingLayer
    make_cache()          GrowingCache where this transformers version allows it, else DynamicCache
    GrowingTensor(dim)    the same for any tensor that grows along one dim (the block drafter's features and
                          context K/V: engine.drafters.block)

Why: DynamicLayer.update is `keys = cat([keys, new])`, a copy of the layer's whole cache on every forward.
On the 1.5B target (28 layers, 2 key-value heads × 128, bf16) that is 28 × 2 copies of L × 512 bytes per
step: at L = 2,000 cached tokens, 21 ms of a ~165 ms decode step on a 2-core EPYC (docs/log/2026-12-05-
dense-kernel.md), growing with the context. Here an update writes only the new rows; the buffer doubles
when full (amortised O(1) per token), and crop only moves the length back.

`keys` / `values` stay what every reader expects: tensors [B, H, L, D] of exactly the cached length (views
of the buffer), so attention, masks and `get_seq_length` see no difference.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

MIN_CAPACITY = 256  # rows first allocated past the prompt; why: a short answer then never reallocates


class _LiveRows:
    """GrowingLayer.keys / .values: a view of the buffer's first `length` rows, made when read; before the first
    update, whatever was assigned. Why: the one-call decoder (engine.kernels.fast_decoder) advances every layer each
    step and reads none of them; two slicing views a layer, made eagerly, were 0.43 ms of SmolLM2-135M's ~17 ms step
    on a 2-core Zen 1. Assigning while a buffer is held is refused (it would be silently dropped)."""

    def __init__(self, buf: str, name: str) -> None:
        self.buf, self.name, self.slot = buf, name, "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        b = obj.__dict__.get(self.buf)
        return obj.__dict__.get(self.slot) if b is None else b[..., : obj.length, :]

    def __set__(self, obj, t) -> None:
        if obj.__dict__.get(self.buf) is not None:
            raise RuntimeError(f"a GrowingLayer's {self.name} are a view of its buffer: write them through update")
        obj.__dict__[self.slot] = t


class GrowingLayer(DynamicLayer):
    """One layer's keys and values in a buffer of `capacity` rows, of which the first `length` are live."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._k = self._v = None
        self.length = 0

    keys = _LiveRows("_k", "keys")  # views of the buffers' live rows, made when read
    values = _LiveRows("_v", "values")

    def offload(self) -> None:
        if self._k is not None:
            self._k, self._v = self._k.to("cpu", non_blocking=True), self._v.to("cpu", non_blocking=True)
        else:
            super().offload()

    def prefetch(self) -> None:
        if self._k is not None and self._k.device != self.device:
            self._k, self._v = self._k.to(self.device, non_blocking=True), self._v.to(self.device, non_blocking=True)
        elif self._k is None:
            super().prefetch()

    def _grow(self, need: int, like_k: torch.Tensor, like_v: torch.Tensor) -> None:
        cap = max(need, 2 * (0 if self._k is None else self._k.shape[-2]), need + MIN_CAPACITY)
        k = like_k.new_empty((*like_k.shape[:-2], cap, like_k.shape[-1]))
        v = like_v.new_empty((*like_v.shape[:-2], cap, like_v.shape[-1]))
        if self.length:
            k[..., : self.length, :] = self._k[..., : self.length, :]
            v[..., : self.length, :] = self._v[..., : self.length, :]
        self._k, self._v = k, v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if (self._k is None or self.length + n > self._k.shape[-2] or self._k.shape[:-2] != key_states.shape[:-2]
                or self._k.dtype != key_states.dtype):
            if self._k is not None and self._k.shape[:-2] != key_states.shape[:-2]:
                raise ValueError(f"cache rows {tuple(self._k.shape[:-2])} ≠ update rows {tuple(key_states.shape[:-2])}")
            self._grow(self.length + n, key_states, value_states)
        self._k[..., self.length: self.length + n, :] = key_states
        self._v[..., self.length: self.length + n, :] = value_states
        self.length += n
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reserve(self, n: int) -> tuple[torch.Tensor, torch.Tensor, int] | None:
        """Room for n more rows, for a writer that fills them itself (the C layer, engine.kernels.fused.layer):
        the key and value buffers [B, H, cap, D] (cap ≥ length + n) and the first free row; `advance(n)` then
        makes them live. None before the first `update` (the buffers' shape is not known yet)."""
        if not self.is_initialized or self._k is None:
            return None
        if self.length + n > self._k.shape[-2]:
            self._grow(self.length + n, self._k, self._v)
        return self._k, self._v, self.length

    def advance(self, n: int) -> None:
        """The n rows after `length` were written in place (see `reserve`)."""
        self.length += n

    def reset(self) -> None:
        self._k = self._v = None
        self.length = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of tokens to drop, got {tokens_to_remove}")
        if tokens_to_remove == 0 or not self.is_initialized:
            return
        self.length = max(0, self.length + tokens_to_remove)

    def _replace(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Start the buffer over from materialised keys / values (batch reshapes: rare, not per step)."""
        self._k, self._v, self.length = None, None, 0
        self._grow(keys.shape[-2], keys, values)
        self._k[..., : keys.shape[-2], :] = keys
        self._v[..., : values.shape[-2], :] = values
        self.length = keys.shape[-2]

    def select_positions(self, idx: torch.Tensor) -> None:
        """Keep only the cached positions `idx` (in order): a tree verify's accepted path."""
        if self.get_seq_length() > 0:
            self._replace(self.keys.index_select(-2, idx), self.values.index_select(-2, idx))

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.get_seq_length() > 0:
            self._replace(self.keys.repeat_interleave(repeats, dim=0), self.values.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.get_seq_length() > 0:
            self._replace(self.keys[indices, ...], self.values[indices, ...])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.get_seq_length() > 0:
            idx = beam_idx.to(self.keys.device)
            self._replace(self.keys.index_select(0, idx), self.values.index_select(0, idx))


class GrowingCache(DynamicCache):
    """DynamicCache whose layers are GrowingLayer (created lazily, one per attention layer, as DynamicCache's)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer_class_to_replicate = GrowingLayer


def make_cache() -> DynamicCache:
    """A GrowingCache where this transformers version builds its layers from `layer_class_to_replicate`
    (5.x); otherwise a plain DynamicCache."""
    c = GrowingCache()
    if getattr(c, "layer_class_to_replicate", None) is GrowingLayer and not c.layers:
        return c
    return DynamicCache()


class GrowingTensor:
    """A tensor that grows along `dim` in place: `append` writes only the new slices (the buffer doubles when
    full), `crop` moves the length back, `view()` is the live part. Worked example: appending [3, 8] then
    [1, 8] along dim 0 allocates 3 + MIN_CAPACITY rows once; view() is [4, 8]; crop(2) then view() is [2, 8]."""

    def __init__(self, dim: int = 0) -> None:
        self.dim, self.buf, self.n = dim, None, 0

    def append(self, x: torch.Tensor) -> None:
        d, m = self.dim, x.shape[self.dim]
        need = self.n + m
        b = self.buf
        if (b is None or need > b.shape[d] or b.dtype != x.dtype
                or b.shape[:d] + b.shape[d + 1:] != x.shape[:d] + x.shape[d + 1:]):
            shape = list(x.shape)
            shape[d] = max(need, 2 * (0 if b is None else b.shape[d]), need + MIN_CAPACITY)
            new = x.new_empty(shape)
            if self.n:
                new.narrow(d, 0, self.n).copy_(b.narrow(d, 0, self.n))
            self.buf = b = new
        b.narrow(d, self.n, m).copy_(x)
        self.n = need

    def view(self) -> torch.Tensor | None:
        return None if self.buf is None else self.buf.narrow(self.dim, 0, self.n)

    def crop(self, n: int) -> None:
        self.n = max(0, min(self.n, n))
