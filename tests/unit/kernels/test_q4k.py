"""GGUF Q4_K blocks read as they are (qgemm.c's Q4K, qkernel's q4k_*, models.gguf_blocks, quant's q4k layers):
the layout is llama.cpp's (gguf-py de-quantises our blocks to the same floats), the kernel computes x·Ŵᵀ of
exactly those weights in both builds, batch-invariant, and a model takes a GGUF's blocks only where they are its
loaded weights."""

import numpy as np
import pytest
import torch

from engine.kernels import qkernel
from tests.unit.kernels.test_qkernel import run_on_the_avx2_build
from tests.unit.models.test_gguf_blocks import _tiny_qwen, _write_gguf

needs_kernel = pytest.mark.skipif(qkernel.available() is not None, reason=f"qgemm kernel: {qkernel.available()}")
EMPTY = torch.empty(0, 0, dtype=torch.float16)


def _weights(n=40, k=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    w[0, :32] = torch.linspace(0.01, 0.3, 32)   # a group above zero: minimum code 0
    w[1, 32:64] = -torch.linspace(0.01, 0.3, 32)  # a group below zero
    w[2, 256:] = 0.0                               # a block of zeros: d = dmin = 0
    return w


def test_our_blocks_are_llama_cpps_layout():
    import gguf

    w = _weights()
    b = qkernel.q4k_pack(w)
    assert b.dtype == torch.uint8 and b.shape == (40, 512 // 256 * 144)
    theirs = gguf.quants.dequantize(b.numpy(), gguf.GGMLQuantizationType.Q4_K).reshape(40, 512)
    assert torch.equal(qkernel.q4k_unpack(b), torch.from_numpy(np.ascontiguousarray(theirs)).float())
    assert (qkernel.q4k_unpack(b) - w).abs().max() <= 0.02  # the plain encoder keeps weights near
    assert torch.equal(qkernel.q4k_unpack(b)[2, 256:], torch.zeros(256))


def test_rows_that_are_not_whole_blocks_are_refused():
    with pytest.raises(ValueError, match="multiple of 256"):
        qkernel.q4k_pack(torch.zeros(4, 288))
    with pytest.raises(ValueError, match="uint8"):
        qkernel.QGemmLinear.from_blocks(torch.zeros(4, 144, dtype=torch.float32), None)
    with pytest.raises(ValueError, match="uint8"):
        qkernel.QGemmLinear.from_blocks(torch.zeros(4, 100, dtype=torch.uint8), None)


@needs_kernel
@pytest.mark.parametrize("n,k", [(40, 512), (7, 1536), (3, 8960), (48, 512)])
@pytest.mark.parametrize("tiled", [False, pytest.param(True, marks=pytest.mark.skipif(
    not qkernel.tiles(), reason="no AMX int8 tiles here"))])
def test_the_kernel_computes_x_times_the_blocks_weights(n, k, tiled, monkeypatch):
    """With the AMX tiles asked for (SPECLAB_QTILES=1, where this machine has them) rows in sixteens go on them (Q4KT,
    the same bytes regrouped), else as stored; either way the product is x·Ŵᵀ of the blocks' own weights."""
    monkeypatch.setenv("SPECLAB_QTILES", "1" if tiled else "0")
    w = _weights(n, k, seed=k)
    b = qkernel.q4k_pack(w)
    lin = qkernel.QGemmLinear.from_blocks(b, None)
    assert lin.fmt == "q4k" and (lin.out_features, lin.in_features) == (n, k)
    assert lin.bits == (qkernel.Q4KT if n % 16 == 0 and tiled else qkernel.Q4K)
    assert torch.equal(qkernel.as_gguf_blocks(lin.q, lin.bits), b)
    assert sum(t.numel() * t.element_size() for t in lin.buffers()) == n * k // 256 * 144  # 4.5 bits a weight
    x = (torch.randn(9, k, generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    ref = x.float() @ qkernel.q4k_unpack(b).T
    assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02
    # a one-row step (its own specialised body) and every chunk size give each row the same bits
    assert torch.equal(torch.cat([lin(x[i:i + 1]) for i in range(9)]), lin(x))
    assert torch.equal(qkernel.dequant_bf16(lin.q, lin.s, lin.mn, lin.bits), qkernel.q4k_unpack(b).bfloat16())


@needs_kernel
def test_a_scale_or_minimum_code_read_wrong_moves_the_output():
    """Every code the kernel reads matters: flipping a high scale bit (byte 4's top bits feed sc_4) or a minimum's
    (byte 11's high nibble is m_7) changes the product as the reference says it should."""
    w = _weights(8, 256, seed=3)
    b = qkernel.q4k_pack(w)
    x = torch.randn(1, 256).to(torch.bfloat16)
    for byte, mask in ((4, 0x40), (15, 0x10), (16, 0x01)):  # sc_4's bit 4, m_7's bit 0, a nibble of group 0
        c = b.clone()
        c[:, byte] ^= mask
        lin = qkernel.QGemmLinear.from_blocks(c, None)
        ref = x.float() @ qkernel.q4k_unpack(c).T
        assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02, byte
        assert not torch.equal(qkernel.q4k_unpack(c), qkernel.q4k_unpack(b))


def test_the_avx2_build_reads_the_blocks_alike(tmp_path):
    code = (
        "w = torch.randn(47, 768) * 0.05\n"
        "lin = qkernel.QGemmLinear.from_blocks(qkernel.q4k_pack(w), None)\n"
        "x = (torch.randn(9, 768) * 4).to(torch.bfloat16)\n"
        "ref = x.float() @ qkernel.q4k_unpack(lin.q).T\n"
        "assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02\n"
        "assert torch.equal(torch.cat([lin(x[i:i + 1]) for i in range(9)]), lin(x))\n"
        "print('ok')\n")
    run_on_the_avx2_build(code, tmp_path)


# ------------------------------------------------------------------ a model taking a GGUF's blocks

@needs_kernel
def test_a_model_takes_a_ggufs_blocks_only_where_they_are_its_weights(tmp_path):
    from engine.kernels.quant import quantize_model
    from engine.models.gguf_blocks import GGUFBlocks

    model = _tiny_qwen()
    q4k = [f"model.layers.{i}.{m}.weight" for i in range(2)
           for m in ("self_attn.q_proj", "self_attn.k_proj", "mlp.gate_proj", "mlp.up_proj")]
    _write_gguf(tmp_path / "m.gguf", model, q4k, swap_rows="model.layers.1.mlp.up_proj.weight")
    x = torch.randint(0, 96, (1, 12))
    report = quantize_model(model, "int4", gguf_blocks=GGUFBlocks(tmp_path / "m.gguf"))
    kinds = {n: m.fmt for n, m in model.named_modules() if hasattr(m, "fmt")}
    assert sum(f == "q4k" for f in kinds.values()) == len(q4k) - 1
    assert kinds["model.layers.1.mlp.up_proj"] == "int4"  # its file rows are not the model's: re-quantised
    assert kinds["model.layers.0.self_attn.v_proj"] == "int4"  # not in the file
    assert any("model.layers.1.mlp.up_proj.weight" in n and "not the loaded weights" in n for n in report.notes)
    assert "q4k (QGemmLinear)" in report.summary()
    for name in q4k[:-1]:  # the layers read the file's own weights
        lin = model.get_submodule(name.rsplit(".", 1)[0])
        assert torch.equal(qkernel.as_gguf_blocks(lin.q, lin.bits), GGUFBlocks(tmp_path / "m.gguf")(name))
    lin = model.get_submodule("model.layers.0.mlp.gate_proj")  # a q4k layer against its dense weights
    h = torch.randn(3, 256).to(torch.bfloat16)
    want = h.float() @ lin.dequantized().T
    assert ((lin(h).float() - want).abs().max() / want.abs().max()) < 0.02
    with torch.inference_mode():
        assert torch.isfinite(model(x).logits).all()


@needs_kernel
@pytest.mark.parametrize("tiled", [False, pytest.param(True, marks=pytest.mark.skipif(
    not qkernel.tiles(), reason="no AMX int8 tiles here"))])
def test_the_c_layer_runs_q4k_products_batch_invariant_and_as_the_modules_do(tmp_path, tiled, monkeypatch):
    """q|k|v with Q4_K q and k and a 6-bit v (a Q4_K_M layer) in the C layer: a verify equals one-row steps, and
    the C layer (its products share one quantization of the activations, Q4_K's rows reading them in their own
    order) gives the logits of the lean layer, whose products are one QGemmLinear call each."""
    from engine.kernels.quant import quantize_model
    from engine.kernels.rowwise_attention import use_rowwise
    from engine.models.gguf_blocks import GGUFBlocks
    from tests.unit.kernels.test_fused import check_c_layer_against_lean

    monkeypatch.setenv("SPECLAB_QTILES", "1" if tiled else "0")
    model = _tiny_qwen()
    q4k = [f"model.layers.{i}.{m}.weight" for i in range(2)
           for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj")]
    _write_gguf(tmp_path / "m.gguf", model, q4k)
    v = {i: model.model.layers[i].self_attn.v_proj for i in range(2)}
    quantize_model(model, "int4", gguf_blocks=GGUFBlocks(tmp_path / "m.gguf"))
    for i, lin in v.items():
        model.model.layers[i].self_attn.v_proj = qkernel.QGemmLinear(lin.weight, lin.bias, 6)
    use_rowwise(model)
    check_c_layer_against_lean(model, 9)
    segs = model.model.layers[0]._speclab_mm["qkv"].parts[0]
    q4k = qkernel.Q4KT if tiled else qkernel.Q4K  # q and k on the AMX tiles when asked for
    assert [s[1] for s in segs] == [q4k, q4k, 6]
