"""The modelled speedup of bench rows (engine.bench.modelled): counts priced at the run's median costs."""

import pytest

from engine.bench.bench import aggregate
from engine.bench.modelled import modelled_speedup, run_model_ms, target_ms
from engine.bench.runner import RunResult
from engine.metrics import MODELLED_SPEEDUP

COSTS = {"t_draft_ms": 10.0, "t_target_ms": {1: 100.0, 2: 110.0, 4: 130.0}}


def test_target_curve_interpolates_and_extrapolates():
    assert target_ms(COSTS, 1) == 100.0 and target_ms(COSTS, 3) == pytest.approx(120.0)
    assert target_ms(COSTS, 8) == pytest.approx(170.0)  # slope 10/token past the last point
    assert target_ms({"t_target_ms": {"1": 100.0, "2": 110.0}}, 2) == 110.0  # str keys after JSON


def test_worked_example_and_row_field():
    ar = RunResult("ar", 0.0, "qa", 1, 10, 2.0, 10, windows={0: 10})
    spec = RunResult("fixed:1", 0.0, "qa", 1, 10, 1.0, 5, drafted=5, accepted=5, draft_calls=5, windows={1: 5})
    assert run_model_ms(ar, COSTS) == 1000.0 and run_model_ms(spec, COSTS) == 600.0  # 5·110 + 5·10
    assert modelled_speedup([spec], [ar], COSTS) == pytest.approx(1000 / 600)
    rows = {(r["task"], r["config"]): r for r in aggregate([ar, spec], COSTS)}
    assert rows[("qa", "fixed:1")][MODELLED_SPEEDUP] == pytest.approx(1000 / 600)
    assert rows[("overall", "ar")][MODELLED_SPEEDUP] == pytest.approx(1.0)
    assert aggregate([ar, spec])[0][MODELLED_SPEEDUP] is None  # no costs: no modelled figure


def test_model_free_drafts_cost_nothing_and_unknown_windows_give_none():
    ar = RunResult("ar", 0.0, "qa", 1, 10, 2.0, 10, windows={0: 10})
    copy = RunResult("fixed:4@lookup", 0.0, "qa", 1, 10, 1.0, 5, drafted=20, draft_calls=20, windows={4: 5})
    assert run_model_ms(copy, COSTS) == 5 * target_ms(COSTS, 5)
    lookup = RunResult("hf:lookup:10", 0.0, "qa", 1, 10, 1.0, 4)
    assert modelled_speedup([lookup], [ar], COSTS) is None


def test_a_noisy_probe_is_fitted_non_decreasing_before_pricing():
    """t(1) probed above t(2) (a loaded machine) must not make an AR step dearer than a 2-token verify."""
    costs = {"t_target_ms": {"1": 100.0, "2": 69.0, "4": 120.0}, "t_draft_ms": 10.0}
    assert target_ms(costs, 1) == target_ms(costs, 2) == 84.5  # the two pooled to their mean
    assert target_ms(costs, 4) == 120.0


def test_the_drafts_prefill_is_priced_so_a_window_that_declines_it_compares_fairly():
    """A fixed window pays the draft's prompt prefill (P tokens × t_prefill); a cost-aware run that stayed
    autoregressive pays none: with the prefill priced the fixed window's 'win' becomes the loss it was."""
    costs = {**COSTS, "t_draft_prefill_ms": 2.0}
    ar = RunResult("ar", 0.0, "rag", 1, 10, 2.0, 10, windows={0: 10})
    fixed = RunResult("fixed:1", 0.0, "rag", 1, 10, 1.0, 5, drafted=5, accepted=5, draft_calls=5, windows={1: 5},
                      draft_prefill_tokens=700)
    declined = RunResult("costaware", 0.0, "rag", 1, 10, 2.0, 10, windows={0: 10})
    assert run_model_ms(fixed, costs) == 600.0 + 700 * 2.0
    assert run_model_ms(fixed, COSTS) == 600.0  # a result without a prefill probe: P priced at 0, as before
    assert modelled_speedup([fixed], [ar], costs) == pytest.approx(1000 / 2000)
    assert modelled_speedup([declined], [ar], costs) == pytest.approx(1.0)
    copy = RunResult("fixed:4@lookup", 0.0, "qa", 1, 10, 1.0, 5, drafted=20, draft_calls=20, windows={4: 5},
                      draft_prefill_tokens=50)
    assert run_model_ms(copy, costs) == 5 * target_ms(costs, 5)  # no draft model, nothing to prefill


def test_a_block_drafter_is_priced_per_drafting_step():
    """One block forward proposes a whole block: S drafting steps × t_step, never per drafted token (t_draft is
    nan for a block drafter); AR steps and a model-free config after '@' pay none; older results without
    t_step price it at 0."""
    costs = {"t_draft_ms": float("nan"), "t_target_ms": {1: 100.0, 2: 110.0, 4: 130.0}, "t_draft_step_ms": 8.0}
    block = RunResult("fixed:3", 0.0, "qa", 1, 10, 1.0, 4, drafted=9, draft_calls=9, windows={3: 3, 0: 1})
    assert run_model_ms(block, costs) == 3 * target_ms(costs, 4) + 100.0 + 3 * 8.0
    copy = RunResult("fixed:3@lookup", 0.0, "qa", 1, 10, 1.0, 4, drafted=9, draft_calls=9, windows={3: 3, 0: 1})
    assert run_model_ms(copy, costs) == 3 * target_ms(costs, 4) + 100.0
    old = {k: v for k, v in costs.items() if k != "t_draft_step_ms"}
    assert run_model_ms(block, old) == 3 * target_ms(costs, 4) + 100.0


def test_a_context_window_config_is_the_runs_draft_model_priced_with_its_probe():
    """`fixed:1@ctx:192` drafts with the run's own draft model: its drafts and its (shorter) prefill are priced at
    the run's probe, not as a model-free drafter's (which pays neither)."""
    costs = {**COSTS, "t_draft_prefill_ms": 2.0}
    ctx = RunResult("fixed:1@ctx:192", 0.0, "rag", 1, 10, 1.0, 5, drafted=5, accepted=5, draft_calls=5,
                    windows={1: 5}, draft_prefill_tokens=256)
    assert run_model_ms(ctx, costs) == 5 * 110.0 + 5 * 10.0 + 256 * 2.0
