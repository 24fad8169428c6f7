"""The quantized fast path: the kernels' formats, the GGUF plan, exactness of the decode loop on it
(greedy = its own AR; χ² at T = 0.7 on the real quantized models), and its refusals."""

import itertools

import numpy as np
import pytest
import torch

from engine.kernels import qkernel
from engine.core.lm import HFModel
from engine.kernels.accelerate import accelerate
from engine.kernels.quant import (GROUP, Int4Linear, Int8Linear, plan, quantize_model, quantized_linear, weights_of)
from engine.core.sampling import SamplingConfig
from engine.decode import DecodeConfig, decode
from engine.policies.base import parse_policy
from tests.conftest import noisy_copy, pooled_chi_square, tiny_llama


def quantized_pair(weights="int4", vocab=64, seed=0, sharpen=1.0, kernel="auto"):
    """A tiny target and its noisy-copy draft, quantized; `sharpen` scales both heads (peakier p and q)."""
    t = tiny_llama(seed, vocab=vocab).to(torch.bfloat16)
    d = noisy_copy(tiny_llama(seed, vocab=vocab), seed + 1, scale=0.3).to(torch.bfloat16)
    with torch.no_grad():
        for m in (t, d):
            m.get_output_embeddings().weight.mul_(sharpen)
    for m in (t, d):  # what model loading runs: the quantizer and, on our kernel, the row-wise attention
        accelerate(m, weights, act_dtype=torch.bfloat16, kernel=kernel)
    return t, d


KERNELS = ["torch", pytest.param("auto", marks=pytest.mark.skipif(
    qkernel.available() is not None, reason=f"qgemm kernel: {qkernel.available()}"))]


def test_int8_rows_round_to_within_half_a_step():
    w = torch.randn(48, 64)
    lin = Int8Linear(w, None, torch.float32)
    step = w.abs().amax(dim=1, keepdim=True) / 127
    assert (lin.dequantized() - w).abs().le(step / 2 + 1e-6).all()
    x = torch.randn(3, 64)
    torch.testing.assert_close(lin(x), x @ lin.dequantized().T, atol=1e-4, rtol=1e-4)


def test_int4_recovers_a_grid_of_sixteen_levels_exactly():
    """A weight already on a 16-level grid per 32-group (what a GGUF Q4_K group is) comes back as it was,
    up to the bf16 rounding of the scale and zero."""
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (32, 2 * GROUP), generator=g).float()
    q[:, 0], q[:, 1], q[:, GROUP], q[:, GROUP + 1] = 0, 15, 0, 15  # every group spans its range
    s = torch.rand(32, 2, generator=g).repeat_interleave(GROUP, dim=1) * 0.1 + 0.01
    w = q * s - 0.3
    lin = Int4Linear(w, None, torch.bfloat16)
    assert (lin.dequantized() - w).abs().max() < 0.01 * w.abs().max()
    x = torch.randn(2, 2 * GROUP, dtype=torch.bfloat16)
    ref = x.float() @ lin.dequantized().T
    torch.testing.assert_close(lin(x).float(), ref, atol=0.05 * ref.abs().max().item(), rtol=0)


def test_an_untileable_int4_shape_falls_back_to_int8():
    lin = lambda n, k: quantized_linear(torch.randn(n, k), None, "int4", kernel="torch")  # noqa: E731
    assert isinstance(lin(24, 64), Int8Linear)  # N % 16 ≠ 0
    assert isinstance(lin(32, 48), Int8Linear)  # K % 32 ≠ 0
    assert isinstance(lin(32, 64), Int4Linear)
    assert isinstance(quantized_linear(torch.randn(32, 48), None, "int4"), Int8Linear)  # no kernel takes K = 48
    six = quantized_linear(torch.randn(32, 64), None, "int6", kernel="torch")
    assert isinstance(six, Int8Linear)  # torch has no 6-bit layer


def test_plan_follows_the_gguf_types_and_names_a_tensor_it_cannot_run():
    m = tiny_llama(0, layers=1)
    types = {f"{n}.weight": "Q4_K" for n, mod in m.named_modules() if isinstance(mod, torch.nn.Linear)}
    types["model.layers.0.mlp.down_proj.weight"] = "Q6_K"
    types["model.layers.0.mlp.gate_proj.weight"] = "Q8_0"
    types["model.layers.0.self_attn.v_proj.weight"] = "F16"
    p = plan(m, "quantized", types)
    assert p["model.layers.0.mlp.down_proj"] == "int6" and p["model.layers.0.self_attn.q_proj"] == "int4"
    assert p["model.layers.0.mlp.gate_proj"] == "int8"
    assert p["model.layers.0.self_attn.v_proj"] == "dense"
    types["model.layers.0.mlp.up_proj.weight"] = "IQ2_XXS"
    with pytest.raises(ValueError, match=r"tensor model.layers.0.mlp.up_proj.weight is GGUF IQ2_XXS.*--weights dense"):
        plan(m, "quantized", types)
    with pytest.raises(ValueError, match="unknown weights path 'int3'"):
        plan(m, "int3")
    assert set(plan(m, "quantized").values()) == {"int8"}  # no GGUF record: int8 everywhere


def test_quantize_model_swaps_every_linear_and_keeps_the_head_rows():
    m = tiny_llama(0).to(torch.bfloat16)
    emb = m.get_input_embeddings().weight
    rep = quantize_model(m, "int4", kernel="torch")
    assert weights_of(m) == "int4" and rep.layers.get("int4 (Int4Linear)", 0) >= 14
    assert rep.quant_bytes < rep.dense_bytes
    assert not any(isinstance(x, torch.nn.Linear) for x in m.modules())
    assert m.get_output_embeddings().weight.shape == (64, 32)
    assert m.get_input_embeddings().weight is emb  # the lookup table stays dense


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("weights", ["int4", "int8"])
@pytest.mark.parametrize("policy", ["fixed:3", "confidence:0.5"])
def test_greedy_on_the_quantized_path_equals_its_own_ar(weights, policy, kernel):
    t, d = quantized_pair(weights, kernel=kernel)
    target, draft = HFModel(t, "qt"), HFModel(d, "qd")
    assert target.weights == weights
    for prompt in ([1, 5, 9, 3], [7, 7, 2]):
        ar = [x for s in decode(target, None, prompt, None, DecodeConfig(max_new_tokens=20)) for x in s.emitted_tokens]
        sd_steps = list(decode(target, draft, prompt, parse_policy(policy), DecodeConfig(max_new_tokens=20)))
        sd = [x for s in sd_steps for x in s.emitted_tokens]
        assert sd == ar
        assert len(sd_steps) < 20, "the noisy draft should be accepted sometimes"


def test_a_pair_on_two_paths_is_a_pair():
    """A dense target may take a quantized draft (engine.models.pair_weights); its losslessness is tested there."""
    from engine.models.load import check_pair

    t = HFModel(tiny_llama(0))
    d = tiny_llama(1)
    quantize_model(d, "int8")
    check_pair(t, HFModel(d))
    assert (t.weights, HFModel(d).weights) == ("dense", "int8")


def test_reduced_head_of_a_quantized_model_is_quantized_too():
    m = tiny_llama(0).to(torch.bfloat16)
    quantize_model(m, "int8")
    lm = HFModel(m, vocab_subset=torch.arange(0, 64, 2))
    logits = lm.extend([1, 2, 3])
    assert type(lm.sub_head.inner) is type(m.get_output_embeddings()) and lm.sub_head.inner.fmt == "int8"
    assert torch.isinf(logits[:, 1::2]).all() and torch.isfinite(logits[:, ::2]).all()


@pytest.mark.slow
def test_chi_square_on_the_quantized_models_at_t07():
    """Two tokens sampled by the real loop on real int4 models (vocab 16, T = 0.7) against the exact joint of
    the quantized target's own T = 0.7 distribution: speculative sampling is exact for the p and q it gets."""
    t, d = quantized_pair("int4", vocab=16, seed=3, sharpen=30.0, kernel="torch")
    target, draft = HFModel(t, "qt"), HFModel(d, "qd")
    prompt, temp, n, samples = [1, 2, 3], 0.7, 2, 6000

    def joint(tau):
        def dist(ctx):
            return torch.softmax(HFModel(t).extend(list(ctx))[-1].double() / tau, -1)

        first, seconds = dist(prompt), {a: dist(prompt + [a]) for a in range(16)}
        return np.array([float(first[a] * seconds[a][b]) for a, b in cells])

    cells = list(itertools.product(range(16), repeat=n))
    expected = joint(temp)
    counts = np.zeros(len(cells))
    index = {c: i for i, c in enumerate(cells)}
    pol = parse_policy("fixed:2")
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=temp, seed=s))
        out = tuple(x for r in decode(target, draft, prompt, pol, cfg) for x in r.emitted_tokens)
        counts[index[out]] += 1

    def pvalue(joint_probs):
        return pooled_chi_square(counts, joint_probs, samples)

    assert pvalue(expected) > 1e-4
    assert pvalue(joint(1.0)) < 1e-4  # the statistic has power here: a loop that dropped T would fail
