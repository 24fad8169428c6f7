"""engine.train.loop: the schedule's worked example and shape, and one step equal to the hand-written tail."""

import math

import pytest
import torch

from engine.train.loop import train_step, warmup_cosine


def test_the_worked_example_and_the_shape():
    assert warmup_cosine(0, 100, 1e-3, 0.04) == pytest.approx(2.5e-4)
    assert warmup_cosine(3, 100, 1e-3, 0.04) == pytest.approx(1e-3)
    assert warmup_cosine(52, 100, 1e-3, 0.04) == pytest.approx(5e-4)
    assert warmup_cosine(100, 100, 1e-3, 0.04) == pytest.approx(0.0, abs=1e-12)
    lrs = [warmup_cosine(s, 100, 1e-3, 0.04) for s in range(4, 101)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))  # after the warm-up it only falls
    w = 4  # the formula D-PACE's trainer wrote by hand, bit for bit (the block trainer's, to rounding)
    assert all(warmup_cosine(s, 100, 1e-3, 0.04) == 1e-3 * 0.5 * (1 + math.cos(math.pi * ((s - w) / 96)))
               for s in range(4, 100))
    assert all(warmup_cosine(s, 100, 1e-3, 0.04) == pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi * (s - w) / 96)),
                                                                  rel=1e-12) for s in range(4, 100))


def test_a_step_is_the_hand_written_tail():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
    b.load_state_dict(a.state_dict())
    x = torch.randn(8, 4) * 10
    oa, ob = torch.optim.AdamW(a.parameters(), lr=0.5), torch.optim.AdamW(b.parameters(), lr=0.5)
    norm = train_step(oa, a(x).pow(2).sum(), a.parameters(), 1e-2, 1.0)
    for g in ob.param_groups:
        g["lr"] = 1e-2
    ob.zero_grad(set_to_none=True)
    b(x).pow(2).sum().backward()
    ref = torch.nn.utils.clip_grad_norm_(b.parameters(), 1.0)
    ob.step()
    assert torch.equal(norm, ref) and norm > 1.0  # the clip was active
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert oa.param_groups[0]["lr"] == 1e-2


def test_every_trainer_steps_through_the_shared_step():
    """One training loop tail: no trainer under engine/ calls backward / clip / zero_grad itself."""
    import re

    from tests.conftest import REPO

    own = re.compile(r"\.backward\(|clip_grad_norm_\(|\.zero_grad\(")
    offenders = [str(p.relative_to(REPO)) for p in (REPO / "engine").rglob("*.py")
                 if p.name != "loop.py" and own.search(p.read_text())]
    assert not offenders, f"trainers with their own optimiser tail (use engine.train.loop.train_step): {offenders}"
