"""Paired (shadow) verification and the paired multi-draft grid (engine.verify.shadow, engine.bench.paired)."""

from __future__ import annotations

import pytest
import torch
from engine.core.sampling import SamplingConfig
from engine.decode import DecodeConfig, decode
from engine.drafters.multi import MultiDraftConfig, MultiDrafter
from engine.policies.base import parse_policy
from engine.verify import MULTI_DRAFT, VERIFIERS, uniforms_needed
from engine.verify.shadow import parse_shadow, shadow_verify


def _step(V=5, K=3, gamma=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = [torch.rand(gamma, V, generator=g, dtype=torch.float64).softmax(-1) for _ in range(K)]
    p = [torch.rand(gamma + 1, V, generator=g, dtype=torch.float64).softmax(-1) for _ in range(K)]
    blocks = [torch.multinomial(q[k], 1, generator=g).squeeze(1).tolist() for k in range(K)]
    return blocks, q, p


def test_shadow_is_the_real_verifier_on_the_first_k_drafts():
    """Each shadow equals a direct call of its verifier on blocks[:k] with the next uniforms of the stream."""
    blocks, q, p = _step()
    names = ("token:1", "block:1", "rrs:2", "kseq:3", "rbv:2", "kbv:3", "spectr-gbv-published:3")
    specs = tuple(parse_shadow(n) for n in names)
    got = shadow_verify(specs, blocks, q, p, torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)
    for s in specs:
        bl, qq, pp = blocks[: s.k], q[: s.k], p[: s.k]
        u = torch.rand(uniforms_needed(s.verifier, [len(b) for b in bl]), generator=g, dtype=torch.float64)
        fn = VERIFIERS[s.verifier]
        res = fn(bl, qq, pp, u) if s.verifier in MULTI_DRAFT else fn(bl[0], qq[0], pp[0], u)
        assert got[s.name]["accepted"] == res.accepted, s.name
        assert got[s.name]["emitted"] == len(res.tokens), s.name


def test_shadow_emitted_is_cut_at_eos_and_budget():
    blocks, q, p = _step(V=3, K=1, gamma=3, seed=1)
    q = [torch.full((3, 3), 1 / 3, dtype=torch.float64)]
    p = [torch.full((4, 3), 1 / 3, dtype=torch.float64)]  # p = q: every draft accepted, 4 tokens emitted
    spec = (parse_shadow("token:1"),)
    assert shadow_verify(spec, blocks, q, p, torch.Generator())["token:1"]["emitted"] == 4
    assert shadow_verify(spec, blocks, q, p, torch.Generator(), remaining=2)["token:1"]["emitted"] == 2
    first = blocks[0][0]
    assert shadow_verify(spec, blocks, q, p, torch.Generator(), eos={first})["token:1"]["emitted"] == 1


@pytest.mark.parametrize("bad, msg", [("nope:1", "unknown verifier"), ("token:2", "single-draft"),
                                      ("rbv:x", "integer"), ("rbv:0", r"in \[1, 16\]")])
def test_bad_shadow_names_are_refused_in_one_line(bad, msg):
    with pytest.raises(ValueError, match=msg):
        DecodeConfig(shadow=(bad,))


def test_shadow_needing_more_drafts_than_the_run_is_refused():
    blocks, q, p = _step(K=2)
    with pytest.raises(ValueError, match="needs 3 drafts"):
        shadow_verify((parse_shadow("rbv:3"),), blocks, q, p, torch.Generator())


def test_shadows_never_change_the_run_and_stay_out_of_traces(pair):
    from engine.core.tree import TreeTarget
    from engine.trace.format import step_to_dict

    target, draft = pair
    sc = SamplingConfig(temperature=0.8, seed=3)

    def run(shadow):
        cfg = DecodeConfig(max_new_tokens=24, verifier="rbv", sampling=sc, shadow=shadow)
        return list(decode(TreeTarget(target), MultiDrafter(draft, MultiDraftConfig(k=3)), [1, 5, 9, 3],
                           parse_policy("fixed:3"), cfg))

    plain, paired = run(()), run(("token:1", "block:1", "rrs:2", "rbv:3"))
    assert [s.emitted_tokens for s in plain] == [s.emitted_tokens for s in paired]
    assert all(s.shadow is None for s in plain) and all(set(s.shadow) == {"token:1", "block:1", "rrs:2", "rbv:3"}
                                                        for s in paired)
    assert "shadow" not in step_to_dict(plain[0]) and "shadow" not in step_to_dict(paired[0])  # not trace format v1
