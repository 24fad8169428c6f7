"""Model-free drafters (engine.drafters.lookup / suffix): exact proposals on hand-made sequences, HF
parity, spans that point at the copied tokens, the suffix trie's per-token cost bound, greedy
exactness on the tiny pair, and χ² losslessness of the real loop with a one-hot q."""
import random
import torch

from engine.decode import keep_for
from engine.drafters.lookup import LookupDrafter, lookup
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig


def draft(drafter, seq, cap=16, policy="fixed:16"):
    drafter.reset(seq[:1])
    prop = drafter.draft(seq, cap, keep_for(parse_policy(policy)), SamplingConfig(), torch.Generator())
    return prop.tokens[0], prop.fields.get("drafter", {}), prop


# ---------------------------------------------------------------- lookup: hand-made sequences


def test_lookup_copies_what_followed_the_last_bigram():
    toks, f, prop = draft(LookupDrafter(10, num_tokens=3), [1, 2, 3, 4, 5, 1, 2])
    assert toks == [3, 4, 5] and f["span"] == [2, 5] and f["match"] == [0, 2] and f["match_len"] == 2
    assert f["source"] == "prompt" or f["source"] == "output"
    assert prop.q[0].tolist() == [[1.0 if t == x else 0.0 for t in range(10)] for x in (3, 4, 5)]


def test_lookup_no_match_is_an_autoregressive_step():
    toks, f, prop = draft(LookupDrafter(10), [1, 2, 3, 4])
    assert toks == [] and f == {"source": "none", "match_len": 0} and prop.stop_reason == "no_match"
    assert prop.q[0].shape == (0, 10)


def test_lookup_falls_back_to_shorter_ngrams_and_prefers_the_earliest():
    # bigram (9, 2) never occurred before; unigram 2 did, at 1 and 4: HF takes the earliest.
    assert lookup([1, 2, 7, 3, 2, 8, 9, 2], 5, 2) == (1, 1, 7)
    assert lookup([1, 2, 7, 3, 2, 8, 9, 2], 5, 2, pick_recent=True) == (4, 1, 8)


def test_lookup_overlapping_match_and_end_of_context():
    # [1, 1, 1]: the bigram at 0 overlaps the final one; its continuation is just the last token.
    assert draft(LookupDrafter(5, num_tokens=4), [1, 1, 1])[0] == [1]
    # A run longer than the cap is cut at num_tokens, and the cap from the policy cuts further.
    assert draft(LookupDrafter(5, num_tokens=4), [3, 1, 1, 1, 1, 1, 1, 1])[0] == [1, 1, 1, 1]
    assert draft(LookupDrafter(5, num_tokens=4), [3, 1, 1, 1, 1, 1, 1, 1], cap=2)[0] == [1, 1]


def test_lookup_matches_hf_prompt_lookup_on_random_sequences():
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(0)
    for trial in range(300):
        n, ng, L, V = rng.randint(1, 6), rng.randint(1, 3), rng.randint(1, 40), rng.randint(2, 6)
        seq = [rng.randrange(V) for _ in range(L)]
        hf = PromptLookupCandidateGenerator(num_output_tokens=n, max_matching_ngram_size=ng, max_length=10_000)
        cand, _ = hf.get_candidates(torch.tensor([seq]))
        want = cand[0, L:].tolist()
        assert draft(LookupDrafter(V, num_tokens=n, max_ngram=ng), seq)[0] == want, (seq, n, ng)
