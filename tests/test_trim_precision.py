"""confidence:t,trim=1 decides keep/drop twice — in the drafting loop (`keep_drafting`, on q(x) as a
Python float) and in the corrected proposal (`kept_proposal`, on the float32 row). Both must draw the
same line, or q′ = q·1[q ≥ t]/Z normalises over tokens the loop would have dropped."""

import pytest
import torch

from engine.policies.base import DraftInfo
from engine.policies.simple import Confidence


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
