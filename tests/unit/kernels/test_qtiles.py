"""Q4_K and Q6_K blocks on AMX int8 tiles (engine/kernels/qtiles.h, qkernel's q4kt_pack / q6kt_pack, the qgemm-amx
build): the tile layouts are the GGUF's blocks regrouped without loss, and where this machine has the tiles the
kernel computes x·Ŵᵀ of exactly those weights — every code it reads decoded right, each row the same bits whatever
the number of activation rows — and a layer takes the tiles only where its rows come in sixteens."""

import pytest
import torch

from engine.kernels import qkernel

needs_tiles = pytest.mark.skipif(not qkernel.tiles(), reason="no AMX int8 tiles here (the qgemm-amx build, the tile "
                                                            f"state granted); this CPU runs {qkernel.variant()}")
@pytest.fixture(autouse=True)
def _ask_for_the_tiles(monkeypatch):
    monkeypatch.setenv("SPECLAB_QTILES", "1")  # the default where they run; set, as a run may have it unset or 0


FORMATS = {qkernel.Q4K: (qkernel.q4kt_pack, qkernel.Q4KT, 144), qkernel.Q6K: (qkernel.q6kt_pack, qkernel.Q6KT, 210)}


def _random_blocks(bits: int, n: int, k: int, seed: int = 0) -> torch.Tensor:
    """Blocks of random code bytes (every scale, minimum and quant code drawn at random), with a sane fp16 d (and
    dmin): a code read from the wrong place or decoded wrong moves the product far beyond rounding."""
    g = torch.Generator().manual_seed(seed)
    per = FORMATS[bits][2]
    b = torch.randint(0, 256, (n, k // 256, per), generator=g, dtype=torch.uint8)
    d = (torch.rand(n, k // 256, 2, generator=g) * 0.01 + 0.001).to(torch.float16).view(torch.uint8)
    if bits == qkernel.Q4K:
        b[..., :4] = d.reshape(n, k // 256, 4)  # d, dmin
    else:
        b[..., 208:] = d[..., :2]  # d (the last two bytes)
    return b.reshape(n, -1).contiguous()


@pytest.mark.parametrize("bits", [qkernel.Q4K, qkernel.Q6K])
def test_the_tile_layouts_are_the_blocks_regrouped(bits):
    pack, tiled, per = FORMATS[bits]
    b = _random_blocks(bits, 32, 512, seed=bits)
    t = pack(b)
    assert t.shape == b.shape and t.dtype == torch.uint8 and not torch.equal(t, b)
    assert torch.equal(qkernel.as_gguf_blocks(t, tiled), b)
    assert torch.equal(qkernel.block_unpack(t, tiled), qkernel.block_unpack(b, bits))
    units = t.reshape(2, 2, 16 * per)  # [unit, block, bytes]: rows 16u … 16u+15 and block b together
    if bits == qkernel.Q4K:  # row 5 of unit 1, block 1: its d | dmin is dword 5 of the head; its run 2's bytes 8…11
        assert torch.equal(units[1, 1, 20:24], b[21, 144:148])
        assert torch.equal(units[1, 1, 256 + 512 * 2 + 64 * 2 + 20:256 + 512 * 2 + 64 * 2 + 24],
                           b[21, 144 + 16 + 64 + 8:144 + 16 + 64 + 12])
    else:  # row 5 of unit 1, block 1: its d; the scale byte of its sub-block 9
        assert torch.equal(units[1, 1, 10:12], b[21, 210 + 208:210 + 210])
        assert units[1, 1, 32 + 16 * 9 + 5] == b[21, 210 + 192 + 9]
    with pytest.raises(ValueError, match="sixteens"):
        pack(b[:24])


@needs_tiles
@pytest.mark.parametrize("bits", [qkernel.Q4K, qkernel.Q6K])
@pytest.mark.parametrize("k", [256, 1536])
def test_the_tiles_compute_x_times_the_blocks_weights_the_same_at_every_row_count(bits, k):
    b = _random_blocks(bits, 48, k, seed=k + bits)
    lin = qkernel.QGemmLinear.from_blocks(b, None, bits)
    assert lin.bits == FORMATS[bits][1] and (lin.out_features, lin.in_features) == (48, k)
    x = (torch.randn(17, k, generator=torch.Generator().manual_seed(1)) * 2).to(torch.bfloat16)
    ref = x.float() @ qkernel.block_unpack(b, bits).T
    y = lin(x)
    assert ((y.float() - ref).abs().max() / ref.abs().max()) < 0.03  # the activations' int8 rounding, no more
    # one row (a decode step), chunks of 1 … 8 rows and 17 (three chunks): each row's bits alike
    for m in (1, 2, 3, 5, 8, 9, 16):
        assert torch.equal(torch.cat([lin(x[i:i + m]) for i in range(0, 17, m)]), y), m
    # the blocks as stored, on the VNNI loop of the same build (the same int8 activations, sums in another order):
    # within two bf16 steps of each value
    stored = qkernel.qgemm(x, b, lin.s, lin.mn, bits).float()
    assert torch.allclose(stored, y.float(), rtol=2 ** -7, atol=1e-4 * ref.abs().max().item())
    assert torch.equal(qkernel.dequant_bf16(lin.q, lin.s, lin.mn, lin.bits), qkernel.dequant_bf16(b, lin.s, lin.mn, bits))


@needs_tiles
@pytest.mark.parametrize("bits", [qkernel.Q4K, qkernel.Q6K])
def test_the_lanes_give_the_tiles_bits_and_run_up_to_their_rows(bits):
    """The layouts' rows on vpdpbusd lanes (qlanes.h) take the same exact sums and the same fold as the tiles: every
    output the tiles' bits, at one to eight rows, the lanes running (their counter) only up to `speclab_qt_lanes`."""
    lib = qkernel._lib
    b = _random_blocks(bits, 48, 1536, seed=bits + 3)
    lin = qkernel.QGemmLinear.from_blocks(b, None, bits)
    x = (torch.randn(8, 1536, generator=torch.Generator().manual_seed(5)) * 2).to(torch.bfloat16)
    ref = x.float() @ qkernel.block_unpack(b, bits).T
    before = lib.speclab_qt_lanes(8)
    try:
        for m in (1, 2, 3, 4, 5, 8):
            units = lib.speclab_lane_units()
            lib.speclab_qt_lanes(8)
            lanes = lin(x[:m])
            assert lib.speclab_lane_units() - units == 3  # 48 rows: three units
            lib.speclab_qt_lanes(m - 1)  # every row count above it: the tiles
            tiles = lin(x[:m])
            assert lib.speclab_lane_units() - units == 3, m
            assert torch.equal(lanes, tiles), m
            assert ((lanes.float() - ref[:m]).abs().max() / ref.abs().max()) < 0.03
    finally:
        lib.speclab_qt_lanes(before)


_VNNI_CODE = """
import sys
import torch
from safetensors.torch import save_file
from engine.kernels import qkernel
from tests.unit.kernels.test_qtiles import _random_blocks
assert qkernel.variant() == 'avx512vnni' and qkernel.available() is None, qkernel.available()
out = {}
for bits in (qkernel.Q4K, qkernel.Q6K):
    lin = qkernel.QGemmLinear.from_blocks(_random_blocks(bits, 48, 1536, seed=bits + 9), None, bits)
    assert lin.bits == qkernel.TILED[bits], lin.bits
    x = (torch.randn(13, 1536, generator=torch.Generator().manual_seed(2)) * 2).to(torch.bfloat16)
    for m in (1, 5, 13):
        out[f"{bits}-{m}"] = lin(x[:m]).contiguous()
save_file(out, sys.argv[1])
print("ok")
"""


@needs_tiles
def test_the_vnni_build_reads_the_layouts_on_its_lanes_with_this_builds_bits(tmp_path):
    """The AVX-512 VNNI build (a Zen 4's: no tiles) reads the sixteen-row layouts too, on its lanes at every row
    count: in a fresh process forced to it, Q4_K and Q6_K layers take them, and every output is this AMX build's to
    the bit — at one and five rows (lanes in both) and at thirteen (the tiles here)."""
    import os
    import subprocess
    import sys

    from safetensors.torch import load_file

    env = {**os.environ, "SPECLAB_QGEMM": "avx512vnni"}
    r = subprocess.run([sys.executable, "-c", _VNNI_CODE, str(tmp_path / "y.safetensors")], env=env,
                       capture_output=True, text=True, timeout=300, cwd=str(qkernel.SOURCE.parents[2]))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    theirs = load_file(tmp_path / "y.safetensors")
    for bits in (qkernel.Q4K, qkernel.Q6K):
        lin = qkernel.QGemmLinear.from_blocks(_random_blocks(bits, 48, 1536, seed=bits + 9), None, bits)
        x = (torch.randn(13, 1536, generator=torch.Generator().manual_seed(2)) * 2).to(torch.bfloat16)
        for m in (1, 5, 13):
            assert torch.equal(lin(x[:m]), theirs[f"{bits}-{m}"]), (bits, m)


@needs_tiles
@pytest.mark.parametrize("bits,flips", [
    # Q4_K: d, dmin, sc_0 (six bits of byte 4), m_1 (byte 9), sc_4's top bits (byte 4's bit 7) and its low nibble
    # (byte 12), m_7's high nibble (byte 15), a low and a high nibble of the last run
    (qkernel.Q4K, [(0, 0x10), (3, 0x08), (4, 0x04), (9, 0x02), (4, 0x80), (12, 0x02), (15, 0x20), (140, 0x01),
                   (141, 0x40)]),
    # Q6_K: a low and a high nibble of ql in each half, each of qh's bit pairs, a scale code, d
    (qkernel.Q6K, [(3, 0x01), (7, 0x20), (64 + 40, 0x04), (64 + 33, 0x80), (128, 0x01), (129, 0x08), (130, 0x10),
                   (131, 0x40), (192 + 11, 0x08), (209, 0x04)]),
])
def test_every_code_the_tiles_read_moves_the_output_as_the_reference_says(bits, flips):
    """One code of one row flipped at a time (x picks isolated weights, each a flip touches, so its change shows and
    the activations quantize exactly): that row's product moves as x·Ŵᵀ of the flipped blocks says, no other row's."""
    k = 256
    b = _random_blocks(bits, 16, k, seed=7)
    x = torch.zeros(2, k)
    x[0, [0, 3, 5, 33, 40, 66, 71, 99, 130, 168, 180, 220, 225, 252, 253]] = 1.0
    x[1, [3, 66, 130, 253]] = -1.0
    x = x.to(torch.bfloat16)
    was = qkernel._lib.speclab_qt_lanes(8)
    try:
        for lanes in (8, 0):  # the two rows on the lanes, then on the tiles
            qkernel._lib.speclab_qt_lanes(lanes)
            before = qkernel.QGemmLinear.from_blocks(b, None, bits)(x)
            for off, mask in flips:
                c = b.clone()
                c[9, off] ^= mask  # one row's code
                lin = qkernel.QGemmLinear.from_blocks(c, None, bits)
                assert lin.bits == FORMATS[bits][1]
                after = lin(x)
                want = x.float() @ qkernel.block_unpack(c, bits).T
                assert not torch.equal(before[0, 9], after[0, 9]), (lanes, off)
                assert torch.equal(torch.cat([before[:, :9], before[:, 10:]], 1),
                                   torch.cat([after[:, :9], after[:, 10:]], 1))
                assert torch.allclose(after.float(), want, rtol=0.01, atol=1e-3 * want.abs().max().item()), (lanes, off)
    finally:
        qkernel._lib.speclab_qt_lanes(was)


@needs_tiles
def test_a_tiled_product_of_rows_not_in_sixteens_is_refused():
    t = qkernel.q4kt_pack(_random_blocks(qkernel.Q4K, 16, 256))
    x = torch.randn(1, 256).to(torch.bfloat16)
    with pytest.raises(RuntimeError, match="refused shape"):
        qkernel.qgemm(x, t[:8], torch.empty(0, dtype=torch.float16), torch.empty(0, dtype=torch.float16), qkernel.Q4KT)


def test_the_units_are_the_default_on_the_avx512_builds(monkeypatch):
    monkeypatch.delenv("SPECLAB_QTILES")
    b = _random_blocks(qkernel.Q4K, 32, 256)
    lin = qkernel.QGemmLinear.from_blocks(b, None, qkernel.Q4K)
    on = qkernel.available() is None and qkernel.variant() in ("avx512vnni", "amx")
    assert qkernel.use_tiles() == on
    assert lin.bits == (qkernel.Q4KT if on else qkernel.Q4K)


@pytest.mark.parametrize("why", ["switched off", "the AVX2 build"])
def test_without_the_units_the_blocks_stay_as_stored(monkeypatch, why):
    """Switched off (SPECLAB_QTILES=0), or on the AVX2 build (no VNNI lanes): as stored."""
    if qkernel.available() is not None:
        pytest.skip(f"qgemm kernel: {qkernel.available()}")
    if why == "switched off":
        monkeypatch.setenv("SPECLAB_QTILES", "0")
    else:
        monkeypatch.setattr(qkernel, "variant", lambda: "avx2")
    for bits in (qkernel.Q4K, qkernel.Q6K):
        if not qkernel.reads(bits):
            continue
        b = _random_blocks(bits, 32, 256)
        lin = qkernel.QGemmLinear.from_blocks(b, None, bits)
        assert lin.bits == bits and torch.equal(lin.q, b)
    if why == "the AVX2 build":
        assert not qkernel.reads(qkernel.Q4KT) and not qkernel.reads(qkernel.Q6KT)


@pytest.mark.parametrize("asked", [True, False])
def test_the_kernel_report_says_which_layers_run_on_the_tiles(tmp_path, monkeypatch, asked):
    """The report after loading names the layers in sixteen-row units (the default where the AMX build runs), or —
    switched off there — the switch and what the units give."""
    from engine.kernels.accelerate import accelerate
    from engine.models.gguf_blocks import GGUFBlocks
    from tests.unit.models.test_gguf_blocks import _tiny_qwen, _write_gguf

    if not qkernel.tiles():
        pytest.skip(f"no AMX int8 tiles here; this CPU runs {qkernel.variant()}")
    monkeypatch.setenv("SPECLAB_QTILES", "1" if asked else "0")
    model = _tiny_qwen().to(torch.bfloat16)
    names = [f"model.layers.{i}.mlp.{m}.weight" for i in range(2) for m in ("gate_proj", "up_proj")]
    _write_gguf(tmp_path / "m.gguf", model, names)
    r = accelerate(model, "int4", act_dtype=torch.bfloat16, gguf_blocks=GGUFBlocks(tmp_path / "m.gguf"))
    assert r.path == f"speclab qgemm ({qkernel.variant()})"
    if asked:
        assert "4 Q4_K / Q6_K layers in sixteen-row units (VNNI lanes to 8 rows, AMX tiles above)" in r.why
    else:
        assert "as stored (SPECLAB_QTILES=0; unset, sixteen-row units: a flatter verify)" in r.why
        assert "layers in sixteen-row units" not in r.why
