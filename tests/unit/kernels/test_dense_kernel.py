"""Our dense bf16 kernels (bf16_kernels.c with AVX-512 BF16, bf16_kernels_avx2.c with AVX2 + FMA; every test runs on
each build this CPU can run): the product against float32 matmul, bias, batch invariance (what makes greedy
speculative decoding exact on the dense path), routing a model's linears through it, and the refusals."""

import math

import pytest
import torch

from engine.kernels import dense_kernel
from engine.kernels.dense_kernel import MAX_ROWS, bgemv, fits, linear
from engine.kernels.fast_layer import use_dense_kernel

needs_kernel = pytest.mark.skipif(dense_kernel.available() is not None,
                                  reason=f"dense kernel: {dense_kernel.available()}")
RUNNABLE = [v for v, need in dense_kernel.VARIANTS.items() if all(f in dense_kernel.cpu_flags() for f in need)]


@pytest.fixture(params=RUNNABLE or ["none"], autouse=True)
def build(request, monkeypatch):
    """Each test once per build this CPU runs (an AVX-512 BF16 machine runs the AVX2 build too)."""
    if request.param != "none":
        monkeypatch.setenv("SPECLAB_BGEMV", request.param)
        for name in ("_lib", "_why", "_variant"):
            monkeypatch.setattr(dense_kernel, name, None)
        if dense_kernel.available() is not None:
            pytest.skip(f"dense kernel {request.param}: {dense_kernel.available()}")
        assert dense_kernel.loaded_variant() == request.param
    return request.param


@needs_kernel
@pytest.mark.parametrize("rows", [1, 3, 4, 7])  # chunks of four activation rows and their tails
@pytest.mark.parametrize("n", [5, 64, 67])  # blocks of four weight rows and their tails
@pytest.mark.parametrize("k", [96, 1056, 2080])  # short rows and row blocks: AVX2 K ≤ 1024, AVX-512 K ≤ 2048 (+ tail steps)
def test_the_kernel_computes_x_times_w_plus_b(rows, n, k):
    torch.manual_seed(rows * 100 + n)
    w = torch.randn(n, k, dtype=torch.bfloat16)
    b = torch.randn(n, dtype=torch.bfloat16)
    x = torch.randn(rows, k, dtype=torch.bfloat16)
    ref = x.float() @ w.float().T + b.float()
    y = bgemv(x, w, b)
    assert y.dtype == torch.bfloat16 and y.shape == (rows, n)
    assert ((y.float() - ref).abs() <= 1e-2 * ref.abs() + 1e-2).all()  # float32 sums, one bf16 rounding


@needs_kernel
@pytest.mark.parametrize("k", [256, 1056, 2080])  # short rows and row blocks on each build (AVX2 ≤ 1024, AVX-512 ≤ 2048)
def test_rows_are_bit_identical_whatever_the_batch_and_threads(k):
    # each weight row carries a cancelling pair ±2¹⁶ at two of a few positions where x is 1, so the float32 sums
    # round at a scale near the result's own and a different summation order shows in the bf16 result (with plain
    # randn data a reordered sum rounds to the same bf16 nearly always, and such a test could not fail)
    torch.manual_seed(k)
    w = torch.randn(131, k)
    x = torch.randn(20, k)
    spots = torch.tensor([0, 20, 37, 70, 101, 250])
    x[:, spots] = 1.0
    for n in range(131):
        i, j = spots[torch.randperm(len(spots))[:2]]
        w[n, i], w[n, j] = 2.0 ** 16, -(2.0 ** 16)
    w, x = w.to(torch.bfloat16), x.to(torch.bfloat16)
    one_by_one = torch.cat([bgemv(x[i:i + 1], w) for i in range(20)])
    assert torch.equal(one_by_one, bgemv(x, w))
    for m in (2, 3, 4, 5, 6, 7, 16, 17):  # every verify size's own passes (rows of 3 and 2 short; 2 and 1 in
        # blocks; the AMX build's 16 rows a pass and one more)
        assert torch.equal(one_by_one[:m], bgemv(x[:m], w)), m
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert torch.equal(bgemv(x, w), one_by_one)
    finally:
        torch.set_num_threads(n)


@needs_kernel
def test_linear_takes_short_forwards_and_leaves_long_ones_to_torch():
    w = torch.randn(32, 64, dtype=torch.bfloat16)
    short = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    assert torch.equal(linear(short, w), bgemv(short.reshape(6, 64), w).reshape(2, 3, 32))
    long = torch.randn(MAX_ROWS + 1, 64, dtype=torch.bfloat16)
    assert torch.equal(linear(long, w), torch.nn.functional.linear(long, w))
    f32 = torch.randn(2, 64)
    assert torch.equal(linear(f32, w.float()), torch.nn.functional.linear(f32, w.float()))


@needs_kernel
def test_a_model_is_routed_through_the_kernel_and_its_attention_made_rowwise():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, 96, (1, 9))
    with torch.inference_mode():
        before = model(ids).logits
        assert use_dense_kernel(model) == 2 * 7 + 1  # q k v o, gate up down per layer, and the head
        after = model(ids).logits
    assert dense_kernel.kernel_of(model) == "speclab bgemv"
    assert model.config._attn_implementation == "speclab_rowwise"
    assert (after.float() - before.float()).abs().max() < 0.05 * before.float().abs().max()


def test_weights_it_does_not_take():
    assert fits(torch.zeros(8, 64, dtype=torch.bfloat16))
    assert not fits(torch.zeros(8, 40, dtype=torch.bfloat16))  # K not a multiple of 32
    assert not fits(torch.zeros(8, 64))  # float32: the skinny fp32 path's
    assert not fits(torch.zeros(64, 8, dtype=torch.bfloat16).T)  # not contiguous


def test_without_the_cpu_flags_or_opted_out_it_says_why_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(dense_kernel, "_lib", None)
    monkeypatch.setattr(dense_kernel, "_why", None)
    monkeypatch.delenv("SPECLAB_BGEMV", raising=False)
    monkeypatch.setattr(dense_kernel, "cpu_flags", lambda: {"sse4_2", "avx512f", "avx512bw", "avx512vl", "avx512dq"})
    assert dense_kernel.available() == "this CPU lacks avx2, fma"
    lin = torch.nn.Linear(64, 8).to(torch.bfloat16)
    assert use_dense_kernel(lin) == 0 and "forward" not in lin.__dict__
    monkeypatch.setattr(dense_kernel, "_why", None)
    monkeypatch.setenv("SPECLAB_DENSE_KERNEL", "torch")
    assert dense_kernel.available() == "disabled by SPECLAB_DENSE_KERNEL=torch"


def test_a_wrong_weight_shape_is_refused_in_one_line():
    if dense_kernel.available() is not None:
        pytest.skip(f"dense kernel: {dense_kernel.available()}")
    with pytest.raises(ValueError, match="contiguous weight"):
        bgemv(torch.zeros(1, 64, dtype=torch.bfloat16), torch.zeros(8, 32, dtype=torch.bfloat16))


@needs_kernel
def test_attention_is_causal_grouped_and_row_by_row():
    from engine.kernels.dense_kernel import attention

    torch.manual_seed(3)
    h, hkv, d, n, q = 6, 2, 64, 37, 4
    buf_k = torch.randn(1, hkv, 50, d, dtype=torch.bfloat16)  # a cache buffer with room: keys are a strided view
    buf_v = torch.randn(1, hkv, 50, d, dtype=torch.bfloat16)
    key, value = buf_k[:, :, :n], buf_v[:, :, :n]
    query = torch.randn(1, q, h, d, dtype=torch.bfloat16).transpose(1, 2)  # [1, H, q, D] as transformers passes it
    out = attention(query, key, value, d ** -0.5)
    assert out.shape == (1, q, h, d)
    for i in range(q):
        m = n - q + i + 1
        for head in range(h):
            kv = head // (h // hkv)
            w = torch.softmax(query[0, head, i].float() @ key[0, kv, :m].float().T * d ** -0.5, dim=-1)
            ref = w @ value[0, kv, :m].float()
            assert torch.allclose(out[0, i, head].float(), ref, atol=2e-2, rtol=2e-2)
        alone = attention(query[:, :, i:i + 1], key[:, :, :m], value[:, :, :m], d ** -0.5)
        assert torch.equal(alone[0, 0], out[0, i])  # the same bits as that row's own one-token step
    assert attention(query.float(), key.float(), value.float(), 1.0) is None  # float32: the torch path's


def test_the_build_is_chosen_by_the_cpu_flags(monkeypatch):
    monkeypatch.delenv("SPECLAB_BGEMV", raising=False)
    avx512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
    monkeypatch.setattr(dense_kernel, "cpu_flags", lambda: avx512 | {"avx512_bf16", "amx_tile", "amx_bf16"})
    assert dense_kernel.variant() == "bgemv-amx"  # the tiles where the CPU has them
    assert dense_kernel.variant(skip=("bgemv-amx",)) == "bgemv"
    monkeypatch.setattr(dense_kernel, "cpu_flags", lambda: avx512 | {"avx512_bf16", "amx_tile"})
    assert dense_kernel.variant() == "bgemv"  # vdpbf16ps where the CPU has it (tiles without bf16 products: not)
    monkeypatch.setattr(dense_kernel, "cpu_flags", lambda: avx512 | {"avx512_bf16"})
    assert dense_kernel.variant() == "bgemv"
    monkeypatch.setattr(dense_kernel, "cpu_flags", lambda: avx512)
    assert dense_kernel.variant() == "bgemv-avx2"  # AVX-512 without BF16 (Zen 3 class, Skylake-SP): widen + FMA
    monkeypatch.setattr(dense_kernel, "cpu_flags", lambda: {"avx2"})
    assert dense_kernel.variant() is None  # no FMA


@pytest.mark.parametrize("native", [True, False])
def test_a_long_forward_runs_on_the_fastest_gemm_with_the_same_product(monkeypatch, native):
    from engine.kernels.dense_kernel import long_linear

    monkeypatch.setattr(dense_kernel, "_native_bf16", native)
    torch.manual_seed(5)
    w = torch.randn(700, 32, dtype=torch.bfloat16)  # 700 rows: past one chunk of widened rows (≥ 256)
    b = torch.randn(700, dtype=torch.bfloat16)
    x = torch.randn(80, 32, dtype=torch.bfloat16)  # > MAX_ROWS: a prefill
    ref = x.float() @ w.float().T + b.float()
    y = long_linear(x, w, b)
    assert y.dtype == torch.bfloat16 and y.shape == (80, 700)
    assert ((y.float() - ref).abs() <= 1e-2 * ref.abs() + 2e-2).all()
    assert torch.equal(linear(x[None], w, b)[0], y)  # linear routes a long forward there


def test_a_long_forward_of_a_models_own_parameter_runs_on_the_fast_gemm_without_grad(monkeypatch):
    """A model's Parameters keep requires_grad=True under inference_mode; the long path must still take them
    (it once sent them to torch's bf16 GEMM, ~5× slower on AVX2) — and leave them to autograd when grad is on."""
    calls = []
    real = dense_kernel.long_linear
    monkeypatch.setattr(dense_kernel, "long_linear", lambda *a: calls.append(1) or real(*a))
    w = torch.nn.Parameter(torch.randn(48, 64, dtype=torch.bfloat16))
    x = torch.randn(MAX_ROWS + 3, 64, dtype=torch.bfloat16)
    with torch.inference_mode():
        y = linear(x, w)
    assert calls and y.shape == (MAX_ROWS + 3, 48)
    calls.clear()
    out = linear(x, w)  # grad on: autograd's own linear, so the weight gets its gradient
    out.float().sum().backward()
    assert not calls and w.grad is not None and w.grad.shape == w.shape


@needs_kernel
@pytest.mark.parametrize("delta", [-60.0, -20.0, -12.5, -3.0, -1.0, 0.5, 2.0, 7.0, 15.0, 60.0])
def test_the_softmax_weights_are_the_logistic_of_a_score_gap(delta):
    """Two keys whose scores differ by delta, values one-hot: the output is (σ(delta), 1 − σ(delta)) up to the bf16
    rounding of the output — the softmax's exponential (a polynomial on AVX2) checked across its range."""
    from engine.kernels.dense_kernel import attention

    d = 64
    query = torch.zeros(1, 1, 1, d, dtype=torch.bfloat16)
    query[..., 0] = delta
    key = torch.zeros(1, 1, 2, d, dtype=torch.bfloat16)
    key[0, 0, 0, 0] = 1.0  # score delta; the second key scores 0
    value = torch.zeros(1, 1, 2, d, dtype=torch.bfloat16)
    value[0, 0, 0, 0] = value[0, 0, 1, 1] = 1.0
    out = attention(query, key, value, 1.0)[0, 0, 0].float()
    for got, want in zip(out[:2].tolist(), torch.sigmoid(torch.tensor([delta, -delta], dtype=torch.float64)).tolist()):
        half_step = 2.0 ** (math.frexp(want)[1] - 9)  # half a bf16 step at want: the output's own rounding
        assert abs(got - want) <= half_step + 1e-6 * want, (got, want)
    assert bool((out[2:] == 0).all())


@pytest.mark.skipif("bgemv-amx" not in RUNNABLE, reason="AMX tiles: this CPU has no amx_tile + amx_bf16")
def test_where_the_os_refuses_the_tiles_the_avx512_build_runs_and_says_so(monkeypatch, build):
    if build != "bgemv-amx":
        pytest.skip("once, on the AMX build")
    real = dense_kernel._open

    class Refused:  # the AMX library as an OS without the tile state leaves it: speclab_amx_ok() = 0
        def __init__(self, lib):
            self.lib = lib

        def __getattr__(self, name):
            return (lambda: 0) if name == "speclab_amx_ok" else getattr(self.lib, name)

    monkeypatch.setattr(dense_kernel, "_open", lambda name: (Refused(real(name)[0]), "cache") if name == "bgemv-amx"
                        else real(name))
    monkeypatch.delenv("SPECLAB_BGEMV", raising=False)
    for name in ("_lib", "_why", "_variant", "_amx_refused"):
        monkeypatch.setattr(dense_kernel, name, None)
    assert dense_kernel.available() is None
    assert dense_kernel.loaded_variant().startswith("bgemv (AMX passed over: the OS refused the AMX tile state")
    x, w = torch.randn(3, 64, dtype=torch.bfloat16), torch.randn(32, 64, dtype=torch.bfloat16)
    assert torch.allclose(bgemv(x, w).float(), x.float() @ w.float().T, rtol=1e-2, atol=1e-2)
    monkeypatch.setenv("SPECLAB_BGEMV", "bgemv-amx")  # forced onto the refused build: nothing else to run
    for name in ("_lib", "_why", "_variant", "_amx_refused"):
        monkeypatch.setattr(dense_kernel, name, None)
    assert "refused the AMX tile state" in dense_kernel.available()


@needs_kernel
@pytest.mark.parametrize("streams,threads", [(1, 1), (8, 2), (16, 2), (3, 2)])
def test_the_probes_read_takes_every_word_once(streams, threads):
    """read_probe.h: each word of the buffer summed exactly once, however the shares split into runs."""
    n = 64 * 8 * 3 * 16 * 2  # 64-byte lines for every (runs, threads) above
    buf = torch.randint(0, 2**40, (n,), dtype=torch.int64)
    assert dense_kernel.read_words(buf, streams, threads) == int(buf.sum()) % 2**64
    with pytest.raises(ValueError, match="not a multiple of 64"):
        dense_kernel.read_words(buf[:-1], streams, threads)


@pytest.mark.skipif("bgemv-amx" not in RUNNABLE, reason="AMX tiles: this CPU has no amx_tile + amx_bf16")
def test_where_the_amx_build_cannot_be_compiled_the_avx512_build_runs_and_says_why(monkeypatch, build):
    if build != "bgemv-amx":
        pytest.skip("once, on the AMX build")
    real = dense_kernel._open

    def no_amx_compiler(name):
        if name == "bgemv-amx":
            raise OSError("compiling bf16_kernels.c (bgemv-amx) failed: ['cc: error: unrecognized option -mamx-tile']")
        return real(name)

    monkeypatch.setattr(dense_kernel, "_open", no_amx_compiler)
    monkeypatch.delenv("SPECLAB_BGEMV", raising=False)
    for name in ("_lib", "_why", "_variant", "_amx_refused"):
        monkeypatch.setattr(dense_kernel, name, None)
    assert dense_kernel.available() is None
    assert dense_kernel.loaded_variant().startswith("bgemv (AMX passed over: the AMX build failed (compiling")
