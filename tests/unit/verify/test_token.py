"""Token-level speculative sampling: exact enumeration of the real verifier function."""

import pytest
import torch

from engine.bench.audit import audit, constant, output_distribution, toy_cases
from engine.core.sampling import SamplingConfig, probs_from_logits, sample_from
from engine.verify import verify_token


@pytest.mark.parametrize("vocab", [2, 3])
@pytest.mark.parametrize("gamma", [1, 2, 3])
def test_token_verifier_lossless_by_enumeration(vocab, gamma):
    for case, (q_fn, p_fn) in toy_cases(vocab).items():
        row = audit(verify_token, q_fn, p_fn, vocab, gamma, "token", case)
        assert row.lossless_error <= 1e-12, (case, row)
        assert row.first_token_error <= 1e-12, (case, row)
        assert row.mass_error <= 1e-12, (case, row)


@pytest.mark.parametrize("gamma,expected", [(2, 10 / 9), (3, 38 / 27)])
def test_expected_accepted_matches_closed_form(gamma, expected):
    # α = Σ min(p, q) = 2/3 → E[τ] = α(1 − α^γ)/(1 − α)
    row = audit(verify_token, constant([2 / 3, 1 / 3]), constant([1 / 3, 2 / 3]), 2, gamma)
    assert row.expected_accepted == pytest.approx(expected, abs=1e-12)


def test_enumeration_catches_a_lossy_verifier():
    """The audit must fail on a verifier that skips the residual (samples the correction from p)."""

    def lossy(draft_tokens, q, p, u):
        res = verify_token(draft_tokens, q, p, u)
        if res.bonus:
            return res
        k = res.accepted
        last = sample_from(p[k], float(u[-1]))
        return type(res)(k, res.tokens[:-1] + (last,), res.accept_probs, res.p_draft, res.q_draft, p[k], False)

    q_fn, p_fn = toy_cases(3)["random"]
    assert audit(lossy, q_fn, p_fn, 3, 2).lossless_error > 1e-3


def test_greedy_is_exact_match():
    cfg = SamplingConfig(temperature=0.0)
    p = probs_from_logits(torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0]]), cfg)
    q = probs_from_logits(torch.tensor([[0.0, 9.0, 1.0], [0.0, 1.0, 0.0]]), cfg)
    res = verify_token([1, 1], q, p, torch.full((3,), 0.5, dtype=torch.float64))
    assert res.accepted == 1 and res.tokens == (1, 0) and not res.bonus
    q = probs_from_logits(torch.tensor([[0.0, 9.0, 1.0], [4.0, 1.0, 0.0]]), cfg)
    res = verify_token([1, 0], q, p, torch.zeros(3, dtype=torch.float64))
    assert res.accepted == 2 and res.tokens == (1, 0, 2) and res.bonus


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match="shape mismatch"):
        verify_token([0, 1], torch.ones(1, 3) / 3, torch.ones(3, 3) / 3, torch.zeros(3))


def test_sampling_filters():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    p = probs_from_logits(logits, SamplingConfig(temperature=1.0, top_k=2))
    assert (p[2:] == 0).all() and p[:2].sum() == pytest.approx(1.0)
    p = probs_from_logits(logits, SamplingConfig(temperature=1.0, top_p=0.5))
    assert p[0] == pytest.approx(1.0)  # the top token alone already holds ≥ 0.5 of the mass
    full = logits.softmax(0)
    p = probs_from_logits(logits, SamplingConfig(temperature=1.0, top_p=0.8))
    assert (p > 0).sum() == 2 and p[0] == pytest.approx(full[0] / full[:2].sum())
    with pytest.raises(ValueError):
        SamplingConfig(temperature=-1)
    with pytest.raises(ValueError):
        SamplingConfig(top_p=0.0)


def test_sample_from_is_inverse_cdf():
    d = torch.tensor([0.2, 0.0, 0.8])
    assert [sample_from(d, u) for u in (0.0, 0.19, 0.2, 0.99, 1 - 1e-17)] == [0, 0, 2, 2, 2]


def test_output_distribution_sums_to_one_with_zero_draft_mass():
    q_fn, p_fn = toy_cases(3)["draft zeros"]
    d = output_distribution(verify_token, q_fn, p_fn, 3, 3)
    assert sum(d.values()) == pytest.approx(1.0, abs=1e-12)
