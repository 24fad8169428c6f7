"""The step probe times every condition on real (tiny) models and leaves both caches empty."""

import pytest

from engine.bench.step_probe import KS, probe


def test_probe_reports_every_condition(pair):
    target, draft = pair
    res = probe(target, draft, [3, 17, 5, 9, 11, 2], [4, 8, 15, 16, 23], repeats=2)
    names = {r["condition"] for r in res["rows"]}
    conds = ("alone/repeat", "alone/distinct", "after-draft", "hf-call", "plain-linear")
    assert names == {f"{c} k={k}" for c in conds for k in KS} | {"draft alone", "draft-after-target"}
    assert all(r["median_ms"] > 0 and r["n"] >= 2 for r in res["rows"])
    assert {r["ratio"] for r in res["rows"] if r["condition"].startswith("alone/repeat")} == {1.0}
    assert target.length == 0 and draft.length == 0
    # the HF-style call books the same cache as extend: after it, extend continues at the right position
    from engine.bench.step_probe import _hf_style

    target.extend([3, 17, 5])
    _hf_style(target, [9, 11])
    a = target.extend([2])[-1]
    target.reset()
    b = target.extend([3, 17, 5, 9, 11, 2])[-1]
    assert (a - b).abs().max() < 1e-4


def test_plain_linear_switch_restores_the_skinny_path():
    from engine.bench.step_probe import _linears
    from engine.core.lm import HFModel
    from engine.kernels.accelerate import use_skinny_linears
    from engine.models.tiny import tiny_llama

    # its own model: patching the session's shared tiny target would reroute every later test through accelerate
    target = HFModel(tiny_llama(0), "t")
    n = use_skinny_linears(target.model)
    _linears(target, False)
    assert not any("forward" in m.__dict__ for m in target.model.modules())
    _linears(target, True)
    assert sum("forward" in m.__dict__ for m in target.model.modules()) >= n


def test_probe_needs_enough_distinct_tokens(pair):
    with pytest.raises(ValueError, match="at least"):
        probe(*pair, [3, 17, 5], [4, 8], repeats=1)
