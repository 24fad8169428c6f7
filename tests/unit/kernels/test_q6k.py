"""GGUF Q6_K blocks read as they are (engine/kernels/q6k_rows.h, qkernel's q6k_* and block_unpack, quant's block
layers): the layout is llama.cpp's (gguf-py de-quantises our blocks to the same floats), the kernel computes x·Ŵᵀ
of exactly those weights, batch-invariant, every byte it reads moves the output as the reference says, the C layer
runs them and a model takes them only where they are its weights — on this CPU's build, and the same tests again on
the AVX2 build (its own loop: qgemm.c's qgroup)."""

import numpy as np
import pytest
import torch

from engine.kernels import qkernel
from tests.unit.kernels.test_qkernel import run_on_the_avx2_build
from tests.unit.kernels.test_q50_q80 import _untied_qwen
from tests.unit.models.test_gguf_blocks import _write_gguf

needs_q6k = pytest.mark.skipif(qkernel.available() is not None or not qkernel.reads(qkernel.Q6K),
                               reason=f"Q6_K blocks run on the qgemm kernel (this CPU: "
                                      f"{qkernel.available() or qkernel.variant()})")


def _weights(n=40, k=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    w[0, :16] = torch.linspace(0.01, 0.3, 16)  # a sub-block above zero: its scale code negative
    w[1, 16:32] = 0.0                         # a sub-block of zeros: sc = 0
    w[2, 256:] = 0.0                          # a block of zeros: d = 0
    return w


def test_our_blocks_are_llama_cpps_layout():
    import gguf

    w = _weights()
    b = qkernel.q6k_pack(w)
    assert b.dtype == torch.uint8 and b.shape == (40, 512 // 256 * 210)
    theirs = gguf.quants.dequantize(b.numpy(), gguf.GGMLQuantizationType.Q6_K).reshape(40, 512)
    ours = qkernel.block_unpack(b, qkernel.Q6K)
    assert torch.equal(ours, torch.from_numpy(np.ascontiguousarray(theirs)).float())
    assert (ours - w).abs().max() <= 0.006  # a step of the widest sub-block (a rounded scale code clips its extreme)
    assert torch.equal(ours[1, 16:32], torch.zeros(16)) and torch.equal(ours[2, 256:], torch.zeros(256))
    with pytest.raises(ValueError, match="multiple of 256"):
        qkernel.q6k_pack(torch.zeros(4, 288))


@needs_q6k
@pytest.mark.parametrize("n,k", [(40, 512), (7, 1536), (3, 8960), (32, 512)])
@pytest.mark.parametrize("tiled", [False, pytest.param(True, marks=pytest.mark.skipif(
    not qkernel.tiles(), reason="no AMX int8 tiles here"))])
def test_the_kernel_computes_x_times_the_blocks_weights(n, k, tiled, monkeypatch):
    """With the AMX tiles asked for (where this machine has them) rows in sixteens go on them (Q6KT), else as stored."""
    monkeypatch.setenv("SPECLAB_QTILES", "1" if tiled else "0")
    w = _weights(n, k, seed=k)
    b = qkernel.q6k_pack(w)
    lin = qkernel.QGemmLinear.from_blocks(b, None, qkernel.Q6K)
    assert lin.fmt == "q6_k" and (lin.out_features, lin.in_features) == (n, k)
    assert lin.bits == (qkernel.Q6KT if n % 16 == 0 and tiled else qkernel.Q6K)
    assert torch.equal(qkernel.as_gguf_blocks(lin.q, lin.bits), b)
    assert sum(t.numel() * t.element_size() for t in lin.buffers()) == n * k // 256 * 210  # 6.5625 bits a weight
    x = (torch.randn(9, k, generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    ref = x.float() @ qkernel.block_unpack(b, qkernel.Q6K).T
    assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02
    # a one-row step (its own specialised body) and every chunk size give each row the same bits
    assert torch.equal(torch.cat([lin(x[i:i + 1]) for i in range(9)]), lin(x))
    assert torch.equal(qkernel.dequant_bf16(lin.q, lin.s, lin.mn, lin.bits),
                       qkernel.block_unpack(b, qkernel.Q6K).bfloat16())


@needs_q6k
def test_every_byte_the_kernel_reads_moves_the_output_as_the_reference_says():
    """A low nibble and a high nibble of ql, each of qh's four bit pairs, a sub-block's scale code and d: flipped,
    the product changes as x·Ŵᵀ of the flipped blocks says (x picks isolated weights, so each flip shows)."""
    k = 256
    w = _weights(8, k, seed=5)
    x = torch.zeros(1, k)
    for j in (3, 40, 64 + 7, 96 + 30, 128 + 5, 255):
        x[0, j] = 1.0
    x = x.to(torch.bfloat16)
    b = qkernel.q6k_pack(w)
    # (byte, mask): ql low nibble of weight 3; ql byte 40 low nibble (weight 40); ql byte 7's high nibble (weight 71);
    # qh byte 30 bits 6–7 (weight 126); qh byte 3 bits 0–1 (weight 3); ql of the second half (weight 133); the scale
    # of sub-block 15 (weights 240…255); d
    for off, mask in ((3, 0x01), (40, 0x04), (7, 0x20), (128 + 30, 0x80), (128 + 3, 0x02), (64 + 5, 0x08),
                      (192 + 15, 0x10), (209, 0x04)):
        c = b.clone()
        c[:, off] ^= mask
        assert not torch.equal(qkernel.block_unpack(c, qkernel.Q6K), qkernel.block_unpack(b, qkernel.Q6K)), off
        before = qkernel.QGemmLinear.from_blocks(b, None, qkernel.Q6K)(x)
        after = qkernel.QGemmLinear.from_blocks(c, None, qkernel.Q6K)(x)
        want = x.float() @ qkernel.block_unpack(c, qkernel.Q6K).T
        assert not torch.equal(before, after), off
        assert torch.allclose(after.float(), want, rtol=0.02, atol=2e-3), off


def test_the_avx2_build_reads_the_blocks_alike(tmp_path):
    """This module's kernel, byte, model and C-layer tests, run again in a process on the AVX2 build."""
    (tmp_path / "m").mkdir()
    code = (
        "import sys\n"
        "sys.path.insert(0, '.')\n"
        "from pathlib import Path\n"
        "import pytest\n"
        "from tests.unit.kernels import test_q6k as t\n"
        "assert qkernel.reads(qkernel.Q6K)\n"
        "mp = pytest.MonkeyPatch()\n"
        "for n, k in ((40, 512), (7, 1536), (3, 8960)):\n"
        "    t.test_the_kernel_computes_x_times_the_blocks_weights(n, k, False, mp)\n"
        "t.test_every_byte_the_kernel_reads_moves_the_output_as_the_reference_says()\n"
        f"t.test_a_model_takes_q6_k_blocks_only_where_they_are_its_weights(Path({str(tmp_path / 'm')!r}), False, mp)\n"
        "t._c_layer_q6k()\n"
        "print('ok')\n")
    run_on_the_avx2_build(code, tmp_path)


@needs_q6k
@pytest.mark.parametrize("tiled", [False, pytest.param(True, marks=pytest.mark.skipif(
    not qkernel.tiles(), reason="no AMX int8 tiles here"))])
def test_a_model_takes_q6_k_blocks_only_where_they_are_its_weights(tmp_path, tiled, monkeypatch):
    from engine.kernels.quant import quantize_model
    from engine.models.gguf_blocks import GGUFBlocks

    monkeypatch.setenv("SPECLAB_QTILES", "1" if tiled else "0")
    model = _untied_qwen()
    fmt = {f"model.layers.{i}.{m}.weight": qkernel.Q6K for i in range(2) for m in ("self_attn.v_proj", "mlp.down_proj")}
    fmt["lm_head.weight"] = qkernel.Q6K
    _write_gguf(tmp_path / "m.gguf", model, list(fmt), bits=fmt, swap_rows="model.layers.1.mlp.down_proj.weight")
    src = GGUFBlocks(tmp_path / "m.gguf")
    assert all(src.bits(n) == qkernel.Q6K for n in fmt)
    report = quantize_model(model, "int4", gguf_blocks=src)
    kinds = {n: m.fmt for n, m in model.named_modules() if hasattr(m, "fmt")}
    assert sum(f == "q6_k" for f in kinds.values()) == 4 and kinds["lm_head"] == "q6_k"
    assert kinds["model.layers.1.mlp.down_proj"] == "int4"  # its file rows are not the model's: re-quantised
    assert any("re-quantised for model.layers.1.mlp.down_proj.weight" in n for n in report.notes)
    for name in [n for n in fmt if n != "model.layers.1.mlp.down_proj.weight"]:
        lin = model.get_submodule(name.rsplit(".", 1)[0])
        assert torch.equal(qkernel.as_gguf_blocks(lin.q, lin.bits), src(name))  # the file's own blocks
    # a reduced head cut from the blocks keeps their rows (sixteen of them: on the AMX tiles where the head is, so
    # the same kernel and the same bits)
    ids = torch.tensor([3, 7, 50, 95, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14])
    from engine.core.lm import HFModel

    head = model.get_output_embeddings()
    sub = HFModel(model, name="tiny", vocab_subset=ids)._subset_head(ids)
    assert sub.fmt == "q6_k" and sub.bits == head.bits == (qkernel.Q6KT if tiled else qkernel.Q6K)
    assert torch.equal(qkernel.as_gguf_blocks(sub.q, sub.bits), qkernel.as_gguf_blocks(head.q, head.bits)[ids])
    h = torch.randn(2, 256).to(torch.bfloat16)
    assert torch.equal(sub(h), head(h)[:, ids])


@needs_q6k
@pytest.mark.parametrize("tiled", [False, pytest.param(True, marks=pytest.mark.skipif(
    not qkernel.tiles(), reason="no AMX int8 tiles here"))])
def test_the_c_layer_runs_q6_k_products_batch_invariant_and_as_the_modules_do(tiled):
    """A Q4_K_M layer's mix — Q4_K q, k, o, gate, up; Q6_K v and down — in the C layer: a verify equals one-row
    steps, and its logits are the lean layer's (one QGemmLinear call a product); on the AMX tiles too, where asked
    for."""
    _c_layer_q6k(tiled)


def _c_layer_q6k(tiled: bool = False) -> None:
    """The test above's body (the AVX2 build's run below calls it as it is)."""
    import os

    from engine.kernels.rowwise_attention import use_rowwise
    from tests.unit.kernels.test_fused import check_c_layer_against_lean
    from tests.unit.models.test_gguf_blocks import _tiny_qwen

    saved = os.environ.get("SPECLAB_QTILES")
    os.environ["SPECLAB_QTILES"] = "1" if tiled else "0"
    try:
        model = _tiny_qwen()
        for name, lin in [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]:
            parent, _, attr = name.rpartition(".")
            pack, bits = (qkernel.q6k_pack, qkernel.Q6K) if attr in ("v_proj", "down_proj") else (qkernel.q4k_pack, qkernel.Q4K)
            setattr(model.get_submodule(parent), attr, qkernel.QGemmLinear.from_blocks(pack(lin.weight.float()), lin.bias, bits))
    finally:
        if saved is None:
            os.environ.pop("SPECLAB_QTILES")
        else:
            os.environ["SPECLAB_QTILES"] = saved
    use_rowwise(model)
    check_c_layer_against_lean(model, 4)
    q4k, q6k = (qkernel.Q4KT, qkernel.Q6KT) if tiled else (qkernel.Q4K, qkernel.Q6K)
    assert [s[1] for s in model.model.layers[0]._speclab_mm["qkv"].parts[0]] == [q4k, q4k, q6k]
