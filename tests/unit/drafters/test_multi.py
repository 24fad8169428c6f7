"""Multi-draft verifiers (RRS, K-SEQ, RBV, SpecTr-GBV as published): exact enumeration, notes regression
values, the optimal-acceptance bound, drafter/tree bookkeeping and χ² of the real decode loop."""

import pytest
from engine.decode import DecodeConfig, decode
from engine.drafters.multi import MultiDraftConfig, MultiDrafter
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig
from engine.core.tree import TreeTarget


@pytest.mark.parametrize("mode", ["batch", "sequential"])
def test_multi_drafter_bookkeeping(pair, mode):
    target, draft = pair
    drafter = MultiDrafter(draft, MultiDraftConfig(k=3, mode=mode))
    cfg = DecodeConfig(max_new_tokens=20, verifier="rbv", sampling=SamplingConfig(temperature=1.0, seed=4))
    steps = list(decode(TreeTarget(target), drafter, [1, 5, 9, 3], parse_policy("fixed:3"), cfg))
    assert sum(s.emitted for s in steps) == 20
    for s in steps:
        if s.all_drafts is not None:
            assert len(s.all_drafts) == 3 and s.draft_tokens == s.all_drafts[s.chosen]
            assert len(s.decisions) == s.window and s.emitted_tokens[: s.accepted] == s.draft_tokens[: s.accepted]


def test_greedy_multi_draft_equals_autoregressive(pair):
    target, draft = pair
    prompt = [1, 5, 9, 3]
    ref = [t for s in decode(target, None, prompt, None, DecodeConfig(max_new_tokens=16)) for t in s.emitted_tokens]
    for name in ("rrs", "kseq", "rbv", "kbv"):
        cfg = DecodeConfig(max_new_tokens=16, verifier=name)
        out = [t for s in decode(TreeTarget(target), MultiDrafter(draft, MultiDraftConfig(k=2)), prompt,
                                 parse_policy("fixed:3"), cfg) for t in s.emitted_tokens]
        assert out == ref, name
