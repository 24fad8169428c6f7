"""A reduced-vocabulary draft head (q′ = 0 outside the kept set) keeps speculative decoding exact:
the χ² of the real loop with a real (tiny) transformers draft, and greedy equality with the target."""

import itertools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from engine.decode import DecodeConfig, decode
from engine.core.lm import HFModel
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig
from engine.models.tiny import noisy_copy, tiny_llama

V = 4
KEEP = torch.tensor([0, 2, 3])  # token 1 can never be drafted: only the residual can emit it


@pytest.fixture(scope="module")
def pair4():
    target = tiny_llama(3, vocab=V)
    draft = noisy_copy(target, 4, scale=0.8)
    return target, draft


def _target_joint(target, prompt, n):
    lm = HFModel(target)
    cells = list(itertools.product(range(V), repeat=n))
    probs = []
    for z in cells:
        lm.reset()
        rows = lm.extend(list(prompt) + list(z[:-1])).double().softmax(-1)[len(prompt) - 1:]
        probs.append(float(np.prod([rows[i, t] for i, t in enumerate(z)])))
    return cells, np.array(probs)


def test_reduced_head_scores_only_the_kept_set(pair4):
    _, draft = pair4
    lm = HFModel(draft, vocab_subset=KEEP)
    full = HFModel(draft).extend([0, 2, 3])
    red = lm.extend([0, 2, 3])
    assert torch.isinf(red[:, 1]).all() and (red[:, 1] < 0).all()
    torch.testing.assert_close(red[:, KEEP], full[:, KEEP], atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_chi_square_of_the_real_loop_with_a_reduced_head(pair4):
    target, draft = pair4
    t, d = HFModel(target), HFModel(draft, vocab_subset=KEEP)
    prompt, n, samples = [0, 3], 3, 12_000
    cells, expected = _target_joint(target, prompt, n)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells))
    pol = parse_policy("fixed:2")
    emitted_1 = 0
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=1.0, seed=s))
        out = [x for r in decode(t, d, prompt, pol, cfg, request_id=0) for x in r.emitted_tokens]
        counts[index[tuple(out)]] += 1
        emitted_1 += out.count(1)
    assert emitted_1 > 0  # the never-drafted token still comes out, through the residual
    stat, pval = chisquare(counts, expected * samples)
    tv = 0.5 * np.abs(counts / samples - expected).sum()
    # 64 cells at 12k samples: sampling noise alone gives TV ≈ 0.03, so TV only guards gross errors;
    # the χ² carries the power (the test below shows it rejects the reduced draft's own law).
    assert pval > 1e-4 and tv < 0.06, (stat, pval, tv)


def test_chi_square_sees_the_reduced_draft_itself(pair4):
    """The statistic has power here: the draft's own law (with token 1 impossible) is rejected."""
    target, draft = pair4
    cells, expected = _target_joint(target, [0, 3], 3)
    lm = HFModel(draft, vocab_subset=KEEP)
    q = []
    for z in cells:
        lm.reset()
        rows = lm.extend([0, 3] + list(z[:-1])).double().softmax(-1)[1:]
        q.append(float(np.prod([rows[i, tk] for i, tk in enumerate(z)])))
    counts = np.random.default_rng(0).multinomial(12_000, np.array(q) / sum(q))
    assert chisquare(counts + 1e-9, expected * 12_000).pvalue < 1e-4


def test_reduced_head_is_greedy_exact(tiny_target, tiny_draft):
    t = HFModel(tiny_target)
    keep = torch.arange(0, 64, 2)  # half the vocabulary
    d = HFModel(tiny_draft, vocab_subset=keep)
    prompt = [5, 9, 2, 33]
    cfg = DecodeConfig(max_new_tokens=40)
    ar = [x for r in decode(t, None, prompt, None, cfg) for x in r.emitted_tokens]
    for spec in ("fixed:3", "heuristic"):
        recs = list(decode(t, d, prompt, parse_policy(spec), cfg))
        assert [x for r in recs for x in r.emitted_tokens] == ar
        assert all(tok % 2 == 0 for r in recs for tok in r.draft_tokens)  # only kept ids are drafted


def test_prompt_tokens_join_the_kept_set_and_stay_exact(tiny_target, tiny_draft):
    """subset_adds_prompt: a token outside V′ that the prompt contains becomes draftable for that
    request only; greedy output still equals the target's."""
    t = HFModel(tiny_target)
    keep = torch.arange(0, 64, 2)
    prompt = [5, 9, 2, 33, 7, 7, 5]  # odd ids: outside V′
    cfg = DecodeConfig(max_new_tokens=40)
    ar = [x for r in decode(t, None, prompt, None, cfg) for x in r.emitted_tokens]
    plain = HFModel(tiny_draft, vocab_subset=keep)
    grown = HFModel(tiny_draft, vocab_subset=keep, subset_adds_prompt=True)
    recs = list(decode(t, grown, prompt, parse_policy("fixed:3"), cfg))
    assert [x for r in recs for x in r.emitted_tokens] == ar
    assert set(grown.vocab_subset.tolist()) == set(keep.tolist()) | {5, 9, 33, 7}
    assert all(tok % 2 == 0 or tok in (5, 9, 33, 7) for r in recs for tok in r.draft_tokens)
    list(decode(t, grown, [2, 4], parse_policy("fixed:3"), cfg))  # the next request: back to V′ ∪ its own
    assert set(grown.vocab_subset.tolist()) == set(keep.tolist())
    list(decode(t, plain, prompt, parse_policy("fixed:3"), cfg))
    assert plain.vocab_subset.numel() == keep.numel()  # off by default


def test_the_grown_head_is_cut_on_its_first_call_not_when_the_request_starts(tiny_draft):
    """A request whose prompt adds ids to V′ but never drafts never pays for cutting the new head (on the
    quantized path that cut is ~0.8 s); the head module stays the same object, so forward hooks still see it."""
    lm = HFModel(tiny_draft, vocab_subset=torch.arange(0, 64, 2), subset_adds_prompt=True)
    head = lm.sub_head
    lm.add_request_tokens([5, 9])
    assert lm.sub_head is head and head.inner is None and {5, 9} <= set(lm.vocab_subset.tolist())
    logits = lm.extend([5, 2, 9])
    assert head.inner is not None and head.inner.weight.shape[0] == lm.vocab_subset.numel()
    assert torch.isfinite(logits[:, [5, 9]]).all() and torch.isinf(logits[:, 7]).all()
