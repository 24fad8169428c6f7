"""Model-free drafters (engine.drafters.lookup / suffix): exact proposals on hand-made sequences, HF
parity, spans that point at the copied tokens, the suffix trie's per-token cost bound, greedy
exactness on the tiny pair, and χ² losslessness of the real loop with a one-hot q."""

import json
import random

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from engine.decode import DecodeConfig, decode, keep_for
from engine.drafters.base import DrafterBase
from engine.drafters.lookup import LookupDrafter, lookup
from engine.drafters.modelfree import make_model_free
from engine.drafters.suffix import SuffixDrafter, SuffixTrie
from engine.core.lm import HFModel, TableLM
from engine.policies.base import parse_policy
from engine.policies.simple import Fixed
from engine.core.sampling import SamplingConfig
from tests.conftest import decode_with_contexts, exact_joint, greedy_reference


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


# ---------------------------------------------------------------- first-class: CLI and trace


@pytest.mark.parametrize("spec,policy", [("lookup:n=4", "fixed:4"), ("suffix:n=8", "matchlen:1,offset=2")])
def test_decode_cli_with_a_model_free_draft(model_dirs, tmp_path, spec, policy):
    from engine.__main__ import main
    from engine.trace.format import load_trace

    t, _, prompts = model_dirs
    out = tmp_path / "mf.jsonl"
    assert main(["decode", "--target", str(t), "--draft", spec, "--policy", policy, "--prompts", str(prompts),
                 "--max-new-tokens", "12", "--dtype", "fp32", "--out", str(out)]) == 0
    tr = load_trace(out)
    assert tr.complete and tr.header["draft"]["name"].startswith(spec.split(":")[0])
    assert tr.header["policy"]["spec"].startswith(policy.split(":")[0])
    assert all("drafter" in s["policy_fields"] for s in tr.steps)
    json.dumps(tr.steps[0]["policy_fields"])
    assert main(["decode", "--target", str(t), "--draft", spec, "--policy", "fixed:3", "--verifier", "rbv",
                 "--k", "2", "--prompts", str(prompts), "--out", str(tmp_path / "no.jsonl")]) == 2


def test_hidden_state_policies_are_refused():
    with pytest.raises(ValueError, match="hidden"):
        draft(LookupDrafter(5), [1, 2, 1], policy="pacer:b=1")


def test_bench_cli_with_a_model_free_draft(model_dirs, tmp_path):
    from engine.__main__ import main

    t, _, prompts = model_dirs
    out = tmp_path / "bench.json"
    assert main(["bench", "--target", str(t), "--draft", "suffix:n=8", "--prompts", str(prompts),
                 "--per-category", "1", "--max-new-tokens", "10", "--configs", "ar;fixed:4;matchlen:1,offset=2",
                 "--temperatures", "0,0.7", "--warmup", "0", "--dtype", "fp32", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["complete"] and res["greedy_mismatches"] == [] and res["draft"].startswith("suffix")
    assert {r["config"] for r in res["runs"]} == {"ar", "fixed:4", "matchlen:1,offset=2"}
