"""The hindsight oracle window run for real (engine.policies.oracle): exact, never wastes a draft, fewest calls."""

import pytest

from engine.decode import DecodeConfig, decode
from engine.hindsight import hindsight
from engine.policies.oracle import HindsightOracle
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig
from tests.conftest import greedy_reference

PROMPTS = ([3, 17, 5, 9], [8, 1, 44, 2, 30, 7])
N = 40


@pytest.mark.parametrize("prompt", PROMPTS)
def test_oracle_is_exact_wastes_nothing_and_needs_fewest_calls(pair, tiny_target, prompt):
    target, draft = pair
    y, pred = hindsight(target, draft, prompt, N)
    assert y == greedy_reference(tiny_target, prompt, N)
    steps = list(decode(target, draft, prompt, HindsightOracle(y, pred, max_window=8), DecodeConfig(max_new_tokens=N)))
    assert [t for s in steps for t in s.emitted_tokens] == y
    assert all(s.accepted == s.window for s in steps)  # every drafted token accepted
    assert any(s.window == 0 for s in steps) and any(s.window >= 2 for s in steps)  # both kinds of step occur
    for s in steps[:-1]:
        assert s.window == s.policy_fields["hindsight"]
    # Each step accepts the longest run any window ≤ 8 could, so no policy needs fewer target calls.
    for spec in ("fixed:1", "fixed:2", "fixed:4", "fixed:8", "heuristic:5,max=8", "confidence:0.3,max=8"):
        other = list(decode(target, draft, prompt, parse_policy(spec), DecodeConfig(max_new_tokens=N)))
        assert len(steps) <= len(other), spec


def test_oracle_refuses_sampling_and_bad_lengths(pair):
    target, draft = pair
    y, pred = hindsight(target, draft, PROMPTS[0], 8)
    cfg = DecodeConfig(max_new_tokens=8, sampling=SamplingConfig(temperature=0.7))
    with pytest.raises(ValueError, match="greedy decoding only"):
        list(decode(target, draft, PROMPTS[0], HindsightOracle(y, pred), cfg))
    with pytest.raises(ValueError, match="reference tokens"):
        HindsightOracle(y, pred[:-1])


def test_registered_oracle_is_primed_per_request_by_policy_for(pair):
    """`oracle` parses to an unprimed rule; engine.run.policy_for hands it the request's look-ahead."""
    from engine.policies.base import RequestContext
    from engine.run import policy_for

    target, draft = pair
    cfg = DecodeConfig(max_new_tokens=N)
    primed = policy_for(parse_policy("oracle:max=8"), target, draft, cfg, PROMPTS[1])
    y, pred = hindsight(target, draft, PROMPTS[1], N)
    direct = list(decode(target, draft, PROMPTS[1], HindsightOracle(y, pred, max_window=8), cfg))
    via = list(decode(target, draft, PROMPTS[1], primed, cfg))
    assert [s.window for s in via] == [s.window for s in direct]
    with pytest.raises(ValueError, match="no look-ahead"):
        parse_policy("oracle").for_request(RequestContext(target, draft, PROMPTS[1], N))
