"""The in-place KV cache: the same keys and values as DynamicCache through updates, crops and batch reshapes, and the
same logits from a model run on it."""

import pytest
import torch
from transformers.cache_utils import DynamicCache

from engine.core.kv_cache import GrowingCache, GrowingLayer, make_cache


def _kv(b, n, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 2, n, 8, generator=g), torch.randn(b, 2, n, 8, generator=g)


def _same(a, b):
    assert a.get_seq_length() == b.get_seq_length()
    for la, lb in zip(a.layers, b.layers):
        assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)


def test_updates_and_crops_match_dynamic_cache_past_several_reallocations():
    ours, ref = make_cache(), DynamicCache()
    assert isinstance(ours, GrowingCache)
    for step, n in enumerate([300, 1, 3, 1, 200, 2, 400]):  # 300 + 256 rows first, then doubling
        for layer in range(2):
            k, v = _kv(1, n, step * 10 + layer)
            ko, vo = ours.update(k, v, layer)
            kr, vr = ref.update(k, v, layer)
            assert torch.equal(ko, kr) and torch.equal(vo, vr)
        if step % 2:
            ours.crop(-2)
            ref.crop(-2)
        _same(ours, ref)
    assert isinstance(ours.layers[0], GrowingLayer) and ours.layers[0]._k.shape[-2] >= ours.get_seq_length()


def test_batch_reshapes_and_reset():
    ours, ref = GrowingCache(), DynamicCache()
    k, v = _kv(1, 5, 1)
    ours.update(k, v, 0)
    ref.update(k, v, 0)
    ours.batch_repeat_interleave(3)
    ref.batch_repeat_interleave(3)
    _same(ours, ref)
    k, v = _kv(3, 2, 2)
    ours.update(k, v, 0)
    ref.update(k, v, 0)
    idx = torch.tensor([2, 0])
    ours.batch_select_indices(idx)
    ref.batch_select_indices(idx)
    _same(ours, ref)
    ours.layers[0].reset()
    assert ours.get_seq_length() == 0


def test_a_model_decodes_the_same_logits_on_it():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (1, 12))
    out = {}
    with torch.inference_mode():
        for name, cache in (("ours", GrowingCache()), ("ref", DynamicCache())):
            logits = [model(ids[:, :8], past_key_values=cache, use_cache=True).logits[:, -1]]
            for t in range(8, 12):
                logits.append(model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits[:, -1])
            cache.crop(-2)
            logits.append(model(ids[:, 10:12], past_key_values=cache, use_cache=True).logits[:, -1])
            out[name] = torch.cat(logits)
    assert torch.allclose(out["ours"], out["ref"], atol=1e-5)


def test_selecting_positions_keeps_a_tree_path():
    ours, ref = GrowingCache(), DynamicCache()
    k, v = _kv(1, 9, 5)
    ours.update(k, v, 0)
    ref.update(k, v, 0)
    idx = torch.tensor([0, 1, 2, 4, 7])
    ours.layers[0].select_positions(idx)
    ref.layers[0].keys, ref.layers[0].values = ref.layers[0].keys.index_select(-2, idx), ref.layers[0].values.index_select(-2, idx)
    _same(ours, ref)
    k, v = _kv(1, 1, 6)  # and it grows on from there
    ours.update(k, v, 0)
    ref.update(k, v, 0)
    _same(ours, ref)


def test_growing_tensor_appends_in_place_and_crops():
    """The module doc's worked example: one allocation for both appends; crop moves the length back and the
    next append overwrites from there; a view is what a cat would have built."""
    from engine.core.kv_cache import MIN_CAPACITY, GrowingTensor

    g = GrowingTensor(0)
    a, b = torch.randn(3, 8), torch.randn(1, 8)
    g.append(a)
    buf = g.buf
    g.append(b)
    assert g.buf is buf and buf.shape[0] == 3 + MIN_CAPACITY
    assert torch.equal(g.view(), torch.cat([a, b]))
    g.crop(2)
    c = torch.randn(2, 8)
    g.append(c)
    assert torch.equal(g.view(), torch.cat([a[:2], c]))
    k = GrowingTensor(2)  # along the position dim of a [1, H, L, D] cache
    k.append(torch.zeros(1, 2, 0, 4))
    k.append(torch.ones(1, 2, 5, 4))
    assert k.view().shape == (1, 2, 5, 4) and float(k.view().sum()) == 40.0


def test_rows_reserved_and_written_in_place_read_as_updates_do():
    """reserve/advance (the C layer writes its own keys and values): the same cache as update, past a reallocation."""
    ours, ref = make_cache(), DynamicCache()
    assert ours.layers == [] or ours.layers[0].reserve(1) is None  # no buffer before the first update
    k, v = _kv(1, 300, 1)
    ours.update(k, v, 0)
    ref.update(k, v, 0)
    lay = ours.layers[0]
    for step, n in enumerate([1, 3, 260]):  # 300 + 256 rows of room: the third reservation reallocates
        k, v = _kv(1, n, 10 + step)
        kb, vb, past = lay.reserve(n)
        assert past == lay.length and kb.shape[-2] >= past + n and vb.stride() == kb.stride()
        kb[..., past:past + n, :] = k
        vb[..., past:past + n, :] = v
        lay.advance(n)
        ref.update(k, v, 0)
        _same(ours, ref)
    lay.crop(-5)
    ref.crop(-5)
    _same(ours, ref)


def test_keys_and_values_are_the_live_rows_read_when_asked():
    """keys / values are views of the buffer's live rows made on each read (advance and crop only move the length);
    writing them directly while a buffer is held is refused, not silently dropped."""
    c = make_cache()
    k, v = _kv(1, 5, 3)
    c.update(k, v, 0)
    lay = c.layers[0]
    kb, vb, past = lay.reserve(2)
    kb[..., past:past + 2, :] = 7.0
    assert lay.keys.shape[-2] == 5  # reserved rows are not live yet
    lay.advance(2)
    assert lay.keys.shape[-2] == 7 and bool((lay.keys[..., 5:, :] == 7.0).all())
    assert torch.equal(lay.values[..., :5, :], v)
    lay.crop(-4)
    assert lay.keys.shape[-2] == lay.values.shape[-2] == 3
    with pytest.raises(RuntimeError, match="through update"):
        lay.keys = torch.zeros(1, 2, 3, 8)
    lay.offload()
    assert lay.keys.device.type == "cpu" and torch.equal(lay.keys, k[..., :3, :])
