"""PACER: pre-verifier, stop rule, data recording, packed training, weights I/O (tiny models only)."""

import pytest
import torch
from engine.policies.pacer import PreVerifier, PreVerifierConfig, step_mask
from engine.train.pacer.fit import auc, calibration
from engine.offline.steps import StepData, make_batch, pack_steps
from engine.train.pacer.data import batch_loss

H = 32  # tiny_llama hidden size


def _fake_data(n_steps=12, seed=0) -> StepData:
    g = torch.Generator().manual_seed(seed)
    win = torch.randint(1, 9, (n_steps,), generator=g)
    acc = torch.minimum(torch.randint(0, 9, (n_steps,), generator=g), win)
    N = int(win.sum())
    return StepData(hidden=torch.randn(N, H, generator=g).half(), q=torch.rand(N, generator=g).clamp_min(0.01),
                    ent=torch.rand(N, generator=g) * 3, h=torch.rand(N, generator=g),
                    pos=torch.cat([torch.arange(1, int(w) + 1) for w in win]).int(),
                    step_off=torch.cat([torch.zeros(1, dtype=torch.long), win.cumsum(0)]),
                    accepted=acc.int(), window=win.int(), request=torch.zeros(n_steps, dtype=torch.int32),
                    temperature=torch.zeros(n_steps))


@pytest.mark.parametrize("scheme", ["prefix", "masked"])
def test_packed_equals_unpacked_loss(scheme):
    data = _fake_data()
    model = PreVerifier(PreVerifierConfig(hidden_size=H, d_model=16, heads=2, ff=32, dropout=0.0))
    packed = make_batch(data, pack_steps(data.window.tolist(), 40), 40, scheme)
    unpacked = make_batch(data, [[i] for i in range(data.n_steps)], 8, scheme)
    assert packed["hidden"].shape[0] < data.n_steps  # really packed
    lp, lu = batch_loss(model, packed), batch_loss(model, unpacked)
    assert abs(lp.item() - lu.item()) < 1e-6
    gp = torch.autograd.grad(lp, list(model.parameters()))
    gu = torch.autograd.grad(lu, list(model.parameters()))
    assert max(float((a - b).abs().max()) for a, b in zip(gp, gu)) < 1e-6


def test_step_mask_block_diagonal_causal():
    m = step_mask(torch.tensor([0, 0, 1, 1, 1, -1]))
    assert m[1, 0] and not m[0, 1] and not m[2, 1] and m[4, 2] and not m[2, 4]
    assert m[5, 5] and not m[5, 4]


def test_auc_and_calibration():
    s = torch.tensor([0.1, 0.4, 0.35, 0.8, 0.4])
    y = torch.tensor([0, 0, 1, 1, 1])
    pairs = [(a, b) for a in range(5) for b in range(5) if y[a] == 1 and y[b] == 0]
    brute = sum(1.0 if s[a] > s[b] else 0.5 if s[a] == s[b] else 0.0 for a, b in pairs) / len(pairs)
    assert auc(s, y) == pytest.approx(brute)
    ece, table = calibration(torch.tensor([0.05, 0.05, 0.95, 0.95]), torch.tensor([0, 0, 1, 1]))
    assert ece == pytest.approx(0.05) and [r["n"] for r in table] == [2, 2]
