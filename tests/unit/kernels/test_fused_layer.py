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
    fast_layer.FUSED[0] = fused
    try:
        use_dense_kernel(model)
    finally:
        fast_layer.FUSED[0] = True
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


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_a_verify_gives_the_bits_of_one_row_steps(kind):
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(2))
    model = _patched(kind)
    with torch.inference_mode():
        c1 = GrowingCache()
        model(ids[:, :40], past_key_values=c1, use_cache=True)
        steps = torch.cat([model(ids[:, t:t + 1], past_key_values=c1, use_cache=True).logits[0] for t in range(40, 45)])
        c2 = GrowingCache()
        model(ids[:, :40], past_key_values=c2, use_cache=True)
        verify = model(ids[:, 40:45], past_key_values=c2, use_cache=True).logits[0]
    assert torch.equal(steps, verify)


def test_layers_the_c_layer_would_compute_differently_keep_the_lean_forward():
    model = _model("qwen2")
    model.model.layers[0].mlp.config.hidden_act = "gelu"  # one config: every layer's MLP reads it
    use_dense_kernel(model)
    assert all(layer.forward.__func__ is fast_layer._fast_forward for layer in model.model.layers)
