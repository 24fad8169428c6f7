"""D-PACE / DFlash / uniform position weights, the training-trace format, and a resumable smoke run."""

import itertools
import math

import pytest
import torch
from engine.train.dpace.objectives import dflash_gamma, dflash_weights, dpace_weights, make_objective, surrogate


def brute_force(q, valid, alpha, variant="full"):
    """The formula, literally: w̄_j = Σ_{m ≥ j, valid} Π_{i ≤ m, valid} q̃_i (cumulative: Π_{i≤j};
    continuation: w̄_j / Π_{i≤j}); invalid positions contribute factor 1 and weight 0."""
    B = len(q)
    qt = [((1 - alpha) * q[i] + alpha) if valid[i] else 1.0 for i in range(B)]
    pref = [math.prod(qt[: j + 1]) for j in range(B)]
    out = []
    for j in range(B):
        if not valid[j]:
            out.append(0.0)
            continue
        full = sum(pref[m] for m in range(j, B) if valid[m])
        out.append({"full": full, "cumulative": pref[j], "continuation": full / pref[j]}[variant])
    return out


@pytest.mark.parametrize("variant", ["full", "cumulative", "continuation"])
def test_dpace_weights_equal_brute_force(variant):
    g = torch.Generator().manual_seed(0)
    for B, alpha in itertools.product([2, 5, 8], [0.0, 0.3, 0.5, 1.0]):
        q = torch.rand(6, B, generator=g, dtype=torch.float64) * 0.98 + 0.01
        valid = torch.rand(6, B, generator=g) > 0.25
        valid[:, 0] = False
        w = dpace_weights(-q.log(), valid, alpha, variant)
        for r in range(6):
            ref = brute_force(q[r].tolist(), valid[r].tolist(), alpha, variant)
            assert torch.allclose(w[r], torch.tensor(ref, dtype=torch.float64), rtol=1e-10, atol=1e-12), (B, alpha)


def test_dpace_weights_are_detached():
    logits = torch.randn(3, 8, 11, requires_grad=True)
    labels = torch.randint(0, 11, (3, 8))
    valid = torch.ones(3, 8, dtype=torch.bool)
    valid[:, 0] = False
    for name in ("dpace", "dpace-mean", "dpace-cum", "dpace-cont"):
        ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(3, 8)
        obj = make_objective(name, alpha=0.5)
        w = obj.weights(ce, valid)
        assert not w.requires_grad and w.grad_fn is None
        loss, _ = obj.loss(ce, valid, 3)
        (g,) = torch.autograd.grad(loss, logits)
        # No gradient flows through the weights: the gradient is that of Σ sg(w)·ce.
        ce2 = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(3, 8)
        ref_loss = (ce2 * w).sum() / (w.sum() if obj.reduction == "mean" else 3)
        (g2,) = torch.autograd.grad(ref_loss, logits)
        assert torch.allclose(g, g2, atol=1e-6)


def test_alpha_one_is_linear_schedule_and_cumulative_is_uniform():
    """α = 1 → q̃ ≡ 1: full D-PACE gives w̄_j = B − j (the fixed linear schedule), so the official
    sum-normalised loss is Σ_j (B − j)·ce_j / batch; cumulative-only gives uniform weights."""
    B = 8
    ce = torch.rand(4, 3, B) * 5
    valid = torch.ones(4, 3, B, dtype=torch.bool)
    valid[..., 0] = False
    w = dpace_weights(ce, valid, 1.0)
    assert torch.equal(w[0, 0], torch.tensor([0, 7, 6, 5, 4, 3, 2, 1], dtype=w.dtype))
    obj = make_objective("dpace", alpha=1.0)
    loss, _ = obj.loss(ce, valid, 4)
    assert torch.allclose(loss, (ce * torch.tensor([0, 7, 6, 5, 4, 3, 2, 1.0])).sum() / 4)
    assert torch.equal(dpace_weights(ce, valid, 1.0, "cumulative"), valid.float())
    # Under the weighted-mean normalisation the linear schedule is normalised to shares (B−j)/Σ.
    lm, _ = make_objective("dpace-mean", alpha=1.0).loss(ce, valid, 4)
    lin = torch.tensor([0, 7, 6, 5, 4, 3, 2, 1.0])
    assert torch.allclose(lm, (ce * lin).sum() / (lin.sum() * 12))


def test_dpace_properties():
    g = torch.Generator().manual_seed(1)
    q = torch.rand(5, 9, generator=g, dtype=torch.float64) * 0.9 + 0.05
    valid = torch.ones(5, 9, dtype=torch.bool)
    valid[:, 0] = False
    w = dpace_weights(-q.log(), valid, 0.5)
    assert (w[:, 1:-1] >= w[:, 2:]).all()  # non-increasing along the block
    qt = 0.5 * q + 0.5
    assert torch.allclose(w[:, 1], surrogate(qt, valid))  # w̄_1 = S̃
    # Invalid positions are no-ops: same weights as the block with them removed.
    v2 = valid.clone()
    v2[:, 4] = False
    w2 = dpace_weights(-q.log(), v2, 0.5)
    keep = [0, 1, 2, 3, 5, 6, 7, 8]
    w3 = dpace_weights(-q[:, keep].log(), v2[:, keep], 0.5)
    assert w2[:, 4].abs().max() == 0 and torch.allclose(w2[:, keep], w3)


def test_alpha_zero_gradient_is_surrogate_ascent():
    logits = torch.randn(2, 6, 7, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (2, 6))
    valid = torch.ones(2, 6, dtype=torch.bool)
    valid[:, 0] = False
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(2, 6)
    loss, _ = make_objective("dpace", alpha=0.0).loss(ce, valid, 1)
    (g,) = torch.autograd.grad(loss, logits)
    q = torch.exp(-torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                                      reduction="none")).view(2, 6)
    (gs,) = torch.autograd.grad(-surrogate(q, valid).sum(), logits)
    assert torch.allclose(g, gs, atol=1e-10)


def test_dflash_decay_values():
    assert (dflash_gamma(16), dflash_gamma(10), dflash_gamma(8)) == (7.0, 5.0, 4.0)
    w = dflash_weights(16, 7.0)
    assert w[0] == 0 and w[1] == 1 and math.isclose(float(w[2]), math.exp(-1 / 7), rel_tol=1e-6)
    shares = (w[1:] / w[1:].sum() * 100).tolist()
    expect = [15.1, 13.1, 11.3, 9.8, 8.5, 7.4, 6.4, 5.5, 4.8, 4.2, 3.6, 3.1, 2.7, 2.4, 2.0]
    assert [round(x, 1) for x in shares] == pytest.approx(expect, abs=0.051)
    w8 = dflash_weights(8, 4.0)
    assert torch.allclose(w8[1:], torch.exp(-torch.arange(7.0) / 4))


def test_uniform_and_dflash_reduce_to_weighted_mean():
    ce = torch.rand(2, 3, 8)
    valid = torch.rand(2, 3, 8) > 0.3
    valid[..., 0] = False
    lu, _ = make_objective("uniform").loss(ce, valid, 2)
    assert torch.allclose(lu, ce[valid].mean())
    ld, _ = make_objective("dflash", block_size=8).loss(ce, valid, 2)
    w = dflash_weights(8, 4.0) * valid
    assert torch.allclose(ld, (ce * w).sum() / w.sum())
    with pytest.raises(ValueError):
        make_objective("dpace", alpha=1.5)
    with pytest.raises(ValueError):
        make_objective("nope")
