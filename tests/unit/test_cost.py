"""engine.cost: the one cost vocabulary — the normalised view, the milliseconds view, a probe's curve, and
the in-run costs (policies.pair_costs.StepCosts) converting to and from it."""

import math

import pytest

from engine.cost import StepCost, forward_ms, isotonic
from engine.offline.costmodel import CostModel
from engine.policies.pair_costs import StepCosts

PROBE = {"t_target_ms": {"1": 70.0, "2": 100.0, "4": 150.0}, "t_draft_ms": 30.0, "t_draft_prefill_ms": 3.5,
         "t_draft_step_ms": math.nan}


def test_the_worked_example_in_both_views():
    cost = StepCost(c=30 / 70, verify=(1.0, 100 / 70), target_ms=70.0)
    assert cost.step(1) == pytest.approx(13 / 7) and cost.ms(1) == pytest.approx(130.0)
    assert cost.ms(0) == pytest.approx(70.0) and cost.draft_ms == pytest.approx(30.0)
    assert cost.v(3) == pytest.approx(1 + 3 * 30 / 70)  # past the measured range: the last slope
    assert StepCost(c=0.1).ms(2) is None and StepCost(c=0.1).step(2) == pytest.approx(1.2)  # flat, no t(1)


def test_a_probe_gives_the_normalised_view_of_its_curve():
    cost = StepCost.from_probe(PROBE, max_window=4)
    assert cost.target_ms == 70.0 and cost.c == pytest.approx(30 / 70) and cost.prefill == pytest.approx(0.05)
    assert cost.block == 0.0  # nan: no block drafter
    assert [cost.verify_ms(k) for k in range(4)] == pytest.approx([70.0, 100.0, 125.0, 150.0])
    assert forward_ms(PROBE, 8) == pytest.approx(250.0)  # extrapolated with the last slope
    assert StepCost.from_probe(PROBE, model_free=True).c == 0.0
    with pytest.raises(ValueError, match="positive t\\(1\\)"):
        StepCost.from_probe({"t_target_ms": {"1": 0.0}})


def test_noisy_probes_are_made_non_decreasing():
    assert isotonic([3.0, 1.0, 2.0]) == [2.0, 2.0, 2.0]
    assert forward_ms({"t_target_ms": {"1": 80.0, "2": 70.0}}, 1) == pytest.approx(75.0)


def test_the_analysis_cost_model_is_the_vocabulary():
    cm = CostModel.from_ms(30.0, [70.0, 100.0])
    assert isinstance(cm, StepCost) and cm.ms(1) == pytest.approx(130.0)


def test_in_run_costs_convert_to_and_from_the_normalised_view():
    run = StepCosts(0.3, 0.05)
    run.prime(30.0, {"1": 70.0, "2": 100.0})
    view = run.view(1)
    assert view.target_ms == 70.0 and view.ms(1) == pytest.approx(130.0) and view.c == pytest.approx(30 / 70)
    back = StepCosts.from_view(view, 1)
    assert back.table(1)[1] == pytest.approx(run.table(1)[1])  # T(0), T(1) in ms, as measured
    assert not StepCosts(0.3, 0.05).view(2).target_ms  # nothing measured: units of t(1) only
