"""engine.models.pair_weights: each model of a pair on its own weights path — parsing, what this CPU refuses or
falls back to (CPU flags monkeypatched), and a mixed pair (dense target, quantized draft) decoding losslessly:
greedy equal to the target's own AR, and sampled continuations χ²-equal to the target's exact joint."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from engine.kernels import dense_kernel, qkernel
from engine.models import pair_weights
from engine.core.lm import HFModel
from engine.models.pair_weights import PairWeights, parse, parse_list
from engine.kernels.quant import quantize_model
from engine.models.tiny import noisy_copy, tiny_llama


def test_parse_gives_each_model_its_path_and_a_label_that_parses_back():
    assert parse("quantized") == PairWeights("quantized", "quantized")
    mixed = parse("target=dense,draft=quantized")
    assert mixed == PairWeights("dense", "quantized") and mixed.mixed and mixed.slug == "dense-quantized"
    assert parse(mixed.label) == mixed and parse(" draft = int8 ") == PairWeights("dense", "int8")
    assert parse("target=int4") == PairWeights("int4", "dense") and not parse("int8").mixed


@pytest.mark.parametrize("text, words", [
    ("fp8", "unknown weights path 'fp8'"), ("target=dense,draft=fp8", "draft: unknown weights path 'fp8'"),
    ("target=dense,target=int8", "target is given twice"), ("model=dense", "expected target=PATH,draft=PATH"),
    ("target:dense", "unknown weights path")])
def test_bad_paths_are_refused_in_one_line(text, words):
    with pytest.raises(ValueError, match=words) as e:
        parse(text)
    assert "\n" not in str(e.value)


def test_parse_list_keeps_plain_lists_and_takes_semicolons_between_mixed_pairs():
    assert [p.label for p in parse_list("dense,quantized")] == ["dense", "quantized"]
    assert parse_list("target=dense,draft=quantized") == [PairWeights("dense", "quantized")]
    assert [p.label for p in parse_list("dense; target=dense,draft=quantized")] == ["dense", "target=dense,draft=quantized"]
    with pytest.raises(ValueError, match="name each path once"):
        parse_list("dense,dense")
    with pytest.raises(ValueError, match="empty"):
        parse_list(" ")


@pytest.fixture()
def cpu(monkeypatch):
    """Set this machine's CPU flags (and forget the kernels' cached availability) for one test."""
    def set_flags(flags):
        for mod in (qkernel, dense_kernel):
            monkeypatch.setattr(mod, "cpu_flags", lambda f=frozenset(flags): set(f))
            monkeypatch.setattr(mod, "_lib", None)
            monkeypatch.setattr(mod, "_why", None)
        monkeypatch.setattr(dense_kernel, "_variant", None)
        monkeypatch.setattr(dense_kernel, "_native_bf16", None)
        monkeypatch.setattr(pair_weights, "_SAID", set())
    monkeypatch.delenv("SPECLAB_QGEMM", raising=False)
    monkeypatch.delenv("SPECLAB_NO_QGEMM", raising=False)
    monkeypatch.delenv("SPECLAB_DENSE_KERNEL", raising=False)
    monkeypatch.delenv("SPECLAB_BGEMV", raising=False)
    return set_flags


def test_an_avx2_only_cpu_runs_our_bf16_kernel_without_a_fallback_line(cpu, monkeypatch):
    cpu({"avx2", "fma", "f16c"})
    monkeypatch.setattr(qkernel, "library", lambda b: pytest.fail("status must not build a kernel the CPU lacks")
                        if "avx2" not in b.name else (__import__("pathlib").Path("/nonexistent.so"), "cache"))
    said = []
    assert pair_weights.announce("dense", "bf16", "cpu", say=said.append) is None and said == []
    assert dense_kernel.loaded_variant() == "bgemv-avx2"  # the AVX2 build, not torch's emulated bf16
    assert pair_weights.status("dense", "fp32", "cpu") is None  # fp32 is torch's GEMM by design


def test_a_cpu_without_avx2_falls_back_to_torch_for_bf16_in_one_line(cpu):
    cpu({"sse4_2", "f16c"})
    line = pair_weights.status("dense", "bf16", "cpu")
    assert "torch's GEMM instead of our bf16 kernel (this CPU lacks avx2, fma)" in line
    assert "bf16 is emulated on this CPU, --dtype fp32 is faster" in line


def test_a_cpu_without_avx2_runs_torchs_quantized_kernels_and_says_so(cpu):
    cpu({"sse4_2"})
    line = pair_weights.status("quantized", "auto", "cpu")
    assert line == "weights quantized: torch's int4/int8 kernels instead of our qgemm kernel (this CPU lacks avx2, f16c, fma)"


def test_no_compiler_is_a_fallback_naming_it(cpu, monkeypatch, tmp_path):
    cpu({"avx2", "fma", "f16c"})
    monkeypatch.setenv("SPECLAB_CACHE", str(tmp_path))  # nothing built before
    monkeypatch.setenv("SPECLAB_KERNEL_BUILD", "cache")  # as if the install step had built nothing either
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert "(no C compiler (" in pair_weights.status("int8", "auto", "cpu")  # the one it tried, named
    line = pair_weights.status("quantized", "auto", "cpu")
    assert line.startswith("weights quantized: torch's int4/int8 kernels") and "\n" not in line


def test_the_avx2_build_on_a_cpu_without_vnni_is_named(cpu, monkeypatch):
    cpu({"avx2", "fma", "f16c", "avx512f"})
    monkeypatch.setattr(qkernel, "available", lambda: None)
    assert pair_weights.status("quantized") == ("weights quantized: our qgemm kernel's AVX2 build (this CPU lacks "
                                                 "avx512bw, avx512vl, avx512dq, avx512_vnni)")


def test_refusals_need_no_build_and_name_the_fix(cpu, monkeypatch):
    cpu({"avx2", "fma", "f16c"})
    monkeypatch.setenv("SPECLAB_QGEMM", "avx512vnni")
    why = pair_weights.refusal("quantized")
    assert "SPECLAB_QGEMM=avx512vnni" in why and "avx512_vnni" in why and "unset SPECLAB_QGEMM" in why
    with pytest.raises(ValueError, match="asks for a build this CPU cannot run"):
        pair_weights.announce("int4")
    assert pair_weights.refusal("dense") is None  # the dense path never needs qgemm
    monkeypatch.setenv("SPECLAB_QGEMM", "neon")
    assert "not a qgemm build" in pair_weights.refusal("int8")
    monkeypatch.delenv("SPECLAB_QGEMM")
    assert "runs on CPU kernels, not on cuda" in pair_weights.refusal("quantized", device="cuda")
    assert pair_weights.refusal("quantized", device="cpu") is None


# ------------------------------------------------------------------ a mixed pair decodes losslessly

VOCAB, N = 6, 2


def sharpened(seed: int):
    """A tiny Llama over VOCAB tokens with its head ×5: next-token laws visibly far from uniform (the top
    two-token continuation ~0.1), yet 32 of the 36 cells expect ≥ 5 of 400 samples."""
    m = tiny_llama(seed, vocab=VOCAB)
    with torch.no_grad():
        m.lm_head.weight.mul_(5.0)
    return m


@pytest.fixture(scope="module")
def mixed_pair():
    target = sharpened(0)
    draft = noisy_copy(target, 1, scale=0.3)
    quantize_model(draft, "int8")  # our qgemm kernel where this CPU has it, else torch's
    return HFModel(target, "tiny-dense"), HFModel(draft, "tiny-int8")


def test_a_mixed_pair_is_a_pair_and_its_greedy_output_is_the_targets_own(mixed_pair):
    from engine.models.load import check_pair
    from engine.decode import DecodeConfig, decode
    from engine.policies.base import parse_policy
    from engine.run import model_info

    target, draft = mixed_pair
    check_pair(target, draft)  # two paths, one vocabulary: allowed
    assert model_info(target)["weights"] == "dense" and model_info(draft)["weights"] == "int8"
    for prompt in ([1, 5, 3], [2], [4, 4, 0, 1]):
        ar = [t for s in decode(target, None, prompt, None, DecodeConfig(max_new_tokens=12)) for t in s.emitted_tokens]
        sd = [t for s in decode(target, draft, prompt, parse_policy("fixed:3"), DecodeConfig(max_new_tokens=12))
              for t in s.emitted_tokens]
        assert sd == ar


def test_a_mixed_pair_whose_vocabularies_differ_is_refused_as_before():
    from engine.models.load import check_pair

    small = tiny_llama(1, vocab=32)
    quantize_model(small, "int8", kernel="torch")
    with pytest.raises(ValueError, match=r"draft vocabulary \(32 tokens\) differs from the target's \(64 tokens\)"):
        check_pair(HFModel(tiny_llama(0)), HFModel(small))


def exact_joint(lm: HFModel, prompt: list[int], n: int):
    """Every length-n continuation and its exact probability under the model (float64 softmax of its logits)."""
    cells = list(itertools.product(range(VOCAB), repeat=n))
    law: dict[tuple, np.ndarray] = {}
    for z in itertools.chain.from_iterable(itertools.product(range(VOCAB), repeat=k) for k in range(n)):
        with torch.no_grad():
            logits = lm.model(torch.tensor([prompt + list(z)])).logits[0, -1].double()
        law[z] = torch.softmax(logits, -1).numpy()
    probs = np.array([np.prod([law[z[:i]][z[i]] for i in range(n)]) for z in cells])
    return cells, probs


@pytest.mark.slow
def test_chi_square_a_mixed_pair_samples_the_targets_own_law(mixed_pair):
    from scipy.stats import chisquare

    from engine.core.sampling import SamplingConfig
    from engine.decode import DecodeConfig, decode
    from engine.policies.base import parse_policy

    target, draft = mixed_pair
    prompt, samples = [1, 3], 400
    cells, expected = exact_joint(target, prompt, N)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells))
    pol = parse_policy("fixed:2")
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=N, sampling=SamplingConfig(temperature=1.0, seed=s))
        out = [t for r in decode(target, draft, prompt, pol, cfg) for t in r.emitted_tokens]
        counts[index[tuple(out)]] += 1
    exp = expected * samples
    order = np.argsort(exp)  # pool the rarest cells until the pooled bin expects ≥ 5
    k, pooled = 0, 0.0
    while k < len(exp) and (pooled < 5 or exp[order[k]] < 5):
        pooled += exp[order[k]]
        k += 1
    obs_b = np.append(counts[order[k:]], counts[order[:k]].sum())
    exp_b = np.append(exp[order[k:]], pooled)
    assert len(exp_b) >= 20, "the target's law is too peaked for the test to say anything"
    p = chisquare(obs_b, exp_b).pvalue
    assert p > 1e-4, (p, obs_b, exp_b)
    # The statistic has power here: the quantized draft's own law (TV 0.19 from the target's), sampled as
    # often, is rejected — a loop that emitted the draft's tokens unverified would fail this test.
    _, draft_law = exact_joint(draft, prompt, N)
    wrong = np.random.default_rng(0).multinomial(samples, draft_law / draft_law.sum())
    wrong_b = np.append(wrong[order[k:]], wrong[order[:k]].sum())
    assert chisquare(wrong_b, exp_b).pvalue < 1e-4
