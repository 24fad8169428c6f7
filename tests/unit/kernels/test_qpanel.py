"""The quantized path's long-forward product (engine/kernels/qpanel.h, qkernel.qgemm_long; the VNNI and AMX builds):
sixteen weight rows a panel, decoded once from every format qgemm.c reads (qcodes.h's row codes, which the
de-quantiser shares), and multiplied against each activation row. It must compute x·Ŵᵀ of exactly the stored
weights from the same int8 activations as the one-row product, and run only where a forward is cached once (a
prefill inside `long_forward`), never a verify."""

import pytest
import torch

from engine.kernels import qkernel

pytestmark = pytest.mark.skipif(qkernel.available() is not None or qkernel.variant() not in qkernel.LONG_BUILDS,
                                reason=f"no panel product here: qgemm {qkernel.available() or qkernel.variant()}")


def _formats(k: int, n: int, seed: int) -> dict:
    """{name: layer} of one random weight [n, k] in every format this build reads at width k."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * 0.05
    out = {f"int{b}": qkernel.QGemmLinear(w, None, b) for b in (4, 6, 8)}
    for bits, pack in ((qkernel.Q50, qkernel.q50_pack), (qkernel.Q80, qkernel.q80_pack),
                       (qkernel.Q4K, qkernel.q4k_pack), (qkernel.Q6K, qkernel.q6k_pack)):
        if k % qkernel.BLOCKS[bits][1] == 0:
            out[qkernel.BLOCK_FMT[bits]] = qkernel.QGemmLinear.from_blocks(pack(w), None, bits)
    return out


def _weights(lin) -> torch.Tensor:
    return (qkernel.block_unpack(lin.q, lin.bits) if lin.bits in qkernel.BLOCK_FMT else lin.dequantized()).double()


def _int8_activations(x: torch.Tensor):
    """qgemm.c's quantize_x in float32: d = max|x| / 127 per group of 32, a = x·(1/d) rounded half to even."""
    g = x.float().reshape(x.shape[0], -1, qkernel.GROUP)
    d = g.abs().amax(dim=2) / 127.0
    inv = torch.where(d > 0, 1.0 / d, torch.zeros_like(d))
    a = torch.round(g * inv[..., None]).clamp(-127, 127)
    return (a * d[..., None]).reshape(x.shape).double()


# K = 96: three groups (a lone last one, a row tail of 32 in the transpose); 288: nine; 512 and 1536: whole blocks
@pytest.mark.parametrize("k,n", [(96, 37), (288, 16), (512, 50), (1536, 33)])
def test_the_panel_computes_x_times_the_stored_weights(k, n):
    layers = _formats(k, n, seed=k)
    x = (torch.randn(40, k, generator=torch.Generator().manual_seed(1)) * 2).to(torch.bfloat16)
    xq = _int8_activations(x)
    assert layers and (k % 256 or qkernel.BLOCK_FMT[qkernel.Q6K] in layers)
    for name, lin in layers.items():
        w = _weights(lin)
        ref = xq @ w.T  # the same int8 activations, exact sums
        scale = xq.abs() @ w.abs().T
        for m in (1, 9, 40):  # one row, a chunk and a half, five chunks of eight
            y = qkernel.qgemm_long(x[:m], lin.q, lin.s, lin.mn, lin.bits).double()
            assert y.shape == (m, n)
            # bf16's rounding of each output, float32's of the sums: a code, scale or minimum term read wrong is far
            err = (y - ref[:m]).abs() - 2 ** -8 * ref[:m].abs()
            assert (err <= 1e-5 * scale[:m] + 1e-30).all(), (name, m, float((err / scale[:m]).max()))
        # the one-row product from the same activations: the same sums in another order
        one = qkernel.qgemm(x, lin.q, lin.s, lin.mn, lin.bits).double()
        assert ((one - y).abs() <= 2 ** -7 * ref.abs() + 2e-5 * scale).all(), name


@pytest.mark.skipif(not qkernel.tiles(), reason="no AMX tiles here (the AMX build with the tile state granted)")
def test_the_panel_on_tiles_gives_the_vpdpbusd_panels_bits():
    """The AMX build's panel takes its sub-block sums from TDPBSUD (qpanel.h's tpanel_rows) for the formats of groups
    of 32: exact int32 sums and the same fold, so every output is panel_rows' to the bit — at one row, a tile's
    sixteen, a tail past them, and five chunks' worth; Q6_K stays on vpdpbusd. The route must run (its counter)."""
    lib = qkernel._lib
    x = (torch.randn(40, 1536, generator=torch.Generator().manual_seed(7)) * 2).to(torch.bfloat16)
    try:
        for name, lin in _formats(1536, 50, seed=11).items():
            for m in (1, 16, 17, 40):
                runs = lib.speclab_tile_panels()
                lib.speclab_panel_tiles(1)
                on = qkernel.qgemm_long(x[:m], lin.q, lin.s, lin.mn, lin.bits)
                took = lib.speclab_tile_panels() - runs
                lib.speclab_panel_tiles(0)
                off = qkernel.qgemm_long(x[:m], lin.q, lin.s, lin.mn, lin.bits)
                assert torch.equal(on, off), (name, m)
                assert took == (0 if lin.bits == qkernel.Q6K else 4), (name, m, took)  # 50 rows: four panels
                assert lib.speclab_tile_panels() - runs == took  # and none with the switch off
    finally:
        lib.speclab_panel_tiles(1)


def test_long_forward_sets_the_tiles_switch_and_restores_it(monkeypatch):
    """`long_forward` sets the AMX build's panel route from SPECLAB_QPANEL_TILES (default on) and restores it."""
    if qkernel.variant() != "amx":
        assert not qkernel.panel_tiles()
        return
    seen, real = [], qkernel._lib.speclab_panel_tiles
    monkeypatch.setattr(qkernel._lib, "speclab_panel_tiles", lambda on: seen.append(on) or real(on))
    for env, want in ((None, int(qkernel.tiles())), ("0", 0)):
        if env is None:
            monkeypatch.delenv("SPECLAB_QPANEL_TILES", raising=False)
        else:
            monkeypatch.setenv("SPECLAB_QPANEL_TILES", env)
        seen.clear()
        with qkernel.long_forward():
            assert seen == [want]
        assert len(seen) == 2 and seen[1] == real(seen[1])  # the value before, put back


@pytest.mark.skipif(qkernel.available() is not None or not qkernel.reads(qkernel.Q4KT),
                    reason="no sixteen-row layouts on this build")
def test_a_q4_k_unit_is_a_panel_as_it_stands(monkeypatch):
    """A Q4_K layer in sixteen-row units (the default on the AVX-512 builds) packs its panels straight from the units
    (qpanel.h's q4kt_panel), and de-quantises a unit at a time: the bits of the same blocks as stored."""
    w = torch.randn(48, 512, generator=torch.Generator().manual_seed(8)) * 0.05
    blocks = qkernel.q4k_pack(w)
    monkeypatch.setenv("SPECLAB_QTILES", "1")
    units = qkernel.QGemmLinear.from_blocks(blocks, None, qkernel.Q4K)
    monkeypatch.setenv("SPECLAB_QTILES", "0")
    stored = qkernel.QGemmLinear.from_blocks(blocks, None, qkernel.Q4K)
    assert (units.bits, stored.bits) == (qkernel.Q4KT, qkernel.Q4K)
    x = (torch.randn(40, 512, generator=torch.Generator().manual_seed(9)) * 2).to(torch.bfloat16)
    for m in (1, 16, 40):
        assert torch.equal(qkernel.qgemm_long(x[:m], units.q, units.s, units.mn, units.bits),
                           qkernel.qgemm_long(x[:m], stored.q, stored.s, stored.mn, stored.bits)), m
    assert torch.equal(qkernel.dequant_bf16(units.q, units.s, units.mn, units.bits),
                       qkernel.dequant_bf16(stored.q, stored.s, stored.mn, stored.bits))


def test_the_dequantiser_reads_the_same_codes():
    """speclab_dequant and the panel share qcodes.h's row decoder: Ŵ de-quantised is the reference's, every format."""
    for name, lin in _formats(512, 24, seed=3).items():
        got = qkernel.dequant_bf16(lin.q, lin.s, lin.mn, lin.bits).float()
        assert torch.equal(got, _weights(lin).to(torch.bfloat16).float()), name


def test_a_bad_shape_is_refused():
    lin = _formats(96, 16, seed=0)["int4"]
    with pytest.raises(ValueError, match="width 64 against weights of width 96"):
        qkernel.qgemm_long(torch.randn(3, 64).to(torch.bfloat16), lin.q, lin.s, lin.mn, lin.bits)
    q6 = _formats(256, 16, seed=0)["q6_k"]
    with pytest.raises(RuntimeError, match="refused shape M=3 N=16 K=256"):  # the tiles' Q6_K layout: not a panel's
        qkernel.qgemm_long(torch.randn(3, 256).to(torch.bfloat16), q6.q, q6.s, q6.mn, qkernel.Q6KT)


def test_only_a_long_forward_takes_the_panel(monkeypatch):
    """Inside `long_forward` and past the build's rows the panel runs; a forward outside it (a verify, however many
    rows) keeps the one-row product; past the panel's rows the de-quantised GEMM as before; SPECLAB_QPANEL=0: off."""
    monkeypatch.setitem(qkernel.PANEL_ROWS, qkernel.variant(), (8, 32))
    lin = _formats(256, 48, seed=5)["q4k"]
    lin.dense_rows = 32
    x = torch.randn(40, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    calls = []
    for name in ("qgemm", "qgemm_long", "dequant_bf16"):
        real = getattr(qkernel, name)
        monkeypatch.setattr(qkernel, name, (lambda f, nm: lambda *a: calls.append(nm) or f(*a))(real, name))

    def route(rows):
        calls.clear()
        y = lin(x[:rows])
        assert y.shape == (rows, 48) and len(calls) == 1
        return calls[0]

    assert route(20) == "qgemm"  # outside: the one-row product at any rows a verify has
    with qkernel.long_forward():
        assert (route(8), route(9), route(32), route(33)) == ("qgemm", "qgemm_long", "qgemm_long", "dequant_bf16")
        with qkernel.long_forward():  # nested: still on after the inner one ends
            pass
        assert route(20) == "qgemm_long"
        monkeypatch.setenv("SPECLAB_QPANEL", "0")
        assert route(20) == "qgemm"
        monkeypatch.delenv("SPECLAB_QPANEL")
    assert route(20) == "qgemm" and not qkernel.takes_panel(20)
    assert not qkernel.takes_panel(20, qkernel.Q6KT)
    with qkernel.long_forward():  # Q6_K (scales per 16): from 2·lo + 2 rows
        assert [qkernel.takes_panel(r, qkernel.Q6K) for r in (17, 18, 32, 33)] == [False, True, True, False]


def test_a_quantized_prefill_takes_the_panel_in_the_fused_layers(monkeypatch):
    """HFModel.prefill on the quantized path runs inside `long_forward`, which sets the library's switch for the fused
    layers' products (speclab_long) and restores it after; the prefill's cache then differs from a one-row-product
    prefill's only by the int8 sums' order: its keys within rounding (not to the bit), and the next step's logits."""
    import transformers

    from engine.core.lm import HFModel
    from engine.kernels.fast_layer import use_fast_layers
    from tests.unit.kernels.test_fast_layer import _quantized

    monkeypatch.setitem(qkernel.PANEL_ROWS, qkernel.variant(), (8, None))
    switch, real = [], qkernel._lib.speclab_long
    monkeypatch.setattr(qkernel._lib, "speclab_long", lambda lo: switch.append(lo) or real(lo))
    cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    ids = torch.randint(0, 96, (30,), generator=torch.Generator().manual_seed(4)).tolist()
    logits, keys = {}, {}
    for panel in ("1", "0"):
        monkeypatch.setenv("SPECLAB_QPANEL", panel)
        torch.manual_seed(0)
        model = _quantized(False, transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval())
        assert use_fast_layers(model) == 2
        model.speclab_weights = "quantized"
        lm = HFModel(model)
        lm.prefill(ids[:-1])
        keys[panel] = torch.cat([layer.keys.clone() for layer in lm.cache.layers])
        logits[panel] = lm.extend(ids[-1:])[-1]
    assert switch == [8, 0, 0, 0]  # set for the prefill and restored; with SPECLAB_QPANEL=0 never set
    assert not torch.equal(keys["1"], keys["0"])  # the prefill's products took the other order of the sums
    assert (keys["1"] - keys["0"]).abs().max() < 0.05 * keys["0"].abs().max()
    ref = logits["0"]
    assert (logits["1"] - ref).abs().max() < 0.05 * ref.abs().max()
