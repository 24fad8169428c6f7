"""Model-free drafters (engine.drafters.lookup / suffix): exact proposals on hand-made sequences, HF
parity, spans that point at the copied tokens, the suffix trie's per-token cost bound, greedy
exactness on the tiny pair, and χ² losslessness of the real loop with a one-hot q."""
import random

import numpy as np
import pytest
import torch

from engine.decode import keep_for
from engine.drafters.suffix import SuffixDrafter, SuffixTrie
from engine.policies.base import parse_policy
from engine.policies.simple import Fixed
from engine.core.sampling import SamplingConfig


def draft(drafter, seq, cap=16, policy="fixed:16"):
    drafter.reset(seq[:1])
    prop = drafter.draft(seq, cap, keep_for(parse_policy(policy)), SamplingConfig(), torch.Generator())
    return prop.tokens[0], prop.fields.get("drafter", {}), prop


# ---------------------------------------------------------------- suffix: hand-made sequences


def test_suffix_longest_match_and_span():
    seq = [1, 2, 3, 1, 2, 3, 1, 2]  # longest earlier-repeated suffix: 1 2 3 1 2 (at 0..4), then 3
    toks, f, _ = draft(SuffixDrafter(5, min_prob=0.0), seq)
    assert toks == [3, 1, 2] and f["match_len"] == 5 and f["span"] == [5, 8] and f["match"] == [0, 5]
    assert seq[5:8] == toks and f["score"] == 1.0


def test_suffix_prefers_the_most_frequent_continuation_then_the_most_recent():
    # depth 2 keeps only unigram contexts: after 1 came 7 once and 8 twice.
    toks, f, prop = draft(SuffixDrafter(10, depth=2, min_prob=0.0, max_tokens=3), [1, 7, 1, 8, 1, 8, 1])
    assert toks == [8, 1, 8] and f["match_len"] == 1
    assert prop.fields["drafter_scores"] == pytest.approx([2 / 3, 2 / 3, 4 / 9], abs=1e-6)
    # the path score gate (SuffixDecoding's min_token_prob) stops before the score drops under p
    assert draft(SuffixDrafter(10, depth=2, min_prob=0.5, max_tokens=3), [1, 7, 1, 8, 1, 8, 1])[0] == [8, 1]
    # a tie in counts goes to the most recent continuation
    assert draft(SuffixDrafter(10, depth=2, min_prob=0.0, max_tokens=1), [1, 7, 1, 8, 1])[0] == [8]


def test_suffix_no_match():
    toks, f, prop = draft(SuffixDrafter(10), [4, 5, 6])
    assert toks == [] and f["match_len"] == 0 and prop.stop_reason == "no_match"


def test_suffix_corpus_of_earlier_requests():
    d = SuffixDrafter(10, min_prob=0.0, corpus=1, max_tokens=4)
    d.reset([5, 6, 7, 8, 9])
    d.draft([5, 6, 7, 8, 9], 4, keep_for(Fixed(4)), SamplingConfig(), torch.Generator())
    d.reset([1, 5, 6])  # the previous request goes into the corpus
    prop = d.draft([1, 5, 6], 4, keep_for(Fixed(4)), SamplingConfig(), torch.Generator())
    assert prop.tokens[0] == [7, 8, 9] and prop.fields["drafter"]["source"] == "corpus"
    assert "span" not in prop.fields["drafter"]  # positions in another request's text


def test_suffix_trie_cost_per_token_does_not_grow_with_length():
    """Counted node visits, not time: each appended token costs ≤ D + 1 visits, and one proposal
    (sync + match + walk) the same at 100 as at 20 000 tokens."""
    D = 16
    trie = SuffixTrie(D)
    rng = random.Random(1)
    text = [rng.randrange(4) for _ in range(20_000)]
    per_token = []
    for t in text:
        before = trie.ops
        trie.append(t)
        per_token.append(trie.ops - before)
    assert max(per_token) <= D + 1
    assert np.mean(per_token[:200]) <= D + 1 and np.mean(per_token[-200:]) <= D + 1

    def proposal_ops(n):
        d = SuffixDrafter(4, depth=D, max_tokens=8, min_prob=0.0)
        d.reset(text[:n - 1])
        before = d.trie.ops
        d.draft(text[:n], 8, keep_for(Fixed(8)), SamplingConfig(), torch.Generator())
        return d.trie.ops - before

    bound = (D + 1) + D + 8 * (4 + D)  # one append, the match scan, ≤ 8 steps (children ≤ V, re-anchor ≤ D)
    assert proposal_ops(100) <= bound and proposal_ops(20_000) <= bound
