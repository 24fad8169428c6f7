"""Paired (shadow) verification and the paired multi-draft grid (engine.verify.shadow, engine.bench.paired)."""

from __future__ import annotations

import pytest
import torch

from engine.core.lm import TableLM
from engine.core.sampling import SamplingConfig
from engine.decode import DecodeConfig, decode
from engine.drafters.multi import MultiDraftConfig, MultiDrafter
from engine.policies.base import parse_policy


@pytest.mark.slow
def test_paired_estimate_matches_the_closed_form_and_the_real_run():
    """Context-free p and q (V = 4): SD's expected emitted per step is (1 − α^{γ+1}) / (1 − α) with
    α = Σ min(p, q) at every context, so the shadow's pooled BE must land on it; the driver's own rule as a
    shadow (fresh uniforms) must land on the driver's real BE."""
    pt = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    qt = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    target, draft = TableLM(4, probs_fn=lambda c: pt), TableLM(4, probs_fn=lambda c: qt)
    gamma = 3
    cfg = DecodeConfig(max_new_tokens=4000, verifier="rbv", shadow=("token:1", "rbv:3"),
                       sampling=SamplingConfig(temperature=1.0, seed=11))
    steps = list(decode(target, MultiDrafter(draft, MultiDraftConfig(k=3)), [0], parse_policy(f"fixed:{gamma}"), cfg))
    n = len(steps)
    alpha = float(torch.minimum(pt, qt).sum())
    closed = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    sd = sum(s.shadow["token:1"]["emitted"] for s in steps) / n
    assert abs(sd - closed) < 4 * 0.8 / n ** 0.5, (sd, closed)  # per-step sd of SD's emitted < 0.8 here
    real = sum(s.emitted for s in steps) / n
    shadow_rbv = sum(s.shadow["rbv:3"]["emitted"] for s in steps) / n
    assert abs(real - shadow_rbv) < 4 * 1.2 / n ** 0.5, (real, shadow_rbv)
    assert real > closed + 0.05  # three drafts with block verification beat one (the point of the grid)


def test_paired_rows_and_report_on_the_tiny_pair(pair):
    """The bench's run → rows → tables path, and the model's arithmetic on its own inputs."""
    from engine.bench.multibench import measure_modes
    from engine.bench.paired import PairedConfig, _run, paired_rows, real_rows
    from engine.bench.paired_report import format_paired

    target, draft = pair
    cfg = PairedConfig(ks=(1, 2), ls=(3,), temps=(0.7,), max_new_tokens=12)
    assert cfg.shadows() == ("token:1", "block:1", "rrs:2", "kseq:2", "spectr-gbv-published:1",
                             "spectr-gbv-published:2", "rbv:2", "kbv:2")
    ids = [1, 5, 9, 3]
    runs = [_run(target, draft, ids, 0.7, cfg, (), "ar"),
            _run(target, draft, ids, 0.7, cfg, (), "rbv:2:3", cfg.shadows()),
            _run(target, draft, ids, 0.7, cfg, (), "token:1:3")]
    result = {"config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.__dict__.items()},
              "shadows": list(cfg.shadows()), "runs": runs,
              "costs": measure_modes(target, draft, ids, ks=(2,), ls=(3,), reps=1)}
    rows = paired_rows(result)
    assert len(rows) == len(cfg.shadows())
    drv = runs[1]
    for r in rows:
        name = f"{r['method']}:{r['k']}"
        assert r["be"] == pytest.approx(drv["shadow"][name]["emitted"] / drv["target_calls"])
        denom = r["draft_ms"] + r["verify_ms"] + r["rule_ms_per_call"] + max(0.0, r["loop_ms_per_call"])
        assert r["sr_model"] == pytest.approx(r["be"] * r["ar_ms_per_token"] / denom)
    # At the anchors the model's costs are the real runs' own per-call times (minus their rule time).
    by = {(r["method"], r["k"]): r for r in rows}
    chk = runs[2]
    rule_tok = drv["shadow"]["token:1"]["rule_ms"] / drv["target_calls"]
    assert by[("token", 1)]["draft_ms"] == pytest.approx(chk["t_draft_ms"] / chk["target_calls"])
    assert by[("token", 1)]["verify_ms"] == pytest.approx(chk["t_verify_ms"] / chk["target_calls"] - rule_tok)
    assert by[("rbv", 2)]["draft_ms"] == pytest.approx(drv["t_draft_ms"] / drv["target_calls"])
    real = {r["config"]: r for r in real_rows(result)}
    assert real["token:1:3"]["be"] == pytest.approx(runs[2]["new_tokens"] / runs[2]["target_calls"])
    text = format_paired(result)
    assert "Paired vs real" in text and "RBV (ours, lossless)" in text and "Paper-shaped summary" in text


def test_anchored_costs_meet_the_real_runs_and_keep_the_probe_shape():
    """k = 1 and K_max take the real per-call times; k in between the probe × a linearly interpolated scale."""
    from engine.bench.paired import anchored_costs

    costs = [{"k": 1, "L": 4, "draft_sequential_ms": 100.0, "target_tree_ms": 200.0},
             {"k": 2, "L": 4, "draft_batch_ms": 110.0, "target_tree_ms": 210.0},
             {"k": 3, "L": 4, "draft_batch_ms": 120.0, "target_tree_ms": 220.0},
             {"k": 4, "L": 4, "draft_batch_ms": 130.0, "target_tree_ms": 230.0}]
    got = anchored_costs(costs, 4, 4, (150.0, 200.0), (130.0, 460.0))
    assert got[1] == pytest.approx((150.0, 200.0)) and got[4] == pytest.approx((130.0, 460.0))
    # draft scale 1.5 → 1.0, verify 1.0 → 2.0; k = 2 is a third of the way
    assert got[2] == pytest.approx((110.0 * (1.5 - 0.5 / 3), 210.0 * (1.0 + 1.0 / 3)))
    # one anchor only: its scale for every k; none: the raw probe
    assert anchored_costs(costs, 4, 4, None, (260.0, 230.0))[2] == pytest.approx((220.0, 210.0))
    assert anchored_costs(costs, 4, 4, None, None)[3] == pytest.approx((120.0, 220.0))
    assert anchored_costs(costs, 4, 6, (1.0, 1.0), (1.0, 1.0)) == {}
    # a probe cell below its neighbour is noise: pooled with it before anchoring
    noisy = [dict(c) for c in costs]
    noisy[3]["draft_batch_ms"] = 90.0  # k = 4 cheaper than k = 3: impossible for a batch
    pooled = (110.0 + 120.0 + 90.0) / 3  # 120 > 90 pooled to 105, still below 110, so pooled again
    got = anchored_costs(noisy, 4, 4, None, None)
    assert [got[k][0] for k in (1, 2, 3, 4)] == pytest.approx([100.0, pooled, pooled, pooled])
    assert got[4][1] == pytest.approx(230.0)


def test_monotone_is_pool_adjacent_violators():
    from engine.bench.paired import monotone

    assert monotone([1386, 1679, 2127, 901]) == pytest.approx([1386, 1569, 1569, 1569])
    assert monotone([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
    assert monotone([3.0, 2.0, 1.0]) == pytest.approx([2.0, 2.0, 2.0])
    assert monotone([]) == []


@pytest.mark.parametrize("kw, msg", [({"driver": "spectr-gbv-published"}, "lossless multi-draft"),
                                     ({"check": ("rbv",)}, "single-draft"), ({"ks": (1,)}, "K ≥ 2"),
                                     ({"temps": (0.0,)}, "T > 0"), ({"methods": ("nope",)}, "unknown method")])
def test_paired_config_refuses_bad_settings(kw, msg):
    from engine.bench.paired import PairedConfig

    with pytest.raises(ValueError, match=msg):
        PairedConfig(**kw)


def test_paired_diff_is_per_prompt():
    """Prompt-to-prompt spread cancels: b = a − 0.1 on every prompt gives a difference of exactly +0.1 ± 0."""
    from engine.bench.paired import paired_diff

    per_a = [2.0, 3.0, 5.0, 4.0]
    rows = [{"temperature": 0.7, "L": 4, "method": "rbv", "k": 4, "be": 3.5, "be_per_prompt": per_a},
            {"temperature": 0.7, "L": 4, "method": "token", "k": 1, "be": 3.4, "be_per_prompt": [x - 0.1 for x in per_a]}]
    d = paired_diff(rows, 0.7, 4, ("rbv", 4), ("token", 1))
    assert d["diff_mean"] == pytest.approx(0.1) and d["diff_se"] == pytest.approx(0.0, abs=1e-12)
    assert d["ratio"] == pytest.approx(3.5 / 3.4) and d["wins"] == 4 and d["n"] == 4
    assert paired_diff(rows, 0.4, 4, ("rbv", 4), ("token", 1)) is None
