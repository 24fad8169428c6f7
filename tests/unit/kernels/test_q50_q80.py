"""GGUF Q5_0 and Q8_0 blocks read as they are (qgemm.c's Q50 / Q80, qkernel's q50_* / q80_* and block_unpack,
quant's block layers, the reduced head cut from them): the layout is llama.cpp's (gguf-py de-quantises our blocks
to the same floats), the kernel computes x·Ŵᵀ of exactly those weights in both builds, batch-invariant, and a model
takes a GGUF's blocks only where they are its loaded weights."""

import numpy as np
import pytest
import torch

from engine.kernels import qkernel
from tests.unit.kernels.test_qkernel import run_on_the_avx2_build
from tests.unit.models.test_gguf_blocks import _tiny_qwen, _write_gguf

needs_kernel = pytest.mark.skipif(qkernel.available() is not None, reason=f"qgemm kernel: {qkernel.available()}")
FORMATS = [(qkernel.Q50, qkernel.q50_pack, "Q5_0"), (qkernel.Q80, qkernel.q80_pack, "Q8_0")]


def _weights(n=40, k=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.05
    w[0, :32] = torch.linspace(0.01, 0.3, 32)  # a group above zero
    w[1, 32:64] = 0.0                         # a group of zeros: d = 0
    return w


@pytest.mark.parametrize("bits,pack,gtype", FORMATS)
def test_our_blocks_are_llama_cpps_layout(bits, pack, gtype):
    import gguf

    w = _weights()
    b = pack(w)
    assert b.dtype == torch.uint8 and b.shape == (40, 512 // 32 * qkernel.BLOCKS[bits][2])
    theirs = gguf.quants.dequantize(b.numpy(), gguf.GGMLQuantizationType[gtype]).reshape(40, 512)
    assert torch.equal(qkernel.block_unpack(b, bits), torch.from_numpy(np.ascontiguousarray(theirs)).float())
    assert (qkernel.block_unpack(b, bits) - w).abs().max() <= (0.01 if bits == qkernel.Q50 else 0.0013)  # half a step of a 0.3-wide group
    assert torch.equal(qkernel.block_unpack(b, bits)[1, 32:64], torch.zeros(32))


def test_blocks_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match="Q5_0 blocks must be uint8"):
        qkernel.QGemmLinear.from_blocks(torch.zeros(4, 23, dtype=torch.uint8), None, qkernel.Q50)
    with pytest.raises(ValueError, match="Q8_0 blocks must be uint8"):
        qkernel.QGemmLinear.from_blocks(torch.zeros(4, 34, dtype=torch.int8), None, qkernel.Q80)
    with pytest.raises(ValueError, match="not 6"):
        qkernel.QGemmLinear.from_blocks(torch.zeros(4, 24, dtype=torch.uint8), None, 6)
    with pytest.raises(ValueError, match="multiple of 32"):
        qkernel.q50_pack(torch.zeros(4, 40))


@needs_kernel
@pytest.mark.parametrize("bits,pack,gtype", FORMATS)
@pytest.mark.parametrize("n,k", [(40, 512), (7, 896), (3, 4864), (65, 96)])  # 96: an odd last block
def test_the_kernel_computes_x_times_the_blocks_weights(bits, pack, gtype, n, k):
    w = _weights(n, k, seed=k) if n > 1 else torch.randn(n, k)
    lin = qkernel.QGemmLinear.from_blocks(pack(w), None, bits)
    assert lin.fmt == {qkernel.Q50: "q5_0", qkernel.Q80: "q8_0"}[bits]
    # Q5_0 rows of whole groups of four blocks run regrouped on the VNNI build (q5_runs.h), the same bytes
    regrouped = bits == qkernel.Q50 and k % 128 == 0 and qkernel.reads(qkernel.Q5R)
    assert lin.bits == (qkernel.Q5R if regrouped else bits)
    assert torch.equal(qkernel.as_gguf_blocks(lin.q, lin.bits), pack(w))
    assert (lin.out_features, lin.in_features) == (n, k)
    assert sum(t.numel() * t.element_size() for t in lin.buffers()) == n * k // 32 * qkernel.BLOCKS[bits][2]
    x = (torch.randn(9, k, generator=torch.Generator().manual_seed(1)) * 3).to(torch.bfloat16)
    ref = x.float() @ qkernel.block_unpack(pack(w), bits).T
    assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02
    # a one-row step (its own specialised body) and every chunk size give each row the same bits
    assert torch.equal(torch.cat([lin(x[i:i + 1]) for i in range(9)]), lin(x))
    assert torch.equal(qkernel.dequant_bf16(lin.q, lin.s, lin.mn, lin.bits), qkernel.block_unpack(pack(w), bits).bfloat16())


@needs_kernel
@pytest.mark.parametrize("k", [96, 128])  # 128: Q5_0 four blocks at a time (q5_runs.h) on the VNNI build
def test_every_bit_the_kernel_reads_moves_the_output_as_the_reference_says(k):
    """A Q5_0 fifth bit (of the first and of the last weight of a group), a nibble, a scale's bit, and a Q8_0
    value's sign bit: flipped, the product changes as x·Ŵᵀ of the flipped blocks says."""
    w = _weights(8, k, seed=5)
    x = torch.zeros(1, k)
    for j in (0, 31, 32 + 16, 64 + 5) + ((96 + 5, 96 + 20) if k == 128 else ()):  # isolated weights: each flip
        x[0, j] = 1.0                                                          # then moves y by its own size
    x = x.to(torch.bfloat16)
    cases = [(qkernel.Q50, qkernel.q50_pack, off, mask) for off, mask in
             ((2, 0x01), (5, 0x80), (22 + 6 + 0, 0x10), (44 + 1, 0x02))]  # qh bit 0, qh bit 31, a high nibble, d
    if k == 128:  # the fourth block: a low nibble, and the fifth bit of its weight 20 (qh bit 20: byte 2, bit 4)
        cases += [(qkernel.Q50, qkernel.q50_pack, off, mask) for off, mask in ((66 + 6 + 5, 0x01), (66 + 4, 0x10))]
    cases += [(qkernel.Q80, qkernel.q80_pack, off, mask) for off, mask in ((2, 0x80), (34 + 2 + 16, 0x40))]
    for bits, pack, off, mask in cases:
        b = pack(w)
        c = b.clone()
        c[:, off] ^= mask
        assert not torch.equal(qkernel.block_unpack(c, bits), qkernel.block_unpack(b, bits))
        before, after = qkernel.QGemmLinear.from_blocks(b, None, bits)(x), qkernel.QGemmLinear.from_blocks(c, None, bits)(x)
        want = x.float() @ qkernel.block_unpack(c, bits).T
        assert not torch.equal(before, after), (bits, off)
        assert torch.allclose(after.float(), want, rtol=0.02, atol=1e-3), (bits, off)


def test_the_avx2_build_reads_the_blocks_alike(tmp_path):
    code = (
        "for bits, pack in ((qkernel.Q50, qkernel.q50_pack), (qkernel.Q80, qkernel.q80_pack)):\n"
        "    for k in (96, 896):\n"
        "        w = torch.randn(47, k) * 0.05\n"
        "        lin = qkernel.QGemmLinear.from_blocks(pack(w), None, bits)\n"
        "        x = (torch.randn(9, k) * 4).to(torch.bfloat16)\n"
        "        ref = x.float() @ qkernel.block_unpack(lin.q, bits).T\n"
        "        assert ((lin(x).float() - ref).abs().max() / ref.abs().max()) < 0.02, (bits, k)\n"
        "        assert torch.equal(torch.cat([lin(x[i:i + 1]) for i in range(9)]), lin(x))\n"
        "        assert torch.equal(qkernel.dequant_bf16(lin.q, lin.s, lin.mn, bits), qkernel.block_unpack(lin.q, bits).bfloat16())\n"
        "        assert lin.bits == bits  # Q5_0 stays as stored: the regrouped layout is the VNNI build's\n"
        "import pytest\n"
        "assert not qkernel.reads(qkernel.Q5R)\n"
        "with pytest.raises(ValueError, match='Q5_0 blocks are read by the avx512vnni or amx build only; this CPU runs avx2'):\n"
        "    qkernel.QGemmLinear.from_blocks(qkernel.q5r_pack(qkernel.q50_pack(torch.randn(4, 128))), None, qkernel.Q5R)\n"
        "print('ok')\n")
    run_on_the_avx2_build(code, tmp_path)


# ------------------------------------------------------------------ a model taking a GGUF's blocks

def _untied_qwen():
    import transformers

    cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()


@needs_kernel
def test_a_model_takes_q5_0_and_q8_0_blocks_only_where_they_are_its_weights(tmp_path):
    from engine.kernels.quant import quantize_model
    from engine.models.gguf_blocks import GGUFBlocks

    model = _untied_qwen()
    fmt = {f"model.layers.{i}.{m}.weight": qkernel.Q50 for i in range(2)
           for m in ("self_attn.q_proj", "self_attn.k_proj", "mlp.gate_proj", "mlp.down_proj")}
    fmt["lm_head.weight"] = qkernel.Q80
    _write_gguf(tmp_path / "m.gguf", model, list(fmt), bits=fmt, swap_rows="model.layers.1.mlp.down_proj.weight")
    src = GGUFBlocks(tmp_path / "m.gguf")
    report = quantize_model(model, "int8", gguf_blocks=src)
    kinds = {n: m.fmt for n, m in model.named_modules() if hasattr(m, "fmt")}
    assert sum(f == "q5_0" for f in kinds.values()) == 7 and kinds["lm_head"] == "q8_0"
    assert kinds["model.layers.1.mlp.down_proj"] == "int8"  # its file rows are not the model's: re-quantised
    assert kinds["model.layers.0.self_attn.v_proj"] == "int8"  # not in the file
    assert any("int8 re-quantised for model.layers.1.mlp.down_proj.weight" in n for n in report.notes)
    assert "q5_0 (QGemmLinear)" in report.summary() and "q8_0 (QGemmLinear)" in report.summary()
    for name in [n for n in fmt if "down_proj" not in n or ".0." in n]:
        lin = model.get_submodule(name.rsplit(".", 1)[0])
        assert torch.equal(qkernel.as_gguf_blocks(lin.q, lin.bits), src(name))  # the file's own blocks
    x = torch.randint(0, 96, (1, 12))
    with torch.inference_mode():
        assert torch.isfinite(model(x).logits).all()


@needs_kernel
def test_a_reduced_head_cut_from_q8_0_blocks_keeps_their_rows(tmp_path):
    """The draft's reduced head V′ of a GGUF-block head is those blocks' rows (its scores are the full head's at
    V′, bit for bit), not a re-quantisation of their de-quantised values."""
    from engine.core.lm import HFModel
    from engine.kernels.quant import quantize_model
    from engine.models.gguf_blocks import GGUFBlocks

    model = _untied_qwen()
    _write_gguf(tmp_path / "m.gguf", model, ["lm_head.weight"], bits={"lm_head.weight": qkernel.Q80})
    quantize_model(model, "int8", gguf_blocks=GGUFBlocks(tmp_path / "m.gguf"))
    head = model.get_output_embeddings()
    assert head.fmt == "q8_0"
    ids = torch.tensor([3, 7, 50, 95])
    lm = HFModel(model, name="tiny", vocab_subset=ids)
    sub = lm._subset_head(ids)
    assert sub.fmt == "q8_0" and torch.equal(sub.q, head.q[ids])
    h = torch.randn(2, 256).to(torch.bfloat16)
    assert torch.equal(sub(h), head(h)[:, ids])


def _wide_blocks(fused=True):
    """tests/unit/kernels/test_fused.py's 32-wide-head model with every linear as Q5_0 or Q8_0 blocks (v and down
    Q8_0: a q|k|v product of two formats; the MLP's 96 inputs end in a lone block), on the C layers (`fused`) or the
    lean ones (a QGemmLinear call a product)."""
    from engine.kernels import fast_layer
    from engine.kernels.fast_layer import use_fast_layers
    from engine.kernels.rowwise_attention import use_rowwise
    from tests.unit.kernels.test_fused import _wide

    model = _wide("qwen2")
    for name, lin in [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]:
        parent, _, attr = name.rpartition(".")
        bits, pack = (qkernel.Q80, qkernel.q80_pack) if attr in ("v_proj", "down_proj") else (qkernel.Q50, qkernel.q50_pack)
        setattr(model.get_submodule(parent), attr, qkernel.QGemmLinear.from_blocks(pack(lin.weight.float()), lin.bias, bits))
    use_rowwise(model)
    old, fast_layer.FUSED[0] = fast_layer.FUSED[0], fused
    try:
        assert use_fast_layers(model) == 2
    finally:
        fast_layer.FUSED[0] = old
    return model


@needs_kernel
def test_the_c_layer_runs_q5_0_and_q8_0_products_batch_invariant(monkeypatch):
    """The one-call layer (its activations' Q5_0 / Q8_0 lanes in the layer's scratch) gives the three-call layer's
    tokens, a verify the bits of one-row steps, and the one-call decoder the bits of its layers."""
    from engine.kernels import fast_decoder
    from tests.unit.kernels.test_fused import _decode, _steps_and_verify, check_one_call_layer

    model = _wide_blocks()
    segs = model.model.layers[0]._speclab_mm["qkv"].parts[0]
    q5 = qkernel.Q5R if qkernel.reads(qkernel.Q5R) else qkernel.Q50  # four blocks a step on the VNNI build
    assert [s[1] for s in segs] == [q5, q5, qkernel.Q80]
    ids = torch.randint(0, 96, (1, 44), generator=torch.Generator().manual_seed(12))
    a, b = _decode(model, ids), _decode(_wide_blocks(fused=False), ids)  # the C layer against the modules' products
    assert (a.float() - b.float()).abs().max() <= 0.03 * b.float().abs().max()
    assert torch.equal(a.argmax(-1), b.argmax(-1))
    steps = check_one_call_layer(model, 12, monkeypatch)
    assert fast_decoder.use_fast_decoder(model)
    steps2, verify2 = _steps_and_verify(model, torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(12)))
    assert torch.equal(steps2, verify2) and torch.equal(steps2, steps)
