"""PACER: pre-verifier, stop rule, data recording, packed training, weights I/O (tiny models only)."""

import json

import pytest
import torch
from engine.core.lm import HFModel
from engine.policies.pacer import Pacer, PreVerifier, PreVerifierConfig
from engine.policies.base import DraftInfo
from tests.conftest import record_pacer_shards
from tests.conftest import FixedScores, run_blocks

H = 32  # tiny_llama hidden size


def test_replayed_pacer_decides_as_the_live_policy():
    """The replay runs the Pacer class itself, fed each step's recorded scores (use_scores) instead of
    running M_B: windows, M_B calls and drafted tokens equal the live policy's on the same scores."""
    from engine.offline import pacer_sweep as sim
    from engine.offline.costmodel import CostModel
    from engine.offline.replay import RecordedStep, recorded_steps, walk

    g = torch.Generator().manual_seed(0)
    for trial in range(40):
        W = int(torch.randint(1, 17, (1,), generator=g))
        b = [1, 2, 4][trial % 3]
        scores = torch.rand(W, generator=g).tolist()
        st = RecordedStep(n=W, W=W, q=[0.5] * W, ent=[1.0] * W, s={"main": scores}, request=0, temperature=0.0)
        t0, rho, cap = 0.3 + 0.1 * (trial % 4), [1.0, 1.1][trial % 2], [8, 16][trial % 2]
        for trim in (0, 1):
            if b > cap:
                continue
            [row] = walk(recorded_steps([st], "main"), sim.pacer(b, t0, rho, cap, trim), CostModel.flat(0.1))
            pol = Pacer(block=b, threshold=t0, rho=rho, max_window=cap, model=FixedScores(scores + [0.0] * 16),
                        trim=trim)
            n, f = run_blocks(pol, min(W, cap))
            dropped = pol.drop_on_stop() if f["stop"] == "pre_verify" else 0
            assert (row["window"], row["mb_calls"], row["drafted"]) == (n - dropped, len(f["blocks"]), n)
    with pytest.raises(ValueError, match="use_scores"):  # no M_B and no scores: refused, never guessed
        run_blocks(sim.pacer(1, 0.5, 1.0, 8), 4)


def test_replay_arithmetic():
    from engine.offline import pacer_sweep as sim
    from engine.offline.costmodel import CostModel
    from engine.offline.replay import RecordedStep

    cost = CostModel.from_ms(1.0, [10.0 + k for k in range(17)])
    st = [RecordedStep(n=2, W=16, q=[0.9] * 16, ent=[0.1] * 16, s={}, request=0, temperature=0.0)]
    r = sim.replay(st, "fixed:4", cost)  # 2 accepted + 1 emitted; cost 4·1 + t_v(5)=14 ms
    assert r["mean_emitted_per_call_incl_bonus"] == 3 and r["speedup"] == pytest.approx(10.0 * 3 / 18) and r["wasted_per_call"] == 2
    o = sim.replay(st, "oracle:a", cost)  # w = 2: cost 2 + t_v(3) = 14
    assert o["speedup"] == pytest.approx(10.0 * 3 / 14) and o["wasted_per_call"] == 0
    # heuristic (start 5, +2/−1): state carries across the steps of a request and resets per request
    two = [RecordedStep(n=16, W=16, q=[0.9] * 16, ent=[0.1] * 16, s={}, request=r, temperature=0.0) for r in (0, 0, 1)]
    assert sim.replay(two, "heuristic", cost)["mean_window"] == pytest.approx((5 + 7 + 5) / 3)


def test_perfect_preverifier_is_pacer_with_an_exact_mb():
    """The ceiling rule = the real PACER rule (b = 1, trim = 1) fed scores 1 for accepted tokens and 0
    for rejected ones, and it pays exactly one draft forward + one M_B call more than the oracle."""
    from engine.offline import pacer_sweep as sim
    from engine.offline.costmodel import CostModel
    from engine.offline.replay import EXACT_SCORES, RecordedStep

    g = torch.Generator().manual_seed(1)
    cost = CostModel.from_ms(1.0, [10.0 + k for k in range(17)], 0.5)
    for trial in range(60):
        W = int(torch.randint(1, 17, (1,), generator=g))
        n = int(torch.randint(0, W + 1, (1,), generator=g))
        cap = [4, 8, 16][trial % 3]
        st = [RecordedStep(n=n, W=W, q=[0.5] * W, ent=[1.0] * W, s={"main": [float(i < n) for i in range(W)]},
                           request=0, temperature=0.0)]
        want = sim.replay(st, sim.pacer(1, 0.5, 1.0, cap, 1), cost)  # fed the exact scores under "main"
        assert sim.replay(st, sim.perfect_preverifier(cap), cost, EXACT_SCORES) == want
        if n < min(cap, W) and n + 1 < cap:  # token n+1 exists and is scored (no M_B call at the cap): dropped
            o = sim.replay(st, "oracle:a", cost)
            p = sim.replay(st, sim.perfect_preverifier(cap), cost, EXACT_SCORES)
            assert p["mean_window"] == o["mean_window"] == n and p["wasted_per_call"] == 1
    st = [RecordedStep(n=2, W=16, q=[0.9] * 16, ent=[0.1] * 16, s={"main": [1.0] * 16}, request=0, temperature=0.0)]
    r = sim.replay(st, sim.perfect_preverifier(), cost, EXACT_SCORES)  # drafts 3, verifies 2: 3·1 + t_v(3)=12 + 3·0.5
    assert r["speedup"] == pytest.approx(10.0 * 3 / 16.5) and r["wasted_per_call"] == 1
    rows = sim.ceiling(st, CostModel.from_ms(1.0, [10.0 + k for k in range(17)]), factors=(1.0, 0.0))
    assert rows[0]["perfect_over_oracle"] < 1.0 and rows[1]["perfect_over_oracle"] == pytest.approx(1.0)
