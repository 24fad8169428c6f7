"""The decoder in one C call (engine/kernels/fast_decoder.py → fused_layer.h's speclab_decoder): the bits of the
one-call layers, batch-invariant, taken only for a plain short forward on a cache that grows in place, and the
decoder's own forward for everything else."""

import pytest
import torch

from engine.core.kv_cache import GrowingCache
from engine.kernels import dense_kernel, fast_decoder, fused
from engine.kernels.fast_layer import use_dense_kernel as _dense_layers
from tests.unit.kernels.test_fast_layer import _decode, _model
from tests.unit.kernels.test_fused import _qgemm_or_skip, _steps_and_verify, _wide, _wide_quantized



def use_dense_kernel(model):
    """As engine.kernels.accelerate does for a bf16 model: the kernel's layers, then the one-call decoder."""
    _dense_layers(model)
    return fast_decoder.use_fast_decoder(model)


pytestmark = pytest.mark.skipif(dense_kernel.available() is not None,
                                reason=f"dense kernel: {dense_kernel.available()}")


@pytest.fixture
def counted(monkeypatch):
    """The decoder calls made, as the row counts they took."""
    calls = []
    real, real_head = fused.decoder, fused.decoder_head
    monkeypatch.setattr(fused, "decoder", lambda *a: calls.append(a[3].shape[0]) or real(*a))
    monkeypatch.setattr(fused, "decoder_head", lambda *a: calls.append(a[3].shape[0]) or real_head(*a))
    return calls


def _on_and_off(model, ids, calls):
    old = fast_decoder.ENABLED[0]
    try:
        fast_decoder.ENABLED[0] = True
        on = _decode(model, ids)
        n = list(calls)
        fast_decoder.ENABLED[0] = False
        off = _decode(model, ids)
    finally:
        fast_decoder.ENABLED[0] = old
    assert n == [1, 1, 1, 3] and len(calls) == 4  # three steps and the verify; the 40-token prefill is too long
    return on, off


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_decoder_in_one_call_gives_the_bits_of_its_layers(kind, counted):
    model = _wide(kind)
    use_dense_kernel(model)
    assert "forward" in model.model.__dict__
    on, off = _on_and_off(model, torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(9)), counted)
    assert torch.equal(on, off)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_a_verify_in_one_call_gives_the_bits_of_one_row_steps(kind):
    model = _wide(kind)
    use_dense_kernel(model)
    steps, verify = _steps_and_verify(model, torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(10)))
    assert torch.equal(steps, verify)


@pytest.mark.parametrize("mixed", [False, True])
def test_the_quantized_decoder_in_one_call(mixed, counted):
    _qgemm_or_skip()
    model = _wide_quantized(mixed)
    assert fast_decoder.use_fast_decoder(model)
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(11))
    on, off = _on_and_off(model, ids[:, :44], counted)
    assert torch.equal(on, off)
    steps, verify = _steps_and_verify(model, ids)
    assert torch.equal(steps, verify)


def test_layers_without_the_one_call_layer_leave_the_decoder_alone():
    model = _model("qwen2")  # 16-wide heads: no one-call layer
    use_dense_kernel(model)
    assert "forward" not in model.model.__dict__
    assert not fast_decoder.use_fast_decoder(model)


def test_what_the_one_call_decoder_does_not_take_runs_the_decoders_own_forward(counted):
    """Hidden states asked for, positions that do not follow the cache (a tree), a padding mask, a cache that
    does not grow in place: the decoder's own forward, with the same results as with the fast decoder off."""
    from transformers.cache_utils import DynamicCache

    model = _wide("qwen2")
    use_dense_kernel(model)
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(12))

    def run():
        outs = []
        with torch.inference_mode():
            for make in (GrowingCache, DynamicCache):
                c = make()
                model(ids[:, :40], past_key_values=c, use_cache=True)
                out = model(ids[:, 40:41], past_key_values=c, use_cache=True, output_hidden_states=True)
                outs += [out.logits, out.hidden_states[-1]]
                pos = torch.tensor([[41, 42, 42]])  # a tree's depths: two siblings at one position
                outs.append(model(ids[:, 41:44], past_key_values=c, use_cache=True, position_ids=pos).logits)
                mask = torch.ones(1, 45, dtype=torch.long)
                mask[0, 3] = 0
                outs.append(model(ids[:, 40:41], past_key_values=c, use_cache=True, attention_mask=mask).logits)
        return outs

    on = run()
    assert counted == []
    old = fast_decoder.ENABLED[0]
    fast_decoder.ENABLED[0] = False
    try:
        off = run()
    finally:
        fast_decoder.ENABLED[0] = old
    assert all(torch.equal(a, b) for a, b in zip(on, off))


def test_the_one_switch_puts_a_model_on_the_one_call_decoder():
    from engine.kernels.accelerate import accelerate

    model = _wide("llama")
    report = accelerate(model, "dense")
    assert report.path == "speclab bgemv" and "forward" in model.model.__dict__
    assert model.model.forward.__func__ is fast_decoder._decoder_forward


def test_two_requests_taking_turns_each_write_their_own_cache(counted):
    """The last step's checked cache buffers are reused only for the same cache and buffers: two caches decoding
    in turns (and one cropped back, as a rejected draft does) give the bits of the per-layer path, and a finished
    request's cache is not kept alive by the decoder."""
    import gc
    import weakref

    model = _wide("qwen2")
    use_dense_kernel(model)
    ids = torch.randint(0, 96, (2, 52), generator=torch.Generator().manual_seed(13))

    def run():
        outs, caches = [], [GrowingCache(), GrowingCache()]
        with torch.inference_mode():
            for r in (0, 1):
                model(ids[r:r + 1, :40], past_key_values=caches[r], use_cache=True)
            for t in range(40, 46):
                for r in (0, 1):
                    outs.append(model(ids[r:r + 1, t:t + 1], past_key_values=caches[r], use_cache=True).logits)
            caches[0].crop(-3)  # three rows dropped: the next step writes over them
            for t in range(43, 47):
                outs.append(model(ids[0:1, t:t + 1], past_key_values=caches[0], use_cache=True).logits)
        return outs, weakref.ref(caches[0])

    on, gone = run()
    assert len(counted) == 12 + 4  # every step on the one-call decoder (a prefill on an empty cache is not)
    gc.collect()
    assert gone() is None
    old = fast_decoder.ENABLED[0]
    fast_decoder.ENABLED[0] = False
    try:
        off, _ = run()
    finally:
        fast_decoder.ENABLED[0] = old
    assert all(torch.equal(a, b) for a, b in zip(on, off))


def _engine_steps(lm, ids):
    """An engine LM's logits: a 40-token prefill, three one-token extends, a crop and a 3-row verify."""
    from engine.core.lm import prefill

    lm.reset()
    prefill(lm, ids[0, :39].tolist())
    out = [lm.extend([int(t)]) for t in ids[0, 39:42]]
    lm.crop(41)
    out.append(lm.extend(ids[0, 41:44].tolist()))
    return torch.cat(out)


@pytest.mark.parametrize("kind", ["qwen2", "llama", "quantized"])
def test_an_engine_lm_steps_through_the_direct_call_with_the_module_paths_bits(kind, counted):
    """engine.core.lm.HFModel takes the one-call decoder's direct step (no causal-LM or decoder module call) for a
    plain forward, and its logits are the bits of the forward through the model's modules."""
    from engine.core.lm import HFModel

    if kind == "quantized":
        _qgemm_or_skip()
        model = _wide_quantized(False)
        assert fast_decoder.use_fast_decoder(model)
    else:
        model = _wide(kind)
        use_dense_kernel(model)
    lm = HFModel(model)
    assert lm.lean_step is not None and lm.lean_step.with_head is not None  # its head joins the decoder's call
    direct, heads = [], []
    inner, inner_head = lm.lean_step.fn, lm.lean_step.with_head
    lm.lean_step.fn = lambda *a: direct.append(a[0].shape[1]) or inner(*a)
    lm.lean_step.with_head = lambda *a: heads.append(a[0].shape[1]) or inner_head(*a)
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(14))
    lean = _engine_steps(lm, ids)
    # every short forward took the layers, the final norm and the head in one call; the prefill the long path
    assert heads == [1, 1, 1, 3] and direct == [] and counted == [1, 1, 1, 3]
    lm.lean_step.with_head = None
    without_head = _engine_steps(lm, ids)
    assert direct == [1, 1, 1, 3] and counted == [1, 1, 1, 3] * 2  # the decoder's call, then the head's own
    step = lm.lean_step
    lm.lean_step = None
    plain = _engine_steps(lm, ids)
    lm.lean_step = step
    assert counted == [1, 1, 1, 3] * 3 and direct == [1, 1, 1, 3]  # the module path runs the decoder's C call
    assert torch.equal(lean, without_head) and torch.equal(lean, plain)


def test_the_direct_step_declines_a_cache_it_does_not_follow_and_the_lm_falls_back():
    from engine.core.lm import HFModel

    model = _wide("qwen2")
    use_dense_kernel(model)
    lm = HFModel(model)
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(15))
    with torch.inference_mode():
        lm.prefill(ids[0, :40].tolist())
        assert lm.lean_step(ids[:, 40:41], lm.cache, 39) is None  # the cache holds 40 rows, not 39
        assert lm.lean_step(ids[:, 40:41], lm.cache, 39, head=True) is None
        assert lm.cache.get_seq_length() == 40
        h = lm.lean_step(ids[:, 40:41], lm.cache, 40)
    assert h.shape == (1, 1, 128) and lm.cache.get_seq_length() == 41 and lm.length == 40
    lm.cache.crop(-1)  # the direct call leaves the wrapper's bookkeeping to its caller
    taken = []
    inner, inner_head = lm.lean_step.fn, lm.lean_step.with_head
    lm.lean_step.fn = lambda *a: taken.append(a[2]) or inner(*a)
    lm.lean_step.with_head = lambda *a: taken.append(a[2]) or inner_head(*a)
    a = lm.forward_ids(ids[:, 40:41], position_ids=torch.tensor([[40]]))  # explicit positions: the module path
    assert taken == [] and lm.length == 41 and lm.cache.get_seq_length() == 41
    lm.crop(40)
    b = lm.forward_ids(ids[:, 40:41])
    assert taken == [40] and lm.length == 41 and lm.cache.get_seq_length() == 41
    assert torch.equal(a, b)


def test_the_fast_decoders_rope_rows_are_the_rotary_modules_own():
    """Every position's cos / sin the fast decoder reads (including past the table's first size, where it grows)
    equal the rotary module's output for that position alone, the module on the table as every accelerated model's
    is (rope_table): a step through speclab_decoder and one through the modules take the same rope bits."""
    import transformers

    from engine.kernels import rope_table

    cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=128, intermediate_size=96, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)  # head_dim 64, rope_theta 1e6
    model = transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
    dec = model.model
    assert rope_table.use_rope_table(model)
    h = torch.zeros(1, 1, 128, dtype=torch.bfloat16)
    positions = [0, 1, 7, 4095, 4096, 4097, 9000, 9001]
    with torch.inference_mode():
        for p in positions:
            cos, sin = fast_decoder._rope(dec, h.expand(1, 2, 128), p, 2, None)
            want = dec.rotary_emb(h.expand(1, 2, 128), position_ids=torch.tensor([[p, p + 1]]))
            assert torch.equal(cos, want[0]) and torch.equal(sin, want[1])
    assert dec.rotary_emb._speclab_rope_table["f32"][0].shape[0] >= 9003


def test_the_final_norm_on_every_path_is_the_c_norm_and_close_to_transformers():
    """With a tail, the decoder's final norm module computes fused.rms (the tail's bits) on every path; it stays
    within a bf16 rounding step of transformers' own RMSNorm (only the order of the sum of squares differs)."""
    model = _wide("llama")
    use_dense_kernel(model)
    dec = model.get_decoder()
    assert getattr(dec, "_speclab_tail", None) is not None
    x = torch.randn(5, 128, generator=torch.Generator().manual_seed(3)).bfloat16()
    with torch.inference_mode():
        ours = dec.norm(x)
        theirs = type(dec.norm).forward(dec.norm, x)
    assert torch.equal(ours, fused.rms(dense_kernel._lib, x, dec.norm.weight, dec.norm.variance_epsilon))
    assert torch.allclose(ours.float(), theirs.float(), rtol=2 ** -7, atol=1e-3)


def test_a_head_with_a_bias_keeps_its_own_call():
    model = _wide("qwen2")
    head = model.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features, dtype=torch.bfloat16))
    use_dense_kernel(model)
    dec = model.get_decoder()
    assert getattr(dec, "_speclab_tail", None) is None and "forward" not in dec.norm.__dict__
    from engine.core.lm import HFModel

    assert HFModel(model).lean_step.with_head is None


def test_a_forward_that_needs_gradients_keeps_transformers_norm():
    model = _wide("llama")
    use_dense_kernel(model)
    norm = model.get_decoder().norm
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(4)).bfloat16().requires_grad_()
    y = norm(x)
    assert y.grad_fn is not None  # transformers' ops, differentiable; the C norm would have none
    with torch.no_grad():
        assert torch.equal(y, type(norm).forward(norm, x))
