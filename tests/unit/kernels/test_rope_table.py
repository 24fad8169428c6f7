"""The rope table (engine/kernels/rope_table.py): transformers' default rope with the cosine correctly rounded,
computed once a position and never through torch's vector cos / sin, so every forward reads the same bits."""

import math

import pytest
import torch
import transformers

from engine.kernels import fast_layer, rope_table


def _rot(dtype=torch.bfloat16, scaling=None):
    cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=128, intermediate_size=96, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1)  # head_dim 64, rope_theta 1e6
    model = transformers.Qwen2ForCausalLM(cfg).to(dtype).eval()
    if scaling is not None:
        model.model.rotary_emb.attention_scaling = scaling
    return model


def _reference(rot, positions, dtype):
    """The docstring's formula element by element: θ the fp32 product, cos / sin in double, rounded to fp32, scaled."""
    inv = rot.inv_freq.float()
    s = torch.tensor(float(rot.attention_scaling), dtype=torch.float32)
    theta = torch.tensor(positions, dtype=torch.float32)[:, None] * inv[None]
    cos = torch.tensor([[math.cos(v) for v in r] for r in theta.double().tolist()], dtype=torch.float32) * s
    sin = torch.tensor([[math.sin(v) for v in r] for r in theta.double().tolist()], dtype=torch.float32) * s
    return torch.cat((cos, cos), -1).to(dtype), torch.cat((sin, sin), -1).to(dtype)


@pytest.mark.parametrize("dtype,scaling", [(torch.bfloat16, None), (torch.float32, None), (torch.float32, 0.75)])
def test_a_row_is_the_formula_with_the_cosine_correctly_rounded(dtype, scaling):
    rot = _rot(dtype, scaling).model.rotary_emb
    positions = [0, 1, 7, 39, 4095, 4096, 4097, 9000, 9001]  # past the first size too: the table grows
    cos, sin = rope_table.rows(rot, torch.tensor([positions]), dtype)
    want = _reference(rot, positions, dtype)
    assert cos.shape == (1, len(positions), 64) and cos.dtype == dtype
    assert torch.equal(cos[0], want[0]) and torch.equal(sin[0], want[1])
    assert rot._speclab_rope_table["f32"][0].shape[0] >= 9002


def test_no_value_comes_from_torchs_cos_or_sin(monkeypatch):
    """The op whose first call after an idle thread pool returned low-accuracy values is never called."""
    model = _rot()
    assert rope_table.use_rope_table(model)

    def refuse(*a, **k):
        raise AssertionError("torch's cos / sin called")

    for name in ("cos", "sin"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
        monkeypatch.setattr(torch, name, refuse)
    h = torch.zeros(1, 3, 128, dtype=torch.bfloat16)
    cos, sin = model.model.rotary_emb(h, position_ids=torch.tensor([[5, 6, 7]]))
    monkeypatch.undo()
    want = _reference(model.model.rotary_emb, [5, 6, 7], torch.bfloat16)
    assert torch.equal(cos[0], want[0]) and torch.equal(sin[0], want[1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_table_stays_within_an_ulp_of_transformers_own_values(dtype):
    model = _rot(dtype)
    rot = model.model.rotary_emb
    h = torch.zeros(1, 1, 128, dtype=dtype)
    pos = torch.arange(0, 2048).unsqueeze(0)
    with torch.inference_mode():
        want = rot(h, position_ids=pos)
        assert rope_table.use_rope_table(model)
        got = rot(h, position_ids=pos)
    ulp = torch.finfo(dtype).eps
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert ((g.float() - w.float()).abs() <= ulp * w.float().abs().clamp_min(2 ** -10)).all()


def test_a_span_and_any_positions_read_the_same_rows():
    rot = _rot().model.rotary_emb
    c1, s1 = rope_table.span(rot, 40, 5, torch.bfloat16)
    c2, s2 = rope_table.rows(rot, torch.tensor([[40, 41, 42, 43, 44]]), torch.bfloat16)
    c3, _ = rope_table.rows(rot, torch.tensor([[44, 40], [41, 42]]), torch.bfloat16)
    assert torch.equal(c1, c2) and torch.equal(s1, s2)
    assert torch.equal(c3[0, 0], c1[0, 4]) and torch.equal(c3[1, 1], c1[0, 2])
    with pytest.raises(ValueError, match="negative"):
        rope_table.rows(rot, torch.tensor([[-1]]), torch.bfloat16)


def test_a_changed_inv_freq_rebuilds_the_table():
    rot = _rot(torch.float32).model.rotary_emb
    a, _ = rope_table.span(rot, 3, 1, torch.float32)
    with torch.no_grad():
        rot.inv_freq.mul_(0.5)
    b, _ = rope_table.span(rot, 3, 1, torch.float32)
    assert not torch.equal(a, b)
    assert torch.equal(b[0], _reference(rot, [3], torch.float32)[0])


def test_other_rope_kinds_and_foreign_forwards_keep_theirs():
    model = _rot()
    rot = model.model.rotary_emb
    rot.rope_type = "dynamic"
    assert not rope_table.use_rope_table(model) and "forward" not in rot.__dict__
    rot.rope_type = "default"
    mine = lambda *a, **k: None  # noqa: E731
    rot.forward = mine
    assert not rope_table.use_rope_table(model) and rot.forward is mine


def test_a_verify_keeps_the_bits_of_steps_when_the_first_cos_is_off(monkeypatch):
    """The failure this module fixes, made certain: torch's cos off on its first call only (as MKL's was after an
    idle pool). The C layers' verify still equals one-row steps, because no forward calls it."""
    from engine.kernels import dense_kernel
    from tests.unit.kernels.test_fused import _patched, _steps_and_verify

    if dense_kernel.available() is not None:
        pytest.skip(f"dense kernel: {dense_kernel.available()}")
    real, calls = torch.Tensor.cos, []

    def first_off(self):
        calls.append(1)
        out = real(self)
        return out * (1 + 2 ** -12) if len(calls) == 1 else out

    model = _patched("qwen2")
    assert model.model.rotary_emb.forward.__func__ is rope_table._forward  # use_fast_layers put the table in
    monkeypatch.setattr(torch.Tensor, "cos", first_off)
    ids = torch.randint(0, 96, (1, 48), generator=torch.Generator().manual_seed(4))
    steps, verify = _steps_and_verify(model, ids)
    assert torch.equal(steps, verify)
    # and the check has teeth: the module's own forward (torch's cos each call) loses the bits
    calls.clear()
    del model.model.rotary_emb.forward
    rope_table_free = _steps_and_verify(model, ids)
    assert calls and not torch.equal(*rope_table_free)
