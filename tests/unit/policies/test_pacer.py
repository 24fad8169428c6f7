"""PACER: pre-verifier, stop rule, data recording, packed training, weights I/O (tiny models only)."""

import json

import pytest
import torch

from engine.decode import DecodeConfig, decode
from engine.core.lm import HFModel
from engine.policies.pacer import Pacer, PreVerifier, PreVerifierConfig, block_decision, load_weights, save_weights
from engine.policies.base import DraftInfo, parse_policy
from engine.core.sampling import SamplingConfig
from tests.conftest import greedy_reference
from tests.conftest import FixedScores, run_blocks

H = 32  # tiny_llama hidden size


def tiny_mb(seed=0, **kw) -> PreVerifier:
    torch.manual_seed(seed)
    return PreVerifier(PreVerifierConfig(hidden_size=H, d_model=16, heads=2, ff=32, **kw)).eval()


@pytest.mark.parametrize("block,t,rho", [(1, 0.5, 1.0), (2, 0.45, 1.1), (4, 0.5, 1.2)])
def test_greedy_pacer_reproduces_target(tiny_target, tiny_draft, block, t, rho):
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    prompt = [3, 17, 5, 9]
    pol = Pacer(block=block, threshold=t, rho=rho, max_window=8, model=tiny_mb())
    steps = list(decode(target, draft, prompt, pol, DecodeConfig(max_new_tokens=40)))
    out = [tok for s in steps for tok in s.emitted_tokens]
    assert out == greedy_reference(tiny_target, prompt, 40)
    for s in steps[:-1]:
        pf = s.policy_fields
        assert pf["stop"] in ("pre_verify", "cap") and pf["mb_ms"] >= 0
        if pf["stop"] == "pre_verify":
            assert s.stop_reason == "policy" and pf["blocks"][-1]["decision"] == "stop"
            assert s.window % block == 0
        for b in pf["blocks"]:
            assert len(b["scores"]) == block and b["tokens"][1] - b["tokens"][0] + 1 == block
    json.dumps([s.policy_fields for s in steps])  # trace-serialisable


@pytest.mark.parametrize("spec_block", [1, 2])
def test_trim_drops_the_failing_block_and_stays_exact(tiny_target, tiny_draft, spec_block):
    """trim=1: the block that failed pre-verification is never verified (a step may draft 0 tokens,
    i.e. be an autoregressive step), and greedy output still equals the target's own."""
    scores = [0.9, 0.9, 0.1, 0.1] * 8  # blocks of 2: pass, fail; b = 1: pass, pass, fail
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    prompt = [3, 17, 5, 9]
    pol = Pacer(block=spec_block, threshold=0.5, rho=1.0, max_window=8, model=FixedScores(scores), trim=1)
    steps = list(decode(target, draft, prompt, pol, DecodeConfig(max_new_tokens=30)))
    assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tiny_target, prompt, 30)
    for s in steps[:-1]:
        pf = s.policy_fields
        assert pf["stop"] == "pre_verify" and pf["dropped"] == spec_block
        assert s.window == 2 and len(pf["blocks"]) * spec_block == s.window + spec_block
    zero = Pacer(block=1, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.1] * 32), trim=1)
    steps = list(decode(target, draft, prompt, zero, DecodeConfig(max_new_tokens=12)))
    assert all(s.window == 0 and s.emitted == 1 for s in steps)  # every draft dropped: plain AR steps
    assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tiny_target, prompt, 12)
    assert parse_policy("pacer:b=2,t=0.5,trim=1").spec.endswith("trim=1")
    with pytest.raises(ValueError, match="trim"):
        Pacer(trim=2, model=tiny_mb())


def test_stop_rule_threshold_growth_and_reason():
    assert block_decision(0.4, 0.5, 1.2) == (True, 0.5)
    assert block_decision(0.6, 0.5, 1.2) == (False, pytest.approx(0.6))
    pol = Pacer(block=4, threshold=0.5, rho=1.2, max_window=32, model=FixedScores([0.8] * 32))
    n, f = run_blocks(pol, 32)
    # t: 0.5 → 0.6 → 0.72 → 0.864; block 4's mean 0.8 < 0.864 stops after 16 tokens
    assert n == 16 and f["stop"] == "pre_verify"
    assert [b["t_before"] for b in f["blocks"]] == pytest.approx([0.5, 0.6, 0.72, 0.864])
    assert [b["decision"] for b in f["blocks"]] == ["continue"] * 3 + ["stop"]
    assert f["blocks"][0]["mean"] == pytest.approx(0.8) and f["blocks"][0]["tokens"] == [1, 4]


def test_stop_rule_no_growth_and_cap():
    pol = Pacer(block=4, threshold=0.5, rho=1.0, max_window=12, model=FixedScores([0.8] * 32))
    n, f = run_blocks(pol, 12)
    assert n == 12 and f["stop"] == "cap" and len(f["blocks"]) == 2  # no M_B call at the cap itself
    assert all(b["t_after"] == 0.5 for b in f["blocks"])
    # mean of a block is what counts: one bad token in a good block does not stop
    pol = Pacer(block=2, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.9, 0.2, 0.3, 0.4, 0.9, 0.9]))
    n, f = run_blocks(pol, 8)
    assert n == 4 and [b["mean"] for b in f["blocks"]] == pytest.approx([0.55, 0.35])
    # state resets per step
    n2, _ = run_blocks(pol, 8)
    assert n2 == 4


def test_policy_validation_and_spec():
    with pytest.raises(ValueError, match="rho"):
        Pacer(rho=0.9, model=tiny_mb())
    with pytest.raises(ValueError, match="block"):
        Pacer(block=20, max_window=16, model=tiny_mb())
    pol = Pacer(block=2, threshold=0.4, rho=1.1, max_window=8, model=tiny_mb())
    assert pol.spec == "pacer:b=2,t=0.4,rho=1.1,max=8,trim=0"  # unset trim: the paper's rule for b > 1 …
    assert Pacer(block=1, model=tiny_mb()).trim == 1  # … and trimming where it is exact at every T (b = 1)
    assert parse_policy("pacer:b=2,trim=1").spec.endswith("trim=1")  # the spec always round-trips trim
    with pytest.raises(ValueError, match="want_hidden"):
        pol.propose()
        pol.keep_drafting(DraftInfo(1, 0, 0.5, 0.1, None))


def test_weights_round_trip(tmp_path):
    m = tiny_mb(3, use_pos=False)
    p = tmp_path / "w.safetensors"
    save_weights(m, p, {"note": "x"})
    m2, extra = load_weights(p)
    assert extra == {"note": "x"} and m2.cfg == m.cfg
    h, q, e = torch.randn(6, H), torch.rand(6), torch.rand(6)
    assert torch.equal(m.score_step(h, q, e), m2.score_step(h, q, e))
    assert Pacer(weights=str(p)).model.cfg.use_pos is False


def test_malformed_weights_one_line_error(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file at all")
    from safetensors.torch import save_file

    foreign = tmp_path / "foreign.safetensors"
    save_file({"x": torch.zeros(2)}, str(foreign))
    for path in (tmp_path / "missing.safetensors", bad, foreign):
        with pytest.raises(ValueError) as e:
            Pacer(weights=str(path))
        msg = str(e.value)
        assert "\n" not in msg and str(path) in msg and msg.startswith("cannot load PACER weights")


def test_parse_policy_knows_pacer():
    with pytest.raises(ValueError, match="no parameter 'bogus'"):
        parse_policy("pacer:bogus=1")


def test_pacer_trim_under_sampling_needs_b1(tiny_target, tiny_draft):
    """b > 1: dropping a block reads states computed from the block's own tokens, a filter by value
    with no closed-form kept law: refused at T > 0. b = 1 decides before the token is drawn: allowed."""
    target, draft = HFModel(tiny_target, "t"), HFModel(tiny_draft, "d", want_hidden=True)
    cfg = DecodeConfig(max_new_tokens=8, sampling=SamplingConfig(temperature=0.7, seed=0))
    pol = Pacer(block=2, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.1] * 32), trim=1)
    with pytest.raises(ValueError, match="exact for greedy decoding only"):
        list(decode(target, draft, [3, 17, 5, 9], pol, cfg))
    pol.trim = 0  # the untrimmed rule verifies every drafted token: fine under sampling
    assert sum(s.emitted for s in decode(target, draft, [3, 17, 5, 9], pol, cfg)) == 8
    one = Pacer(block=1, threshold=0.5, rho=1.0, max_window=8, model=FixedScores([0.1] * 32), trim=1)
    steps = list(decode(target, draft, [3, 17, 5, 9], one, cfg))
    assert sum(s.emitted for s in steps) == 8 and all(s.window == 0 for s in steps)  # every draft dropped


def test_pacer_reads_the_pre_sample_confidence():
    """M_B's confidence input is max_x q(x) (DraftInfo.q_max), not the sampled token's q(x)."""
    seen = []

    class Spy(FixedScores):
        def score_step(self, hidden, q, ent):
            seen.append(q.tolist())
            return super().score_step(hidden, q, ent)

    pol = Pacer(block=1, threshold=0.5, rho=1.0, max_window=4, model=Spy([0.9] * 8))
    pol.reset()
    pol.propose()
    pol.keep_drafting(DraftInfo(1, 0, 0.2, 0.1, torch.zeros(H), 0.7))
    assert seen[-1] == pytest.approx([0.7])
