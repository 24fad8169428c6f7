"""Model-free drafters (engine.drafters.lookup / suffix): exact proposals on hand-made sequences, HF
parity, spans that point at the copied tokens, the suffix trie's per-token cost bound, greedy
exactness on the tiny pair, and χ² losslessness of the real loop with a one-hot q."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from engine.decode import DecodeConfig, decode, keep_for
from engine.drafters.base import DrafterBase
from engine.drafters.lookup import LookupDrafter
from engine.drafters.modelfree import make_model_free
from engine.core.lm import HFModel, TableLM
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig
from tests.conftest import decode_with_contexts, exact_joint, greedy_reference


def draft(drafter, seq, cap=16, policy="fixed:16"):
    drafter.reset(seq[:1])
    prop = drafter.draft(seq, cap, keep_for(parse_policy(policy)), SamplingConfig(), torch.Generator())
    return prop.tokens[0], prop.fields.get("drafter", {}), prop


# ---------------------------------------------------------------- the real loop

SPECS = ["lookup", "lookup:n=3,ngram=3", "lookup:4,pick=1", "suffix", "suffix:n=6,depth=8,p=0.3"]
POLICIES = ["fixed:4", "matchlen:1", "matchlen:2,offset=1,max=8,p=0.2", "heuristic:2,max=6"]
PROMPTS = [[1, 5, 9, 3, 1, 5, 9], [2, 2, 2, 2, 2, 2, 2, 2, 11, 40], [7]]


_contexts_and_steps = decode_with_contexts


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("policy", POLICIES)
def test_greedy_equals_target_generate(tiny_target, spec, policy):
    target = HFModel(tiny_target, "tiny-target")
    accepted = 0
    for prompt in PROMPTS:
        steps, ctx, out = _contexts_and_steps(target, make_model_free(spec, 64), prompt, policy, 24)
        assert out == greedy_reference(tiny_target, prompt, 24), (spec, policy, prompt)
        accepted += sum(s.accepted for s in steps)
    assert accepted > 0, "the tiny target repeats itself: copying should be accepted sometimes"


@pytest.mark.parametrize("spec", ["lookup:n=5", "lookup:3,pick=1", "suffix:p=0"])
def test_span_points_at_the_copied_tokens(tiny_target, spec):
    """Each step's `span` is where the draft is in the context the step saw, and `match` (lookup: the
    matched n-gram; suffix: the matched context) equals that context's last match_len tokens."""
    target = HFModel(tiny_target, "tiny-target")
    checked = 0
    for prompt in PROMPTS:
        steps, ctx, _ = _contexts_and_steps(target, make_model_free(spec, 64), prompt, "fixed:5", 30)
        for s, c in zip(steps, ctx):
            f = s.policy_fields["drafter"]
            if not s.draft_tokens:
                continue
            a, b = f["span"]
            assert 0 <= a < b <= len(c) and tuple(c[a:b]) == s.draft_tokens[: b - a]
            if spec.startswith("lookup"):
                assert b - a == s.window  # prompt lookup copies one contiguous run
            m0, m1 = f["match"]
            assert m1 == a and m1 - m0 == f["match_len"] and c[m0:m1] == c[len(c) - f["match_len"]:]
            assert f["source"] == ("prompt" if a < len(prompt) else "output")
            checked += 1
    assert checked > 5


class _WrongQ(DrafterBase):
    """The lookup drafter reporting a smeared q (0.5 on the copied token, the rest uniform): what
    a bug in the one-hot construction would look like. The χ² test must reject it."""

    def __init__(self, inner):
        self.inner, self.vocab_size = inner, inner.vocab_size

    def reset(self, p):
        self.inner.reset(p)

    def draft(self, *a):
        prop = self.inner.draft(*a)
        prop.q = [q * 0.5 + (1 - q) * 0.5 / (self.vocab_size - 1) for q in prop.q]
        return prop

    def commit(self, *a):
        pass

    def observe(self, t):
        pass


def _chi_square(make_drafter, policy, samples):
    target = TableLM(3, seed=3, scale=1.0)  # flat enough that every 3-token cell expects ≥ 5 hits
    prompt, n = [0, 1, 2, 0, 1], 3  # repetitive, so lookup and suffix propose on most steps
    cells, expected = exact_joint(target, prompt, n)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells))
    drafted = 0
    pol = parse_policy(policy)
    d = make_drafter()
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=1.0, seed=s))
        steps = list(decode(target, d, prompt, pol, cfg))
        drafted += sum(r.window for r in steps)
        counts[index[tuple(t for r in steps for t in r.emitted_tokens)]] += 1
    exp = expected * samples
    assert exp.min() >= 5 and drafted > samples  # the drafter really proposed
    return chisquare(counts, exp).pvalue, 0.5 * np.abs(counts / samples - expected).sum()


@pytest.mark.slow
@pytest.mark.parametrize("spec,policy", [("lookup:n=3", "fixed:2"), ("suffix:p=0", "matchlen:1,offset=1,max=3")])
def test_chi_square_of_the_real_loop(spec, policy):
    pval, tv = _chi_square(lambda: make_model_free(spec, 3), policy, 20_000)
    # Sampling noise alone gives TV ≈ 0.013 over these 27 cells at 20k samples; the smeared q below
    # is rejected by the same χ² statistic (p < 1e-4), so the test has power where it matters.
    assert pval > 1e-4 and tv < 0.03, (pval, tv)


@pytest.mark.slow
def test_chi_square_rejects_a_wrong_q():
    pval, tv = _chi_square(lambda: _WrongQ(make_model_free("lookup:n=3", 3)), "fixed:2", 20_000)
    assert pval < 1e-4, (pval, tv)


def test_hidden_state_policies_are_refused():
    with pytest.raises(ValueError, match="hidden"):
        draft(LookupDrafter(5), [1, 2, 1], policy="pacer:b=1")
