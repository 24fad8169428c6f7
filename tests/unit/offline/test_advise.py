"""engine.offline.advise on the bundled traces and on hand-made steps, and engine.offline.oracles."""

import glob
import json

import pandas as pd
import pytest

from engine.offline.advise import Advice, advise, conditional_acceptance, from_window_table, speedups
from engine.offline.analysis import load_any
from engine.offline.costmodel import CostModel
from engine.offline.oracles import ACCEPTED_BOUND, COST_OPTIMAL, accepted_length_bound

QWEN = sorted(glob.glob("traces/qwen-*-t0.jsonl"))


def test_bundled_qwen_traces_get_one_line_of_measured_advice():
    adv = advise([load_any(p)[1] for p in QWEN if "lookup" not in p and "suffix" not in p and "modelfree" not in p])
    line = adv.line()
    assert line.startswith("use K = ") and "\n" not in line and adv.units == "measured" and not adv.note
    assert adv.source == "traces" and adv.oracle == ACCEPTED_BOUND and adv.left_on_table is not None
    assert set(adv.per_task) == {"math_reasoning", "mt_bench", "qa", "rag", "summarization", "translation"}
    # the bundled fp32 run measured every fixed window below AR (docs/results/bench-qwen-greedy.json)
    assert adv.k == 0


def test_a_reference_run_is_advised_against_the_cost_optimal_schedule():
    adv = advise([load_any("traces/ref-qwen-greedy.jsonl")[1]])
    assert adv.source == "reference" and adv.oracle == COST_OPTIMAL and adv.oracle_speedup >= adv.speedup
    assert f"the {COST_OPTIMAL} leaves" in adv.line()
    # and what a window reading the draft's confidence could reach, calibrated perfectly (the confidence ceiling)
    assert adv.rule is not None and adv.speedup <= adv.rule_speedup <= adv.oracle_speedup
    assert "a window reading the draft's confidence reaches at most" in adv.line()
    assert adv.runnable[0].startswith("confidence:") and adv.runnable[1] <= adv.rule_speedup + 1e-12


def test_trace_without_timings_gets_hardware_free_units_and_a_note(tmp_path):
    out = tmp_path / "untimed.jsonl"
    lines = []
    for raw in open("traces/demo-tiny-fixed2.jsonl", encoding="utf-8"):
        d = json.loads(raw)
        if d.get("type") == "footer":
            continue  # a footer's summary would disagree with the zeroed timings
        if d.get("type") == "step":
            d.update(t_draft_ms=0.0, t_verify_ms=0.0, t_prefill_ms=0.0)
        lines.append(json.dumps(d))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    adv = advise([load_any(out)[1]])
    assert adv.units == "hardware-free" and "no timings" in adv.note and "\n" not in adv.note
    assert adv.line().endswith("[hardware-free]")
    assert advise([load_any(out)[1]], c=0.01).k >= 1  # a cheap draft makes drafting worth it


def test_bad_input_is_one_line():
    t = load_any("traces/demo-tiny-fixed2.jsonl")[1]
    for kw, msg in (({"c": 0.0}, "positive"), ({"c": -1.0}, "positive"), ({"max_k": 0}, "max K")):
        with pytest.raises(ValueError, match=msg):
            advise([t], **kw)
    with pytest.raises(ValueError, match="speculative trace"):
        advise([load_any("traces/demo-tiny-autoregressive.jsonl")[1]])


def test_censored_steps_count_only_for_positions_their_window_reached():
    steps = pd.DataFrame({"window": [2, 2, 4], "accepted": [2, 0, 3], "task": "qa"})
    a = conditional_acceptance(steps, 4)
    assert a[0] == pytest.approx((2 + 1) / (3 + 2))  # 2 of 3 steps accepted draft 1
    assert a[2] == pytest.approx((1 + 1) / (1 + 2))  # only the window-4 step reached draft 3
    assert a[3] == pytest.approx((0 + 1) / (1 + 2))
    s = speedups([1.0, 1.0], CostModel.flat(0.5))
    assert s == pytest.approx([1.0, 2 / 1.5, 3 / 2.0])


def test_k0_on_tasks_where_no_window_beats_ar():
    wt = pd.DataFrame({"task": ["all", "all", "all", "qa", "qa", "mt", "mt"],
                       "policy": ["fixed:1", "fixed:2", "oracle:c", "fixed:1", "fixed:2", "fixed:1", "fixed:2"],
                       "kind": ["fixed", "fixed", "oracle", "fixed", "fixed", "fixed", "fixed"],
                       "gamma": [1, 2, None, 1, 2, 1, 2], "speedup": [1.2, 1.31, 1.43, 0.9, 0.95, 1.1, 1.4]})
    adv = from_window_table(wt, "t ← d")
    assert (adv.k, adv.per_task["qa"], adv.per_task["mt"][0]) == (2, (0, 1.0), 2)
    assert adv.line() == "use K = 2 (1.31× AR); K = 0 on qa; the cost-optimal hindsight schedule leaves 9 % on the table"

    cc = pd.DataFrame({"task": ["all"], "ceiling_rule": ["bayes:1.5"], "s_ceiling": [1.38],
                       "runnable_rule": ["confidence:0.8,max=8"], "s_runnable": [1.35]})
    assert from_window_table(wt, "t ← d", ceiling=cc).line() == (
        "use K = 2 (1.31× AR); K = 0 on qa; a window reading the draft's confidence reaches at most 1.38× (the "
        "confidence ceiling: bayes:1.5; confidence:0.8,max=8 reaches 1.35×); the cost-optimal hindsight schedule "
        "leaves 9 % on the table")
    same = cc.assign(ceiling_rule="confidence:0.8", s_runnable=1.38)
    assert "(the confidence ceiling: confidence:0.8,max=8)" in from_window_table(wt, "t ← d", ceiling=same).line()
    below = cc.assign(s_ceiling=1.2)  # no better than the advised K: not said
    assert "confidence" not in from_window_table(wt, "t ← d", ceiling=below).line()


def test_accepted_length_bound_worked_example():
    steps = pd.DataFrame({"accepted": [2, 0], "emitted": [3, 1]})
    assert accepted_length_bound(steps, CostModel.flat(0.5)) == pytest.approx(4 / 3)
    assert accepted_length_bound(steps.iloc[:0], CostModel.flat(0.5)) is None
    assert Advice("p", 0, 1.0).line() == "use K = 0 (plain autoregressive: no window beats AR)"


def test_check_against_a_bench_result_reads_the_advised_window_row():
    from engine.offline.advise import check_against

    def row(config, s, t=0.0, task="overall"):
        return {"task": task, "config": config, "temperature": t, "speedup_vs_ar": s, "modelled_speedup_vs_ar": s + 0.1}

    result = {"rows": [row("ar", 1.0), row("fixed:2", 1.25), row("fixed:2", 9.9, task="qa"), row("fixed:2", 1.1, 0.7)]}
    chk = check_against(Advice("t ← d", 2, 1.31), result)
    assert chk["config"] == "fixed:2" and chk["measured"] == 1.25 and chk["error"] == pytest.approx(1.31 / 1.25 - 1)
    assert check_against(Advice("t ← d", 2, 1.31), result, 0.7)["measured"] == 1.1
    assert check_against(Advice("t ← d", 0, 1.0), result)["error"] == 0.0
    with pytest.raises(ValueError, match="no overall fixed:3 row at T = 0 .*it has ar, fixed:2"):
        check_against(Advice("t ← d", 3, 1.4), result)


def test_ar_is_one_times_itself_when_the_fit_pulls_v0_below_one():
    """An isotonic fit pools a noisy AR median with cheaper window-1 verifies (v(0) = 0.93): AR's own speedup
    stays 1.00×, and a window is advised only when it beats that (an inflated S(0) advised K = 0 wrongly)."""
    cost = CostModel(c=0.1, verify=(0.93, 0.93, 0.97), target_ms=300.0)
    s = speedups([0.6, 0.5], cost)
    assert s[0] == 1.0 and s[1] == pytest.approx(1.6 / 1.03 * 0.93)
