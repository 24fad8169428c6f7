"""The kernel comparison: every kernel on the same weights gives the same product (within its format's
error), and the table has one cell per kernel and shape."""

import torch

from engine.bench.kernels import compare, format_kernels, kernels_for


def test_every_kernel_computes_the_same_product():
    w = torch.randn(64, 128) * 0.02
    x = torch.randn(3, 128).to(torch.bfloat16)
    ref = x.float() @ w.T
    for name, (layer, nbytes) in kernels_for(w).items():
        y = layer(x).float()
        assert (y - ref).abs().max() < 0.15 * ref.abs().max(), name
        assert nbytes > 0


def test_the_gguf_block_formats_are_in_it_where_our_kernel_runs():
    import pytest

    from engine.kernels import qkernel

    if qkernel.available() is not None:
        pytest.skip(f"qgemm kernel: {qkernel.available()}")
    names = set(kernels_for(torch.randn(16, 256)))
    assert {"q4k", "q5_0", "q8_0"} <= names
    assert "q4k" not in kernels_for(torch.randn(16, 96)) and "q5_0" in kernels_for(torch.randn(16, 96))
    layer, nbytes = kernels_for(torch.randn(16, 256))["q5_0"]
    assert nbytes == 16 * 256 // 32 * 22 and layer.fmt == "q5_0"
    layer, nbytes = kernels_for(torch.randn(16, 256))["qgemm6"]  # int6, the Q6_K blocks' stand-in without the file
    assert layer.fmt == "int6" and nbytes == sum(t.numel() * t.element_size() for t in layer.buffers())
    assert ("q6_k" in names) == qkernel.reads(qkernel.Q6K)  # both builds read Q6_K
    if "q6_k" in names:
        layer, nbytes = kernels_for(torch.randn(16, 256))["q6_k"]
        assert nbytes == 16 * 210 and layer.fmt == "q6_k" and "q6_k" not in kernels_for(torch.randn(16, 96))


def test_rows_and_table():
    rows = compare(shapes=((64, 32),), ms=(1, 2), repeats=2)
    names = {r["kernel"] for r in rows}
    assert {"bf16", "torch4", "torch8"} <= names and len(rows) == 2 * len(names)
    assert all(r["ms"] > 0 and r["gb_per_s"] > 0 for r in rows)
    assert next(r for r in rows if r["kernel"] == "bf16")["vs_bf16"] == 1.0
    table = format_kernels(rows)
    assert table.count("| 64 → 32 |") == 2
