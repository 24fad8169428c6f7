"""Phrase drafter (engine.drafters.phrase) and its `onehot-tree` verifier: exact pool proposals on
hand-made sequences, the per-step fields, the window-policy gates (fixed, matchlen, PACER's stop rule
on the drafter's scores), greedy exactness on the tiny pair (one chain and k-candidate trees in one
target forward), exact enumeration of the tree verifier, and χ² losslessness of the real loop."""


import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from engine.decode import DecodeConfig, decode, keep_for
from engine.drafters.base import DrafterBase
from engine.drafters.phrase import PhraseDrafter, PhrasePool, is_phrase, parse_phrase_spec, phrase_target
from engine.core.lm import HFModel, TableLM
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig
from tests.conftest import decode_with_contexts, exact_joint, greedy_reference

V = 10


def pool_of(seq, depth=8, ngram=2):
    pool = PhrasePool(depth, ngram)
    pool.prompt_len = len(seq)
    pool.sync(seq)
    return pool


def successor_lm(vocab=V):
    """A draft whose next token is always (last + 1) mod V with probability 0.9: known greedy drafts."""
    def probs(ctx):
        p = np.full(vocab, 0.1 / (vocab - 1))
        p[(ctx[-1] + 1) % vocab] = 0.9
        return p

    return TableLM(vocab, probs_fn=probs)


def propose(drafter, seq, cap, policy="fixed:16", sc=SamplingConfig()):
    drafter.reset(seq)
    return drafter.draft(seq, cap, keep_for(parse_policy(policy)), sc, torch.Generator().manual_seed(0))


# ---------------------------------------------------------------- the pool on hand-made sequences


def test_pool_copies_what_followed_the_longest_matching_suffix():
    [c] = pool_of([1, 2, 3, 4, 5, 1, 2]).candidates([1, 2, 3, 4, 5, 1, 2], k=1, limit=4)
    assert c["tokens"] == [3, 4, 5, 1] and c["match_len"] == 2 and c["span"] == [2, 6] and c["match"] == [0, 2]
    assert c["scores"] == [1.0] * 4 and c["source"] == "prompt"


def test_pool_no_match_and_the_shortest_match_length():
    assert pool_of([1, 2, 3, 4]).candidates([1, 2, 3, 4], 1, 4) == []
    # token 2 recurs, but the bigram (9, 2) never did: ngram=2 refuses the 1-token match, ngram=1 takes it
    seq = [1, 2, 7, 9, 2]
    assert pool_of(seq, ngram=2).candidates(seq, 1, 4) == []
    [c] = pool_of(seq, ngram=1).candidates(seq, 1, 4)
    # 7 9 2 copied verbatim (span), then re-anchored on the final 2, which 7 followed
    assert c["tokens"] == [7, 9, 2, 7] and c["match_len"] == 1 and c["span"] == [2, 5]


def test_pool_overlapping_matches():
    # [1, 1, 1]: the bigram at 0 overlaps the final one; only one token ever followed "1 1".
    [c] = pool_of([1, 1, 1]).candidates([1, 1, 1], 1, 4)
    assert c["tokens"][0] == 1 and c["match_len"] == 2 and c["span"][0] == 2
    # a run: the longest repeated suffix overlaps itself, the copy continues the run
    seq = [3, 1, 1, 1, 1, 1]
    [c] = pool_of(seq).candidates(seq, 1, 3)
    assert c["tokens"] == [1, 1, 1] and c["match_len"] == 4 and c["match"] == [1, 5]


def test_pool_ranks_k_candidates_by_frequency_then_recency():
    seq = [5, 1, 7, 5, 1, 8, 5, 1, 8, 5, 1]  # after "5 1": 7 once, 8 twice
    cands = pool_of(seq).candidates(seq, k=3, limit=2)
    # the longest match "5 1 8 5 1" (n = 5) only ever saw 8; the alternative 7 comes from backing off to "5 1"
    assert [c["tokens"] for c in cands] == [[8, 5], [7, 5]] and [c["match_len"] for c in cands] == [5, 2]
    assert cands[0]["scores"] == [1.0, 1.0] and cands[1]["scores"] == pytest.approx([1 / 3, 1 / 3])
    assert cands[0]["span"] == [8, 10] and cands[1]["span"] == [2, 4] and cands[1]["match"] == [0, 2]
    # ranking within one context: frequency (8: twice) before 7, whatever the order they appeared in
    seq = [5, 1, 7, 2, 5, 1, 8, 3, 5, 1, 8, 4, 5, 1]
    assert [c["tokens"][0] for c in pool_of(seq, ngram=2).candidates(seq, k=2, limit=1)] == [8, 7]
    assert len(pool_of(seq).candidates(seq, k=1, limit=1)) == 1


def test_pool_matches_the_context_with_model_drafts_and_harvested_phrases():
    pool = pool_of([4, 6, 2, 3, 9])
    assert pool.candidates([4, 6, 2, 3, 9, 4, 6], 1, 3)[0]["tokens"] == [2, 3, 9]  # ctx = x + model drafts
    pool.add_phrase([7, 7, 5, 6])  # a harvested tail: "7 7" was followed by 5 6
    [c] = pool.candidates([4, 6, 2, 3, 9, 7, 7], 1, 3)
    assert c["tokens"] == [5, 6] and c["source"] == "harvest" and "span" not in c


# ---------------------------------------------------------------- proposals and per-step fields


def test_model_tokens_then_a_phrase_with_one_hot_q():
    d = PhraseDrafter(successor_lm(), n=1, ngram=2, depth=8, max_phrase=8)
    seq = [1, 2, 3, 4, 5, 1, 2]
    prop = propose(d, seq, cap=5)
    assert prop.tokens == [[3, 4, 5, 1, 2]]  # model: 3 (successor of 2); pool: after "1 2 3" came 4 5 1 2
    f = prop.fields["drafter"]
    assert f["model_tokens"] == 1 and f["phrase_tokens"] == 4 and f["match_len"] == 3
    assert f["span"] == [3, 7] and f["match"] == [0, 3] and f["source"] == "prompt"
    assert seq[3:7] == prop.tokens[0][1:]
    q = prop.q[0]
    assert torch.equal(q[1:], torch.eye(V, dtype=q.dtype)[[4, 5, 1, 2]])  # phrase: δ(y_i)
    assert prop.q_shown[0][1:] == [1.0] * 4 and prop.entropy[0][1:] == [0.0] * 4
    assert prop.q_shown[0][0] == pytest.approx(0.9)


def test_under_sampling_the_model_rows_are_q_and_the_phrase_rows_one_hot():
    d = PhraseDrafter(successor_lm(), n=2, ngram=1, depth=8)
    seq = [1, 2, 3, 4, 5, 6, 1, 2]
    prop = propose(d, seq, cap=6, sc=SamplingConfig(temperature=1.0))
    toks, q = prop.tokens[0], prop.q[0]
    m = prop.fields["drafter"]["model_tokens"]
    assert m == 2 and len(toks) > m
    for i in range(m):  # the draft's own law at each model position
        ctx = tuple(seq + toks[:i])
        assert torch.allclose(q[i].double(), d.lm.dist(ctx).to(q.dtype).double())
    assert torch.equal(q[m:], torch.eye(V, dtype=q.dtype)[toks[m:]])


def test_no_match_is_the_model_block_and_no_room_skips_the_pool():
    d = PhraseDrafter(successor_lm(), n=3)
    prop = propose(d, [0, 5, 9], cap=6)
    assert prop.tokens == [[0, 1, 2]] and prop.fields["drafter"]["phrase_stop"] == "no_match"
    assert prop.fields["drafter"]["phrase_tokens"] == 0 and "span" not in prop.fields["drafter"]
    prop = propose(d, [1, 2, 3, 1, 2], cap=3)
    assert prop.tokens == [[3, 4, 5]] and prop.fields["drafter"]["phrase_stop"] == "no_room"


def test_matchlen_policy_cuts_the_phrase_at_its_match_length():
    d = PhraseDrafter(successor_lm(), n=1, ngram=1, depth=16)
    seq = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]
    # model drafts 3; "1 2 3" matched (length 3): matchlen:1 keeps 3 phrase tokens, offset=-2 keeps 1
    assert propose(d, seq, 8, "matchlen:1").tokens == [[3, 4, 5, 6]]
    assert propose(d, seq, 8, "matchlen:1,offset=-2").tokens == [[3, 4]]
    assert propose(d, seq, 8, "fixed:8").tokens == [[3, 4, 5, 6, 7, 8, 1, 2]]


def test_pacer_stop_rule_on_the_drafter_scores():
    from engine.policies.pacer import Pacer, PreVerifier, PreVerifierConfig

    mb = PreVerifier(PreVerifierConfig(hidden_size=8))
    d = PhraseDrafter(successor_lm())
    cand = {"tokens": [1, 2, 3, 4, 5], "scores": [1.0, 0.8, 0.4, 0.3, 0.3], "match_len": 2}
    keep, said = d._gate(dict(cand), keep_for(Pacer(block=2, threshold=0.5, model=mb, trim=0)))
    assert keep == 4 and said["stop"] == "pre_verify"  # block 1 mean 0.9 ≥ t; block 2 mean 0.35 < t: verified
    assert [b["decision"] for b in said["blocks"]] == ["continue", "stop"]
    assert d._gate(dict(cand), keep_for(Pacer(block=2, threshold=0.5, model=mb, trim=1)))[0] == 2  # trim drops block 2
    # t grows by ρ after each passing block: 0.5 → 0.75 → 1.125, so the third token (0.4) stops it
    keep, said = d._gate(dict(cand), keep_for(Pacer(block=1, threshold=0.5, rho=1.5, model=mb, trim=0)))
    assert keep == 3 and said["blocks"][2]["t_before"] == pytest.approx(1.125)
    assert d._gate(dict(cand), keep_for(Pacer(block=1, threshold=0.2, model=mb)))[0] == 5


def test_spec_parsing():
    assert is_phrase("phrase:model=x") and not is_phrase("lookup") and not is_phrase(None)
    assert parse_phrase_spec("phrase:model=/m/draft,n=3,k=2,ngram=1,depth=12,len=6") == (
        "/m/draft", {"n": 3, "k": 2, "ngram": 1, "depth": 12, "max_phrase": 6})
    with pytest.raises(ValueError, match="model="):
        parse_phrase_spec("phrase:n=3")
    with pytest.raises(ValueError, match="no parameter"):
        parse_phrase_spec("phrase:model=a,gamma=3")
    d = PhraseDrafter(successor_lm(), k=2)
    with pytest.raises(ValueError, match="onehot-tree"):
        phrase_target(TableLM(V), d, "token")
    with pytest.raises(ValueError, match="not lossless"):
        phrase_target(TableLM(V), d, "rrs")
    with pytest.raises(ValueError, match="k must be"):
        PhraseDrafter(successor_lm(), k=0)


# ---------------------------------------------------------------- the real loop


PROMPTS = [[1, 5, 9, 3, 1, 5, 9], [2, 2, 2, 2, 2, 2, 2, 2, 11, 40], [7]]


_run = decode_with_contexts


@pytest.mark.parametrize("spec,policy,verifier", [
    ("n=2,ngram=1", "fixed:6", "token"),
    ("n=4,ngram=2,len=4", "matchlen:1,offset=1,max=8", "token"),
    ("n=1,ngram=1,depth=4", "confidence:0.4,max=8,trim=1", "block"),
    ("n=2,k=3,ngram=1", "fixed:6", "onehot-tree"),
    ("n=2,k=2,ngram=1,len=3", "heuristic:4,max=8", "onehot-tree"),
])
def test_greedy_equals_target_generate(tiny_target, tiny_draft, spec, policy, verifier):
    kw = dict(x.split("=") for x in spec.split(","))
    d = PhraseDrafter(HFModel(tiny_draft, "tiny-draft"), **{k if k != "len" else "max_phrase": int(v)
                                                            for k, v in kw.items()})
    target = phrase_target(HFModel(tiny_target, "tiny-target"), d, verifier)
    assert (type(target).__name__ == "TreeTarget") == (d.k > 1)
    phrase_acc, trees = 0, 0
    for prompt in PROMPTS:
        steps, ctx, out = _run(target, d, prompt, policy, 24, verifier=verifier)
        assert out == greedy_reference(tiny_target, prompt, 24), (spec, policy, prompt)
        for s in steps:
            f = s.policy_fields["drafter"]
            phrase_acc += max(0, s.accepted - f["model_tokens"])
            trees += s.all_drafts is not None
    assert phrase_acc > 0, "phrases should be accepted sometimes on these repetitive prompts"
    if d.k == 1 or policy.startswith("fixed"):  # (heuristic windows rarely leave room for two phrases here)
        assert (trees > 0) == (d.k > 1)


def test_pacer_with_phrases_is_greedy_exact(tiny_target, tiny_draft):
    from engine.policies.pacer import Pacer, PreVerifier, PreVerifierConfig

    mb = PreVerifier(PreVerifierConfig(hidden_size=tiny_draft.config.hidden_size))
    d = PhraseDrafter(HFModel(tiny_draft, "tiny-draft", want_hidden=True), n=4, ngram=1)
    target = HFModel(tiny_target, "tiny-target")
    for prompt in PROMPTS[:2]:
        steps = list(decode(target, d, prompt, Pacer(block=1, threshold=0.3, model=mb), DecodeConfig(max_new_tokens=20)))
        assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tiny_target, prompt, 20)
        assert any(s.policy_fields["drafter"]["phrase_tokens"] for s in steps)


def test_step_fields_say_where_each_token_came_from(tiny_target, tiny_draft):
    d = PhraseDrafter(HFModel(tiny_draft, "tiny-draft"), n=2, ngram=1)
    target = HFModel(tiny_target, "tiny-target")
    checked = 0
    for prompt in PROMPTS:
        steps, ctx, _ = _run(target, d, prompt, "fixed:6", 30)
        for s, c in zip(steps, ctx):
            f = s.policy_fields["drafter"]
            m, r = f["model_tokens"], f["phrase_tokens"]
            assert m + r == s.window and m <= 2
            if "span" in f:
                a, b = f["span"]
                assert 0 <= a < b <= len(c) and tuple(c[a:b]) == s.draft_tokens[m:m + b - a]
                m0, m1 = f["match"]
                assert m1 == a and m1 - m0 == f["match_len"]
                full = c + list(s.draft_tokens[:m])  # the matched context ends the block's model part
                assert full[m0:m1] == full[len(full) - f["match_len"]:]
                assert f["source"] == ("prompt" if a < len(prompt) else "output")
                checked += 1
    assert checked > 3


class _SmearedPhraseQ(DrafterBase):
    """The phrase drafter reporting a smeared q on its phrase rows (what a bug in the one-hot would
    look like): the χ² test must reject it."""

    def __init__(self, inner):
        self.inner, self.vocab_size = inner, inner.vocab_size

    def reset(self, p):
        self.inner.reset(p)

    def draft(self, *a):
        prop = self.inner.draft(*a)
        m = prop.fields["drafter"]["model_tokens"]
        for q in prop.q:
            q[m:] = q[m:] * 0.5 + (1 - q[m:]) * 0.5 / (self.vocab_size - 1)
        return prop

    def commit(self, *a):
        self.inner.commit(*a)

    def observe(self, t):
        pass


def _chi_square(make_drafter, policy, verifier, samples, prompt=(0, 1, 2, 0, 1)):
    target = TableLM(3, seed=3, scale=1.0)  # flat enough that every 3-token cell expects ≥ 5 hits
    prompt, n = list(prompt), 3  # repetitive: the pool proposes on most steps
    cells, expected = exact_joint(target, prompt, n)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells))
    phrase, trees = 0, 0
    pol = parse_policy(policy)
    d = make_drafter()
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, verifier=verifier, sampling=SamplingConfig(temperature=1.0, seed=s))
        steps = list(decode(target, d, prompt, pol, cfg))
        phrase += sum(r.policy_fields["drafter"]["phrase_tokens"] for r in steps)
        trees += sum(r.all_drafts is not None for r in steps)
        counts[index[tuple(t for r in steps for t in r.emitted_tokens)]] += 1
    exp = expected * samples
    assert exp.min() >= 5 and phrase >= samples  # the pool really proposed (≥ 1 phrase token per run)
    return chisquare(counts, exp).pvalue, 0.5 * np.abs(counts / samples - expected).sum(), trees


def _draft(k=1):
    return PhraseDrafter(TableLM(3, seed=5, scale=1.0), n=1, k=k, ngram=1, depth=4)


@pytest.mark.slow
@pytest.mark.parametrize("k,verifier,prompt", [(1, "token", (0, 1, 2, 0, 1)),
                                               (2, "onehot-tree", (0, 1, 2, 0, 2, 1, 0))])  # 0 and 1 branch
def test_chi_square_of_the_real_loop(k, verifier, prompt):
    pval, tv, trees = _chi_square(lambda: _draft(k), "fixed:3", verifier, 20_000, prompt)
    # Sampling noise alone gives TV ≈ 0.013 over these 27 cells at 20k samples; the smeared q below
    # is rejected by the same statistic, so the test has power where it matters.
    assert pval > 1e-4 and tv < 0.03, (pval, tv)
    assert (trees > 0) == (k > 1)


@pytest.mark.slow
def test_chi_square_rejects_a_smeared_phrase_q():
    pval, tv, _ = _chi_square(lambda: _SmearedPhraseQ(_draft()), "fixed:3", "token", 20_000)
    assert pval < 1e-4, (pval, tv)


def test_bench_costs_price_a_phrase_drafter_by_its_draft_model():
    """The bench's cost line: a phrase drafter costs its draft model's forward; a model-free draft has none."""
    import math

    from engine.bench.runner import measure_costs
    from engine.drafters.lookup import LookupDrafter

    ctx = [1, 2, 3, 4, 5]
    got = measure_costs(successor_lm(), PhraseDrafter(successor_lm(), n=2), ctx, reps=1)
    assert math.isfinite(got["t_draft_ms"]) and got["t_draft_ms"] >= 0 and math.isfinite(got["c"])
    assert math.isnan(measure_costs(successor_lm(), LookupDrafter(V), ctx, reps=1)["t_draft_ms"])
