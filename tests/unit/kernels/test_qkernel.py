"""Our qgemm kernel (AVX-512 VNNI or AVX2 build): packing round trip, the product against its own dequantized weights, batch
invariance (what makes greedy speculative decoding exact on this path), and the refusals."""

import pytest
import torch

from engine.kernels import qkernel
from engine.kernels.qkernel import GROUP, QGemmLinear, pack, unpack

needs_kernel = pytest.mark.skipif(qkernel.available() is not None, reason=f"qgemm kernel: {qkernel.available()}")


@pytest.mark.parametrize("bits", [4, 6, 8])
def test_pack_reads_back_within_half_a_step_of_each_group(bits):
    w = torch.randn(16, 3 * GROUP)
    q, s, mn = pack(w, bits)
    back = unpack(q, s, mn, bits)
    step = s.float().repeat_interleave(GROUP, dim=1)
    assert (back - w).abs().le(step / 2 + 1e-3 * w.abs().max()).all()
    assert q.dtype == torch.uint8 and q.shape == (16, 3 * GROUP * bits // 8)


def test_a_group_already_on_a_sixty_four_level_grid_is_kept_and_laid_out_as_the_kernel_reads_it():
    torch.manual_seed(6)
    levels = torch.randint(0, 64, (2, 32)).float()
    levels[:, 7], levels[:, 21] = 0.0, 63.0  # each group spans the whole grid
    w = (0.03125 * levels - 1.0).reshape(1, 64).repeat(3, 1)  # fp16-exact scale and minimum
    q, s, mn = pack(w, 6)
    assert torch.equal(unpack(q, s, mn, 6), w)
    # qgemm.c's layout, a pair of groups in 48 bytes: each group's low nibbles as a 4-bit group (byte j: q[j] |
    # q[16 + j] << 4), then each group's 8 bytes of top bits (byte j: q[j], q[8 + j], q[16 + j], q[24 + j] in bit
    # pairs 0–1 … 6–7)
    lv = levels.to(torch.int64)
    assert q.shape == (3, 48)
    assert q[0, 16 + 3].item() == (lv[1, 3] & 15) | ((lv[1, 19] & 15) << 4)
    assert q[0, 32 + 8 + 5].item() == sum(((lv[1, 8 * i + 5] >> 4) & 3) << (2 * i) for i in range(4))
    odd = torch.randn(2, 3 * GROUP)  # a last lone group: 16 bytes of nibbles, then its 8 of top bits
    q3, q2 = pack(odd, 6)[0], pack(odd[:, :2 * GROUP], 6)[0]
    assert q3.shape == (2, 72) and torch.equal(q3[:, :48], q2)
    assert torch.equal(q3[:, 48:64], pack(odd[:, 2 * GROUP:], 6)[0][:, :16])


def test_a_group_already_on_a_sixteen_level_grid_is_kept():
    levels = torch.arange(16.0).repeat(2)[torch.randperm(32)]
    w = (0.125 * levels - 0.5)[None].repeat(16, 1)  # fp16-exact scale and minimum
    q, s, mn = pack(w, 4)
    assert torch.equal(unpack(q, s, mn, 4), w)


@needs_kernel
@pytest.mark.parametrize("bits", [4, 6, 8])
@pytest.mark.parametrize("k", [GROUP, 28 * GROUP, 29 * GROUP])  # odd group counts take the tail loop
def test_the_kernel_computes_x_times_its_dequantized_weights(bits, k):
    torch.manual_seed(bits + k)
    w = torch.randn(40, k)
    lin = QGemmLinear(w, torch.randn(40), bits)
    x = torch.randn(11, k, dtype=torch.bfloat16)  # 11 rows: a chunk of 8 and one of 3
    ref = x.float() @ lin.dequantized().T + lin.bias.float()
    err = (lin(x).float() - ref).abs().max() / ref.abs().max()
    assert err < 0.02  # int8 activations per group of 32 + bf16 output


@needs_kernel
@pytest.mark.parametrize("bits", [4, 6, 8])
def test_rows_are_bit_identical_whatever_the_batch(bits):
    w = torch.randn(64, 4 * GROUP)
    lin = QGemmLinear(w, None, bits)
    x = torch.randn(13, 4 * GROUP, dtype=torch.bfloat16)
    one_by_one = torch.cat([lin(x[i:i + 1]) for i in range(13)])
    assert torch.equal(one_by_one, lin(x))
    for m in (2, 3, 4):  # the common verify sizes, each its own specialised body
        assert torch.equal(one_by_one[:m], lin(x[:m])), m
    torch.set_num_threads(1)
    try:
        assert torch.equal(lin(x), one_by_one)  # and whatever the thread count
    finally:
        torch.set_num_threads(2 if torch.get_num_threads() < 2 else torch.get_num_threads())


@needs_kernel
def test_activations_round_half_to_even_and_a_nan_counts_as_zero():
    """One-hot 8-bit weights read back each quantized activation: with max|x| = 127 the step d is 1, so
    y[n] = a[n] = lrint(x[n]) exactly (ties to even, as the scalar quantizer did; a NaN → 0, ignored by the max)."""
    lin = QGemmLinear(torch.zeros(GROUP, GROUP), None, 8)
    lin.q.copy_(torch.eye(GROUP, dtype=torch.uint8))
    lin.s.fill_(1.0)
    lin.mn.zero_()
    vals = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, 126.5, float("nan"), -3.25, 3.75]
    x = torch.zeros(1, GROUP)
    x[0, :len(vals)] = torch.tensor(vals)
    y = lin(x.to(torch.bfloat16)).float()[0]
    want = [127, 0, 2, 2, 0, -2, 126, 0, -3, 4] + [0] * (GROUP - len(vals))
    assert y.tolist() == want


def test_shapes_the_kernel_cannot_take():
    assert not QGemmLinear.fits(torch.zeros(8, 40)) and QGemmLinear.fits(torch.zeros(8, 64))


def test_without_the_cpu_flags_it_says_why(monkeypatch):
    monkeypatch.setattr(qkernel, "_lib", None)
    monkeypatch.setattr(qkernel, "_why", None)
    monkeypatch.setattr(qkernel, "cpu_flags", lambda: {"avx2", "fma"})
    assert qkernel.available() == "this CPU lacks f16c"


def test_the_avx2_build_computes_the_same_products(tmp_path):
    """The AVX2 build (what a CPU without AVX-512 VNNI runs), in a fresh process forced by SPECLAB_QGEMM:
    the same products as the dequantized weights, rows batch-invariant, 8-bit weights without saturation."""
    code = (
        "for bits in (4, 6, 8):\n"
        "    w = torch.randn(47, 96) * 3\n"  # an odd row count: the kernel's single-row tail
        "    lin = qkernel.QGemmLinear(w, None, bits)\n"
        "    x = (torch.randn(9, 96) * 4).to(torch.bfloat16)\n"
        "    ref = x.float() @ lin.dequantized().T\n"
        "    assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02, bits\n"
        "    assert torch.equal(torch.cat([lin(x[i:i + 1]) for i in range(9)]), lin(x))\n"
        "print('ok')\n")
    run_on_the_avx2_build(code, tmp_path)


def run_on_the_avx2_build(code: str, tmp_path) -> None:
    """`code` (which prints 'ok') in a fresh process whose qgemm is the AVX2 build (SPECLAB_QGEMM), its own cache,
    torch and qkernel imported and the generator seeded; skipped on a CPU without AVX2."""
    import os
    import subprocess
    import sys

    if "avx2" not in qkernel.cpu_flags():
        pytest.skip("this CPU has no AVX2")
    head = ("import torch\n"
            "from engine.kernels import qkernel\n"
            "assert qkernel.available() is None and qkernel.variant() == 'avx2', qkernel.available()\n"
            "torch.manual_seed(0)\n")
    env = {**os.environ, "SPECLAB_QGEMM": "avx2", "SPECLAB_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", head + code], env=env, capture_output=True, text=True, timeout=120,
                       cwd=str(qkernel.SOURCE.parents[2]))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


@needs_kernel
@pytest.mark.parametrize("bits", [4, 6, 8])
def test_a_long_forward_runs_dense_on_the_same_weights(bits):
    w = torch.randn(32, 2 * GROUP)
    lin = QGemmLinear(w, None, bits)
    assert torch.equal(qkernel.dequant_bf16(lin.q, lin.s, lin.mn, bits), lin.dequantized().to(torch.bfloat16))
    lin.dense_rows = 64  # as the AVX-512 build does; the AVX2 build never takes this branch
    x = torch.randn(lin.dense_rows + 5, 2 * GROUP, dtype=torch.bfloat16)
    ref = x.float() @ lin.dequantized().T
    assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02


@needs_kernel
def test_a_long_forward_stays_on_the_kernel_where_the_build_says_never(monkeypatch):
    w = torch.randn(32, 2 * GROUP)
    lin = QGemmLinear(w, None, 4)
    lin.dense_rows = None
    monkeypatch.setattr(qkernel, "dequant_bf16", lambda *a: pytest.fail("de-quantised a long forward"))
    x = torch.randn(300, 2 * GROUP, dtype=torch.bfloat16)
    y = lin(x)
    assert torch.equal(y[7:8], lin(x[7:8]))  # the kernel's rows are batch-invariant: row 7 alone is the same


def test_dense_rows_follow_the_build(monkeypatch):
    monkeypatch.setattr(qkernel, "variant", lambda: "avx2")
    assert qkernel.dense_rows() is None
    monkeypatch.setattr(qkernel, "variant", lambda: "avx512vnni")
    assert qkernel.dense_rows() == 64
