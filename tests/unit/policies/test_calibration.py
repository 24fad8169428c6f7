"""engine.policies.calibration: the cost-aware window's acceptance model (bins, Beta smoothing, the shared
scale, a pair's pooled acceptance) on hand-made counts."""

import pytest

from engine.policies.base import DraftInfo
from engine.policies.calibration import (N_BINS, NONE, PAIR_MIN, PRIOR_N, PRIOR_NONE, PRIOR_SHRINK, Calibration,
                                         PairStats, bin_of, mid, odds_scaled)


def identity_prior():
    return [PRIOR_SHRINK * mid(b) if b < NONE else PRIOR_NONE for b in range(N_BINS)]


def test_bins_follow_the_confidence_before_sampling_and_copies_share_one():
    assert bin_of(DraftInfo(1, 0, 0.1, 0.0, None, 0.93)) == bin_of(DraftInfo(1, 0, 0.93, 0.0, None, 0.93)) == 5
    assert bin_of(DraftInfo(1, 0, 0.05, 0.0)) == 0 and bin_of(DraftInfo(1, 0, 0.99, 0.0)) == NONE - 1
    assert bin_of(DraftInfo(1, 0, 1.0, 0.0, None, 1.0, match_len=3)) == NONE


def test_the_worked_example_of_the_module_doc():
    c = Calibration(identity_prior(), PRIOR_N, [1 / N_BINS] * N_BINS)
    assert c.cond(1, 5) == pytest.approx(0.7 * 0.935)
    for _ in range(4):
        c.add(1, 5, True)
    assert c.scale == pytest.approx(5 / (4 * 0.6545 + 1))
    assert c.cond(1, 5) == pytest.approx(0.954, abs=1e-3)


def test_the_shared_scale_moves_odds_so_a_high_bin_never_saturates():
    """One accepted low-confidence draft (r > 1) must not take a 0.95 bin to certainty: a rate times r did
    (0.999, the old cap), and 8-token windows were drafted on it and rejected at their first token."""
    prior = identity_prior()
    prior[NONE - 1] = 0.95
    c = Calibration(prior, PRIOR_N, [1 / N_BINS] * N_BINS)
    c.add(1, 1, True)  # accepted at a prior of 0.7·0.3 = 0.21: r = 2 / 1.21 ≈ 1.65
    assert c.scale == pytest.approx(2 / 1.21)
    assert odds_scaled(0.95, c.scale) == pytest.approx(0.969, abs=1e-3)
    assert c.cond(1, NONE - 1) < 0.975
    assert odds_scaled(0.4, 1.0) == pytest.approx(0.4) and odds_scaled(0.5, 3.0) == pytest.approx(0.75)


def test_one_confident_rejection_lowers_the_bins_not_yet_sampled():
    c = Calibration(identity_prior(), PRIOR_N, [1 / N_BINS] * N_BINS)
    before = c.cond(2, 3)
    c.add(1, NONE - 1, False)
    assert c.cond(2, 3) < before and c.scale < 1


def test_a_pairs_pooled_acceptance_becomes_a_prior_after_enough_labels():
    s = PairStats()
    base, pi = identity_prior(), [1 / N_BINS] * N_BINS
    for _ in range(PAIR_MIN - 1):
        s.add(2, True)
        s.saw(2)
    assert s.prior(base, pi) is None
    s.add(2, True)
    s.saw(2)
    rate, share = s.prior(base, pi)
    assert rate[2] == pytest.approx((PAIR_MIN + PRIOR_N * base[2]) / (PAIR_MIN + PRIOR_N)) and rate[2] > base[2]
    assert rate[0] == base[0] and share[2] > share[0] and sum(share) == pytest.approx(1.0)


def test_pair_lengths_remaining_worked_example():
    from engine.policies.calibration import PairStats

    p = PairStats()
    for k, n in enumerate([12, 20, 96]):
        p.note_length(k, n)
    assert p.remaining(99, 0, 96) is None  # three finished requests: fewer than LEN_MIN
    p.note_length(3, 96)
    assert p.remaining(99, 0, 96) == 12 and p.remaining(99, 15, 96) == 5 and p.remaining(99, 30, 96) == 66
    assert p.remaining(3, 0, 96) is None  # a request's own length is not evidence about itself
    assert p.remaining(99, 96, 96) is None  # past every earlier answer: max_new_tokens decides
    assert p.remaining(99, 0, 16) == 12 and p.remaining(99, 13, 16) == 3  # lengths capped at this request's cap
