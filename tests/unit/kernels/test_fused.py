"""The C decoder layer (engine/kernels/fused_layer.h via fast_layer._fused_forward): batch-invariant bit for bit
(a k-row verify equals k one-row steps, so greedy speculation stays lossless on the dense path), equal to the
transformers layer up to the norm's float32 summation order, and taken only by the layers it computes as
transformers does."""

import pytest
import torch

from engine.kernels import dense_kernel, fast_layer
from engine.kernels.fast_layer import use_dense_kernel
from engine.core.kv_cache import GrowingCache
from tests.unit.kernels.test_fast_layer import _decode, _model

pytestmark = pytest.mark.skipif(dense_kernel.available() is not None,
                                reason=f"dense kernel: {dense_kernel.available()}")


def _patched(kind, fused=True):
    model = _model(kind)
    old, fast_layer.FUSED[0] = fast_layer.FUSED[0], fused
    try:
        use_dense_kernel(model)
    finally:
        fast_layer.FUSED[0] = old
    return model


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_fused_layer_is_the_transformers_layer_up_to_the_norms_sum_order(kind):
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(1))
    fused, lean = _patched(kind), _patched(kind, fused=False)
    assert all(layer.forward.__func__ is fast_layer._fused_forward for layer in fused.model.layers)
    assert all(layer.forward.__func__ is fast_layer._fast_forward for layer in lean.model.layers)
    a, b = _decode(fused, ids), _decode(lean, ids)  # lean = the transformers layer's bits (test_fast_layer)
    assert torch.equal(a[0], b[0])  # the 40-token prefill runs the layer's own forward in both
    diff = (a.float() - b.float()).abs()
    scale = b.float().abs().max()
    assert diff.max() <= 0.03 * scale, (diff.max(), scale)
    assert (diff == 0).float().mean() > 0.5  # most logits identical: only rounding-boundary cases move
    assert torch.equal(a.argmax(-1), b.argmax(-1))


def _steps_and_verify(model, ids):
    """Logits of five one-row steps after a 40-token prefill, and of the same five rows as one verify."""
    with torch.inference_mode():
        c1 = GrowingCache()
        model(ids[:, :40], past_key_values=c1, use_cache=True)
        steps = torch.cat([model(ids[:, t:t + 1], past_key_values=c1, use_cache=True).logits[0] for t in range(40, 45)])
        c2 = GrowingCache()
        model(ids[:, :40], past_key_values=c2, use_cache=True)
        verify = model(ids[:, 40:45], past_key_values=c2, use_cache=True).logits[0]
    return steps, verify


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_a_verify_gives_the_bits_of_one_row_steps(kind):
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(2))
    steps, verify = _steps_and_verify(_patched(kind), ids)
    assert torch.equal(steps, verify)


def test_layers_the_c_layer_would_compute_differently_keep_the_lean_forward():
    model = _model("qwen2")
    model.model.layers[0].mlp.config.hidden_act = "gelu"  # one config: every layer's MLP reads it
    use_dense_kernel(model)
    assert all(layer.forward.__func__ is fast_layer._fast_forward for layer in model.model.layers)


def _qgemm_or_skip():
    from engine.kernels import qkernel

    if qkernel.available() is not None:
        pytest.skip(f"qgemm kernel: {qkernel.available()}")


def _quantized(mixed, fused=True):
    from engine.kernels.fast_layer import use_fast_layers
    from tests.unit.kernels.test_fast_layer import _quantized as build

    model = build(mixed)
    old, fast_layer.FUSED[0] = fast_layer.FUSED[0], fused
    try:
        assert use_fast_layers(model) == 2
    finally:
        fast_layer.FUSED[0] = old
    return model


@pytest.mark.parametrize("mixed", [False, True])
def test_the_quantized_c_layer_is_the_lean_layer_up_to_the_norms_sum_order(mixed):
    """On qgemm the C layer's products are the kernel's own rows (one packed segment per bit width: int4
    everywhere, or v_proj at 6 bits and down_proj at 8), the bias added after rounding as QGemmLinear adds it."""
    _qgemm_or_skip()
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(3))
    fused, lean = _quantized(mixed), _quantized(mixed, fused=False)
    layer = fused.model.layers[0]
    assert layer.forward.__func__ is fast_layer._fused_forward
    assert [s[1] for s in layer._speclab_mm["qkv"].parts[0]] == ([4, 4, 6] if mixed else [4])
    a, b = _decode(fused, ids), _decode(lean, ids)
    diff = (a.float() - b.float()).abs()
    assert diff.max() <= 0.03 * b.float().abs().max(), diff.max()
    assert torch.equal(a.argmax(-1), b.argmax(-1))


@pytest.mark.parametrize("mixed", [False, True])
def test_a_quantized_verify_gives_the_bits_of_one_row_steps(mixed):
    _qgemm_or_skip()
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(4))
    steps, verify = _steps_and_verify(_quantized(mixed), ids)
    assert torch.equal(steps, verify)


def _wide(kind):
    """A tiny model whose heads are 32 wide: the one-call layer's attention rows take it (head_dim % 32)."""
    import transformers

    cls, cfg_cls = ((transformers.Qwen2ForCausalLM, transformers.Qwen2Config) if kind == "qwen2"
                    else (transformers.LlamaForCausalLM, transformers.LlamaConfig))
    torch.manual_seed(0)
    cfg = cfg_cls(vocab_size=96, hidden_size=128, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2)
    return cls(cfg).to(torch.bfloat16).eval()


def _wide_quantized(mixed):
    from engine.kernels.fast_layer import use_fast_layers
    from tests.unit.kernels.test_fast_layer import _quantized as build

    model = build(mixed, _wide("qwen2"))
    assert use_fast_layers(model) == 2
    return model


def _one_and_three(model, ids, monkeypatch):
    """`_decode` (prefill, steps, a crop, a 3-row verify) with the layer in one call, then in three; the one-call
    runs counted, the cache made to grow in place while decoding (a first capacity of 2 rows past the prompt)."""
    from engine.core import kv_cache
    from engine.kernels import fused

    monkeypatch.setattr(kv_cache, "MIN_CAPACITY", 2)
    calls = []
    real = fused.layer
    monkeypatch.setattr(fused, "layer", lambda *a: calls.append(a[4].shape[0]) or real(*a))
    from engine.kernels import fast_decoder

    monkeypatch.setattr(fast_decoder, "ENABLED", [False])  # the layers' own calls (the decoder's: test_fast_decoder)
    old = fast_layer.ONE_CALL[0]
    try:
        fast_layer.ONE_CALL[0] = True
        one = _decode(model, ids)
        fast_layer.ONE_CALL[0] = False
        n_one = len(calls)
        three = _decode(model, ids)
    finally:
        fast_layer.ONE_CALL[0] = old
    assert n_one == 2 * 4 and len(calls) == n_one  # 2 layers × (3 steps + the verify); none with three calls
    return one, three


def _same_attention_rows() -> bool:
    """Whether the three-call layer's attention (dense_kernel.attention) runs attn_row.h, as speclab_layer does:
    the AVX2 bf16 build; the AVX-512 one sums q·k in 16-lane steps."""
    return dense_kernel.loaded_variant() == "bgemv-avx2"


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_one_call_layer_is_the_three_call_layer(kind, monkeypatch):
    model = _wide(kind)
    use_dense_kernel(model)
    assert all(layer._speclab_fused["one"] is not None for layer in model.model.layers)
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(5))
    one, three = _one_and_three(model, ids, monkeypatch)
    if _same_attention_rows():
        assert torch.equal(one, three)
    else:
        assert (one.float() - three.float()).abs().max() <= 0.03 * three.float().abs().max()
    assert torch.equal(one.argmax(-1), three.argmax(-1))


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_a_one_call_verify_gives_the_bits_of_one_row_steps(kind):
    model = _wide(kind)
    use_dense_kernel(model)
    steps, verify = _steps_and_verify(model, torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(6)))
    assert torch.equal(steps, verify)


def check_one_call_layer(model, seed, monkeypatch) -> torch.Tensor:
    """The one-call layer gives the three-call layer's tokens (its bits where both take attn_row.h) and a verify
    the bits of one-row steps; returns the steps' logits."""
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(seed))
    one, three = _one_and_three(model, ids[:, :44], monkeypatch)
    if _same_attention_rows():
        assert torch.equal(one, three)
    assert torch.equal(one.argmax(-1), three.argmax(-1))
    steps, verify = _steps_and_verify(model, ids)
    assert torch.equal(steps, verify)
    return steps


def check_c_layer_against_lean(model, seed) -> None:
    """`model` (its linears in place, row-wise attention on, no fast layers yet) on the C layers: a verify gives the
    bits of one-row steps, and its logits are those of the lean layers (one module call a product — a format's own
    order of the activations, say, checked against the product alone) up to the norms' sum order."""
    import copy

    lean = copy.deepcopy(model)
    assert fast_layer.use_fast_layers(model) == 2
    old, fast_layer.FUSED[0] = fast_layer.FUSED[0], False
    try:
        assert fast_layer.use_fast_layers(lean) == 2
    finally:
        fast_layer.FUSED[0] = old
    assert model.model.layers[0].forward.__func__ is fast_layer._fused_forward
    assert lean.model.layers[0].forward.__func__ is not fast_layer._fused_forward
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(seed))
    steps, verify = _steps_and_verify(model, ids)
    assert torch.equal(steps, verify)
    a, b = _decode(model, ids[:, :44]), _decode(lean, ids[:, :44])
    assert (a.float() - b.float()).abs().max() <= 0.03 * b.float().abs().max()
    assert torch.equal(a.argmax(-1), b.argmax(-1))


@pytest.mark.parametrize("mixed", [False, True])
def test_the_quantized_one_call_layer_is_the_three_call_layer_and_batch_invariant(mixed, monkeypatch):
    _qgemm_or_skip()
    check_one_call_layer(_wide_quantized(mixed), 7, monkeypatch)


def test_a_cache_that_cannot_be_written_in_place_keeps_three_calls():
    from transformers.cache_utils import DynamicCache

    model = _wide("qwen2")
    use_dense_kernel(model)
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(8))
    with torch.inference_mode():
        c1, c2 = DynamicCache(), GrowingCache()
        for c in (c1, c2):
            model(ids[:, :40], past_key_values=c, use_cache=True)
        a = model(ids[:, 40:42], past_key_values=c1, use_cache=True).logits  # torch.cat cache: no room to write
        b = model(ids[:, 40:42], past_key_values=c2, use_cache=True).logits
    assert c1.get_seq_length() == c2.get_seq_length() == 42
    if _same_attention_rows():
        assert torch.equal(a, b)
    assert torch.equal(a.argmax(-1), b.argmax(-1))
