"""engine.policies.simple: HF's ROC re-fit of the confidence threshold (`confidence:0.4,refit=1`), and
the float32 precision of the trim rule.

confidence:t,trim=1 decides keep/drop twice — in the drafting loop (`keep_drafting`, on q(x) as a
Python float) and in the corrected proposal (`kept_proposal`, on the float32 row). Both must draw the
same line, or q′ = q·1[q ≥ t]/Z normalises over tokens the loop would have dropped.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from engine.policies.base import DraftInfo, parse_policy
from engine.policies.simple import Confidence, roc_threshold


def brute_threshold(scores, labels, fn_cost=3.0):
    s, y = np.asarray(scores), np.asarray(labels)
    best = (fn_cost, float("inf"))  # lowest cost; ties keep the highest t
    for t in sorted(set(scores), reverse=True):
        pred = s >= t
        fpr = (pred & (y == 0)).sum() / (y == 0).sum()
        fnr = (~pred & (y == 1)).sum() / (y == 1).sum()
        cost = fpr + fn_cost * fnr
        if cost < best[0] - 1e-9:  # float costs: equal rationals may differ in the last bit
            best = (cost, t)
    return best[1]


def test_roc_threshold_worked_example():
    assert roc_threshold([0.9, 0.8, 0.3, 0.2], [1, 1, 0, 1]) == 0.8


def test_roc_threshold_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 40))
        y = rng.integers(0, 2, n)
        if y.min() == y.max():
            continue
        s = np.round(np.clip(0.3 * y + rng.random(n) * 0.7, 0, 1), 2)  # ties on purpose
        assert roc_threshold(s.tolist(), y.tolist()) == brute_threshold(s.tolist(), y.tolist())


def test_roc_threshold_needs_both_classes():
    with pytest.raises(ValueError, match="both"):
        roc_threshold([0.5, 0.6], [1, 1])


def _step(pol, qs, accepted):
    pol.propose()
    drafted = 0
    for i, q in enumerate(qs):
        drafted += 1
        if not pol.keep_drafting(DraftInfo(i, 0, q, 0.1)):
            break
    pol.update(SimpleNamespace(accepted=accepted), drafted)
    return drafted


def test_refit_learns_from_first_rejection_samples_only():
    pol = parse_policy("confidence:0.4,refit=1")
    assert pol.spec == "confidence:threshold=0.4,max=16,refit=1"
    assert parse_policy(pol.spec).params == pol.params
    _step(pol, [0.95, 0.9, 0.85, 0.8], accepted=2)  # samples (0.95,1) (0.9,1) (0.85,0); 0.8 is post-rejection
    assert pol._probs == [0.95, 0.9, 0.85] and pol._matches == [1, 1, 0]
    assert pol.threshold == 0.4  # ≤ 5 samples: not re-fitted yet
    _step(pol, [0.7, 0.6, 0.88], accepted=3)  # all accepted: no rejection sample
    assert pol._matches == [1, 1, 0, 1, 1, 1]
    assert pol.threshold == roc_threshold(pol._probs, pol._matches) == 0.6  # 6 samples, both classes
    # the re-fitted threshold now stops drafting: 0.5 < 0.6 ends the step after that token
    assert _step(pol, [0.9, 0.5, 0.9], accepted=1) == 2
    pol.reset()
    assert pol.threshold == 0.4 and pol._probs == [] and pol._matches == []


def test_refit_refuses_trim():
    with pytest.raises(ValueError, match="refit"):
        parse_policy("confidence:0.4,refit=1,trim=1")
    with pytest.raises(ValueError, match="refit must be 0 or 1"):
        parse_policy("confidence:0.4,refit=2")


# ------------------------------------------------------------------ trim precision (float32)


@pytest.mark.parametrize("t", [0.45, 0.4, 0.3, 0.15, 0.1])
def test_keep_set_is_the_same_in_the_loop_and_in_q_prime(t):
    """A row with a token at exactly float32(t) beside one clearly above t (so q′ is not the z = 0
    fallback). Only t < 0.5 can hold both; 0.45 and 0.15 round down in float32, the others up."""
    at_t = float(torch.tensor(t, dtype=torch.float32))  # the float32 value nearest t
    q = torch.tensor([at_t, 1.0 - at_t - 0.01, 0.01], dtype=torch.float32)
    pol = Confidence(threshold=t, trim=1)
    pol.reset()
    kept_by_loop = [pol.keep_drafting(DraftInfo(1, x, float(q[x]), 0.5)) for x in range(3)]
    q_prime = pol.kept_proposal(q)
    kept_by_q_prime = [bool(q_prime[x] > 0) for x in range(3)]
    assert kept_by_loop == kept_by_q_prime, (t, at_t, kept_by_loop, kept_by_q_prime)
    assert torch.isclose(q_prime.sum(), torch.tensor(1.0))


def test_the_045_tie_drops_the_token_at_float32_t():
    """float32(0.45) = 0.4499999881 < 0.45: the loop drops a token of exactly that probability, so q′
    must give it no mass and renormalise over the rest."""
    t = 0.45
    q = torch.tensor([0.45, 0.55], dtype=torch.float32)
    pol = Confidence(threshold=t, trim=1)
    pol.reset()
    assert pol.keep_drafting(DraftInfo(1, 0, float(q[0]), 0.5)) is False
    assert pol.kept_proposal(q).tolist() == [0.0, 1.0]
