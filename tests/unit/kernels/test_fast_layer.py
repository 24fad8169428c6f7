"""The lean decoder-layer forward: the same bits as the transformers layer it replaces (decode steps, a verify
of several rows, a crop), no extra weight memory, and the fall-backs (long forwards, grad)."""

import pytest
import torch

from engine.kernels import dense_kernel, fast_layer
from engine.kernels.fast_layer import use_dense_kernel, use_fast_layers
from engine.core.kv_cache import GrowingCache

pytestmark = pytest.mark.skipif(dense_kernel.available() is not None,
                                reason=f"dense kernel: {dense_kernel.available()}")


@pytest.fixture(autouse=True)
def _lean_layers():
    """These tests hold the lean Python layer to the transformers layer's bits: the C layer the dense path takes
    where it can (fused_layer.h) is switched off here and tested in test_fused.py."""
    old, fast_layer.FUSED[0] = fast_layer.FUSED[0], False
    yield
    fast_layer.FUSED[0] = old


def _model(kind: str):
    import transformers

    if kind == "qwen2":
        cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2)
        cls = transformers.Qwen2ForCausalLM
    else:
        cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2)
        cls = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    return cls(cfg).to(torch.bfloat16).eval()


def _decode(model, ids):
    """Logits of a 40-token prefill (the layer's own forward), three one-token steps, a crop and a 3-row verify."""
    cache = GrowingCache()
    out = []
    with torch.inference_mode():
        out.append(model(ids[:, :40], past_key_values=cache, use_cache=True).logits[:, -1])
        for t in range(40, 43):
            out.append(model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits[0])
        cache.crop(-2)
        out.append(model(ids[:, 41:44], past_key_values=cache, use_cache=True).logits[0])
    return torch.cat(out)


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_the_patched_layers_return_the_same_bits(kind):
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(1))
    ref_model = _model(kind)
    use_dense_kernel(ref_model)  # kernels and fast layers
    slow_calls = []
    for layer in ref_model.model.layers:
        layer._speclab_slow = (lambda f: lambda *a, **k: slow_calls.append(1) or f(*a, **k))(layer._speclab_slow)
    fast = _decode(ref_model, ids)
    assert not slow_calls  # every forward here (≤ MAX_ROWS rows, plain causal) took the lean path
    slow_model = _model(kind)
    n = use_dense_kernel(slow_model)
    for layer in slow_model.model.layers:  # undo the patch: the transformers forward on the same kernels
        del layer.forward
    assert n and torch.equal(fast, _decode(slow_model, ids))
    layer = ref_model.model.layers[0]
    assert "forward" in layer.__dict__ and layer.self_attn.q_proj.weight.data_ptr() == layer._speclab_qkv[0].data_ptr()


def test_layers_it_does_not_patch_and_forwards_it_leaves_alone():
    model = _model("qwen2")
    use_dense_kernel(model)
    assert use_fast_layers(model) == 0  # already patched: nothing twice
    layer = model.model.layers[0]
    calls = []
    slow = layer._speclab_slow
    layer._speclab_slow = lambda *a, **k: calls.append(1) or slow(*a, **k)
    with torch.inference_mode():
        model(torch.randint(0, 96, (1, dense_kernel.MAX_ROWS + 1)), past_key_values=GrowingCache(), use_cache=True)
    assert calls  # a prefill longer than MAX_ROWS runs the layer's own forward
    f32 = _model("llama").float()
    assert use_fast_layers(f32) == 0  # float32 weights: not the kernel's


def _quantized(mixed: bool, model=None):
    """A tiny Qwen2 (or `model`) on our qgemm kernel: int4 everywhere, or (mixed) v_proj at 6 bits and down_proj
    at 8, as a GGUF Q4_K_M keeps some of them in Q6_K (a q|k|v product of a 4-bit and a 6-bit segment)."""
    from engine.kernels import qkernel
    from engine.kernels.quant import quantize_model
    from engine.kernels.rowwise_attention import use_rowwise

    model = _model("qwen2") if model is None else model
    dense = {n: (m.weight.detach().clone(), None if m.bias is None else m.bias.detach().clone())
             for n, m in model.named_modules() if n.endswith(("v_proj", "down_proj"))}
    quantize_model(model, "int4")
    if mixed:
        for n, (w, b) in dense.items():
            parent, _, attr = n.rpartition(".")
            setattr(model.get_submodule(parent), attr, qkernel.QGemmLinear(w, b, 6 if attr == "v_proj" else 8))
    use_rowwise(model)
    return model


@pytest.mark.parametrize("mixed", [False, True])
def test_the_quantized_layers_return_the_same_bits(mixed):
    from engine.kernels import qkernel

    if qkernel.available() is not None:
        pytest.skip(f"qgemm kernel: {qkernel.available()}")
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(2))
    fast_model = _quantized(mixed)
    assert use_fast_layers(fast_model) == 2
    layer = fast_model.model.layers[0]
    slow_calls = []
    for lay in fast_model.model.layers:
        lay._speclab_slow = (lambda f: lambda *a, **k: slow_calls.append(1) or f(*a, **k))(lay._speclab_slow)
    fast = _decode(fast_model, ids)
    assert not slow_calls
    assert torch.equal(fast, _decode(_quantized(mixed), ids))  # the transformers layers on the same kernel
    gp, up = layer.mlp.gate_proj, layer.mlp.up_proj
    assert up.q.data_ptr() == gp.q.data_ptr() + gp.q.numel()  # stacked gate|up: views, no copy


def test_accelerate_puts_a_quantized_model_on_the_lean_layers():
    from engine.kernels import qkernel
    from engine.kernels.accelerate import accelerate

    if qkernel.available() is not None:
        pytest.skip(f"qgemm kernel: {qkernel.available()}")
    model = _model("llama")
    accelerate(model, "int4")
    assert all("forward" in layer.__dict__ for layer in model.model.layers)
