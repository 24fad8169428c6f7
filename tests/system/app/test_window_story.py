"""The Windows page's headline sentences (app.window_story) on small hand-made frames, the gap chart
(app.window_plots.gap_closed_bars) and the small data helpers behind them (app.frames, app.result_files)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from app import plots, result_files, window_plots
from app import window_story as story

QWEN = {"target": {"name": "qwen2.5-coder-1.5b"}, "draft": {"name": "qwen2.5-coder-0.5b"}}
SMOL = {"target": {"name": "smollm2-135m"}, "draft": {"name": "smollm2-draft"}}
DEMO = {"target": {"name": "tiny-target"}, "draft": {"name": "tiny-draft"}, "demo": True}


def ratio_table() -> pd.DataFrame:
    """oracle_ratio_table rows of one cost model: 'all' plus two tasks, two adaptive policies."""
    return pd.DataFrame({"task": ["all", "qa", "rag"], "cost": ["measured c=0.26"] * 3,
                         "ratio_a": [1.5, 1.3, 1.62], "ratio_b": [1.27, 1.1, 1.4],
                         "pos:heuristic:start=5,max=8": [-0.08, 0.1, -0.2],
                         "pos:entropy:threshold=1.5,max=8": [0.25, 0.3, 0.2]})


# ---------------------------------------------------------------- selection


def test_num_and_pair_label():
    assert story.num(-0.076) == "−0.08" and story.num(1.5) == "1.50" and story.num(0.1234, 3) == "0.123"
    assert story.pair_label(("t", "d")) == "t ← d"


def test_pair_of_and_group_by_pair():
    assert story.pair_of(QWEN) == ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    assert story.pair_of({"target": {"name": "t"}}) == ("t", "?")
    headers = {"s1": SMOL, "q1": QWEN, "s2": SMOL}
    assert story.group_by_pair(headers) == {("smollm2-135m", "smollm2-draft"): ["s1", "s2"],
                                            ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"): ["q1"]}


def test_default_references_prefers_the_qwen_pair_then_real_then_demo():
    assert story.default_references({"demo": DEMO, "s1": SMOL, "q1": QWEN, "s2": SMOL, "q2": QWEN}) == ["q1", "q2"]
    assert story.default_references({"demo": DEMO, "s1": SMOL, "s2": SMOL}) == ["s1", "s2"]
    assert story.default_references({"d1": DEMO, "d2": DEMO}) == ["d1", "d2"]
    assert story.default_references({}) == []
    # a demo reference that happens to be named qwen is still a demo one
    assert story.default_references({"dq": {**QWEN, "demo": True}, "s1": SMOL}) == ["s1"]


def test_blend_warning_only_for_two_pairs():
    headers = {"s1": SMOL, "s2": SMOL, "q1": QWEN}
    assert story.blend_warning(headers, ["s1", "s2"]) is None
    assert story.blend_warning(headers, ["s1", "q1"]) == (
        "These references blend 2 pairs (smollm2-135m ← smollm2-draft; qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b): "
        "every number below mixes them. Pick one pair's references.")


# ---------------------------------------------------------------- a. oracle gain


def test_verdict_against_the_papers_figure():
    assert story.verdict(1.2) == "falls short of"
    assert story.verdict(1.36) == story.verdict(1.4) == story.verdict(1.44) == "reaches"
    assert story.verdict(1.5) == "exceeds"


def test_oracle_gain_sentence():
    assert story.oracle_gain(ratio_table()) == (
        "Oracle (a) ÷ best fixed window: **1.50×** overall, 1.30× (qa) to 1.62× (rag) per task — paper: up to "
        "1.4×. Overall this exceeds the paper's figure.")
    low = ratio_table().assign(ratio_a=[1.1, 1.05, 1.2])
    assert story.oracle_gain(low).endswith("Overall this falls short of the paper's figure.")
    one = ratio_table().iloc[:2].assign(ratio_a=[1.38, 1.41])
    assert story.oracle_gain(one) == ("Oracle (a) ÷ best fixed window: **1.38×** overall, 1.41× on qa — paper: up "
                                      "to 1.4×. Overall this reaches the paper's figure.")
    assert story.oracle_gain(ratio_table(), oracle="b").startswith("Oracle (b) ÷ best fixed window: **1.27×**")


def test_oracle_gain_never_says_exceeds_beside_an_overall_figure_below_the_papers():
    """The issue's contradiction: overall 1.22× < 1.4× with "this exceeds the paper's figure" (it meant the
    best task). Each figure gets its own verdict, and a task below 1 is explained beside the advice's K."""
    ot = ratio_table().assign(ratio_a=[1.22, 0.74, 1.6], best_gamma=[3, 8, 2])
    ot["task"] = ["all", "math_reasoning", "rag"]
    text = story.oracle_gain(ot)
    assert "Overall this falls short of the paper's figure; the best task (rag) exceeds it." in text
    assert "this exceeds the paper's figure" not in text
    assert "Below 1 on math_reasoning (0.74×, best fixed γ = 8)" in text and "oracle (c)" in text
    assert "Below 1" not in story.oracle_gain(ratio_table())


def test_oracle_help_names_both_oracles():
    h = story.oracle_help(ratio_table())
    assert h.startswith(story.ORACLE_HELP) and h.endswith("Oracle (b) ÷ best fixed here: 1.27× overall.")
    assert "engine/policies/oracle.py" in h and "A(j) + 1" in h


# ---------------------------------------------------------------- b. gap closed


def test_short_policy():
    assert story.short_policy("heuristic:start=5,max=8") == "heuristic" and story.short_policy("entropy") == "entropy"


def test_gap_closed_reads_the_position_columns():
    g = story.gap_closed(ratio_table())
    assert list(g["label"]) == ["heuristic", "entropy"]
    assert list(g["policy"]) == ["heuristic:start=5,max=8", "entropy:threshold=1.5,max=8"]
    assert list(g["position"]) == [-0.08, 0.25]
    assert list(story.gap_closed(ratio_table(), "qa")["position"]) == [0.1, 0.3]
    # two specs of one policy keep their full specs as labels
    two = pd.DataFrame({"task": ["all"], "pos:heuristic:start=4": [0.1], "pos:heuristic:start=6": [0.2]})
    assert list(story.gap_closed(two)["label"]) == ["heuristic:start=4", "heuristic:start=6"]
    assert story.gap_closed(ratio_table()[["task", "ratio_a"]]).empty


def test_gap_sentence():
    g = story.gap_closed(ratio_table())
    assert story.gap_sentence(g) == ("entropy closes the most of the gap: 0.25 of the way from the best fixed "
                                     "window (0) to the oracle (1); 1 of 2 do worse than the best fixed window.")
    assert story.gap_sentence(g.assign(position=[0.1, 0.4])) == (
        "entropy closes the most of the gap: 0.40 of the way from the best fixed window (0) to the oracle (1).")
    assert story.gap_sentence(g.assign(position=[-0.3, -0.02])) == (
        "No adaptive policy beats the best fixed window: the closest, entropy, sits at −0.02 (0 = best fixed, "
        "1 = oracle).")
    assert story.gap_sentence(g.assign(position=[-0.3, 0.004])).startswith("No adaptive policy beats")
    assert story.gap_sentence(g.assign(position=[math.nan, math.nan])).startswith("The oracle gains nothing")
    assert story.gap_sentence(story.gap_closed(ratio_table()[["task"]])).startswith("No adaptive policy was replayed")


def test_ceiling_sentence_says_the_rule_the_share_and_when_only_ar_is_left():
    cc = pd.DataFrame({"task": ["all", "qa"], "best_fixed": ["fixed:2", "fixed:1"], "s_best_fixed": [1.29, 1.09],
                       "ceiling_rule": ["bayes:1.5"] * 2, "s_ceiling": [1.391, 1.03], "rel_best_fixed": [1.078, 0.94],
                       "s_oracle_c": [1.773, 1.55], "headroom_share": [0.209, -0.13]})
    said = story.ceiling_sentence(cc)
    assert said.startswith("Calibrated perfectly in hindsight, the best rule that reads only the draft's confidence "
                           "(bayes:1.5) reaches 1.39× AR: 1.08× the best fixed window, 0.21 of the way to the "
                           "cost-optimal schedule (the best fixed window (fixed:2) reaches 1.29× and the cost-optimal "
                           "schedule 1.77×).")
    assert "needs a better signal, not a better rule" in said
    ar = story.ceiling_sentence(cc.assign(ceiling_rule="autoregressive", s_ceiling=1.0))
    assert ar.startswith("No rule that reads only the draft's confidence beats plain autoregressive decoding")
    assert story.ceiling_sentence(cc[cc["task"] == "qa"]).startswith("No confidence ceiling")


def test_gap_closed_bars_is_pure_and_shares_the_palette():
    g = story.gap_closed(ratio_table())
    f = window_plots.gap_closed_bars(g)
    bar, fig = f.data[0], f.to_dict()
    assert list(bar.x) == ["heuristic", "entropy"] and list(bar.y) == [-0.08, 0.25]
    # the colours adaptive markers get in speedup_vs_window, after its one fixed-γ line
    assert list(bar.marker.color) == plots.palette(3)[1:]
    lines = {s["y0"]: s["line"]["color"] for s in fig["layout"]["shapes"]}
    assert set(lines) == {0.0, 1.0} and lines[1.0] == plots.COLORS["bonus"]
    assert fig["layout"]["title"]["text"] == "Gap closed by each adaptive policy"
    assert fig["layout"]["yaxis"]["range"][0] < -0.08 and fig["layout"]["yaxis"]["range"][1] > 1.0


# ---------------------------------------------------------------- c. PACER


def ceiling() -> pd.DataFrame:
    rows = [("all", 1.0, "oracle", 1.2), ("all", 1.0, "best PACER", 0.9), ("all", 1.0, "best fixed", 0.8),
            ("all", 1.0, "perfect pre-verifier", 1.0), ("all", 0.5, "oracle", 2.0), ("greedy", 1.0, "oracle", 3.0)]
    return pd.DataFrame(rows, columns=["split", "f", "rule", "speedup"])


def test_pacer_position():
    p = story.pacer_position(ceiling())
    assert p == pytest.approx({"speedup": 0.9, "of_oracle": 0.75, "position": 0.25})
    assert story.pacer_position(pd.DataFrame()) is None and story.pacer_position(None) is None
    assert story.pacer_position(ceiling(), split="greedy") is None


def test_pacer_sentence():
    models = {"pacer-smollm2": ("smollm2-135m", "smollm2-draft")}
    assert story.pacer_sentence("qwen2.5-coder-0.5b", models, ceiling(), "pacer-smollm2") == (
        "No PACER pre-verifier is trained for qwen2.5-coder-0.5b yet; on the smollm2-135m ← smollm2-draft pair it "
        "reaches 0.75 of the oracle's speedup, 0.25 of the way from the best fixed window to the oracle (held-out "
        "steps, draft at its measured cost).")
    assert story.pacer_sentence("smollm2-draft", models, ceiling(), "pacer-smollm2") == (
        "PACER's pre-verifier for smollm2-draft (models/pacer-smollm2) reaches 0.75 of the oracle's speedup, 0.25 of "
        "the way from the best fixed window to the oracle (held-out steps, draft at its measured cost).")
    assert story.pacer_sentence("smollm2-draft", models, pd.DataFrame(), None) == (
        "A PACER pre-verifier is trained for smollm2-draft (models/pacer-smollm2), but no sweep with a ceiling "
        "replays it yet.")
    assert story.pacer_sentence("x", {}, ceiling(), None) == "No PACER pre-verifier is trained for x yet."


# ---------------------------------------------------------------- d. replayed vs real


def bench() -> dict:
    def row(config, s, task="overall", t=0.0):
        return {"temperature": t, "task": task, "config": config, "speedup_vs_ar": s}

    return {"target": "T", "draft": "D", "created": "2026-12-02", "rows": [
        row("ar", 1.0), row("fixed:1", 0.69), row("fixed:2", 0.7), row("fixed:4", 0.68), row("heuristic", 0.74),
        row("oracle", 0.98), row("oracle", 5.0, t=0.7), row("oracle", 1.2, task="qa"), row("fixed:2", 1.0, task="qa")]}


def test_bench_oracle_ratio():
    r = story.bench_oracle_ratio(bench())
    assert r.pop("gammas") == [1, 2, 4]
    assert r == pytest.approx({"oracle": 0.98, "best_fixed": 0.7, "best_gamma": 2, "ratio": 1.4})
    assert story.bench_oracle_ratio(bench(), task="qa")["ratio"] == pytest.approx(1.2)
    assert story.bench_oracle_ratio(bench(), temperature=0.7) is None  # no fixed rows there
    no_oracle = {**bench(), "rows": [r for r in bench()["rows"] if r["config"] != "oracle"]}
    assert story.bench_oracle_ratio(no_oracle) is None


def test_find_bench_matches_the_pair_and_prefers_the_newest():
    old = {**bench(), "created": "2026-11-01"}
    other = {**bench(), "draft": "E", "created": "2027-01-01"}
    no_oracle = {**bench(), "created": "2027-01-01", "rows": [r for r in bench()["rows"] if r["config"] != "oracle"]}
    found = story.find_bench({"a.json": old, "b.json": bench(), "c.json": other, "d.json": no_oracle}, "T", "D")
    assert found[0] == "b.json"
    assert story.find_bench({"c.json": other}, "T", "D") is None


def window_rows() -> pd.DataFrame:
    rows = [("all", "fixed:1", "fixed", 1, 1.2), ("all", "fixed:2", "fixed", 2, 1.1),
            ("all", "fixed:8", "fixed", 8, 1.3), ("all", "oracle:a", "oracle", None, 1.8),
            ("all", "oracle:b", "oracle", None, 1.5), ("qa", "fixed:1", "fixed", 1, 1.0),
            ("qa", "oracle:a", "oracle", None, 1.5)]
    return pd.DataFrame(rows, columns=["task", "policy", "kind", "gamma", "speedup"])


def test_replayed_oracle_ratio_over_the_benched_windows():
    assert story.replayed_oracle_ratio(window_rows()) == pytest.approx(
        {"oracle": 1.8, "best_fixed": 1.3, "best_gamma": 8, "ratio": 1.8 / 1.3})
    assert story.replayed_oracle_ratio(window_rows(), [1, 2, 4]) == pytest.approx(
        {"oracle": 1.8, "best_fixed": 1.2, "best_gamma": 1, "ratio": 1.5})
    assert story.replayed_oracle_ratio(window_rows(), task="qa")["ratio"] == pytest.approx(1.5)
    assert story.replayed_oracle_ratio(window_rows(), [16]) is None


def test_reconcile_sentence_labels_each_side_once():
    rep = story.replayed_oracle_ratio(window_rows(), [1, 2, 4])
    real = story.bench_oracle_ratio(bench())
    s = story.reconcile_sentence(rep, real, real["gammas"])
    assert s == ("Oracle ÷ best fixed window (best of fixed γ ∈ {1, 2, 4}, the windows the bench ran): replayed "
                 "(reference, cost model) 1.50× (oracle 1.80× AR), real (bench, wall clock) 1.40× "
                 "(oracle 0.98× AR).")
    assert s.count(story.REPLAYED_LABEL) == 1 and s.count(story.REAL_LABEL) == 1
    assert story.reconcile_sentence(rep, None) == (
        "Oracle ÷ best fixed window: replayed (reference, cost model) 1.50× (oracle 1.80× AR); no real (bench, wall "
        "clock) figure for this pair yet (a bench with an `oracle` row).")
    assert "timing block" in story.WHY_DIFFER and "in-run" in story.WHY_DIFFER
    assert "Replayed vs real, reconciled" in story.WHY_DIFFER


# ---------------------------------------------------------------- e. cost


def test_cost_sentence_for_the_in_run_model():
    s = story.cost_sentence(0.2, False, True, False, in_run=5)
    assert s.startswith("Cost model: in-run (c = 0.2)") and "5 decode traces" in s


def test_cost_sentence_says_which_and_why():
    assert story.cost_sentence(0.2577, True, True, False) == (
        "Cost model: measured (c = 0.258) — this machine's own timings of the pair, recorded in the reference (a "
        "draft forward and the verify curve t_target(k)), price every replayed step.")
    assert story.cost_sentence(0.9, True, True, True).endswith("which say nothing about a trained pair.")
    flat = "Cost model: flat c = 0.05 (Leviathan's assumption: verifying any window costs one target forward)"
    assert story.cost_sentence(0.05, False, False, False) == f"{flat}, because the references carry no timings."
    assert story.cost_sentence(0.05, False, True, True) == (
        f"{flat}, because the tiny demo's timings (draft ≈ target) say nothing about a trained pair.")
    assert story.cost_sentence(0.05, False, True, False) == (
        f"{flat}, as picked above; the references' measured timings are the default.")


# ---------------------------------------------------------------- data helpers


def test_pacer_models_and_ceiling_model(tmp_path):
    (tmp_path / "pacer-x").mkdir()
    (tmp_path / "pacer-x" / "README.md").write_text("# PACER pre-verifier for `t1` + `d1`\n\nmore")
    (tmp_path / "pacer-bad").mkdir()
    (tmp_path / "pacer-bad" / "README.md").write_text("# something else\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "README.md").write_text("# PACER pre-verifier for `a` + `b`\n")
    assert result_files.pacer_models(str(tmp_path)) == {"pacer-x": ("t1", "d1")}
    assert result_files.pacer_models()["pacer-smollm2"] == ("smollm2-135m", "smollm2-draft")  # the bundled card
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps({"weights": "models/pacer-x/pacer.safetensors"}))
    assert result_files.pacer_ceiling_model(str(sweep)) == "pacer-x"
    assert result_files.pacer_ceiling_model(str(tmp_path / "missing.json")) is None


def test_bench_results_skips_unreadable_files(tmp_path):
    (tmp_path / "bench-a.json").write_text(json.dumps(bench()))
    (tmp_path / "bench-b.json").write_text("{not json")
    (tmp_path / "other.json").write_text("{}")
    assert list(result_files.bench_results(str(tmp_path))) == ["bench-a.json"]


def test_accept_run_ecdf_one_line_per_task_clipped():
    import pandas as pd

    from app import plots, window_plots

    pos = pd.DataFrame({"task": ["qa", "qa", "qa", "rag"], "accept_run": [0, 3, 40, 1]})
    f = window_plots.accept_run_ecdf(pos, clip=32)
    assert [t.name for t in f.data] == ["qa", "rag"]
    assert list(f.data[0].x) == [0, 3, 32] and list(f.data[0].y) == [1 / 3, 2 / 3, 1.0]


def test_bench_pacer_standing_and_sentence():
    def row(config, s, t=0.0):
        return {"temperature": t, "task": "overall", "config": config, "speedup_vs_ar": s}

    b = {"target": "T", "draft": "D", "created": "x", "rows": [
        row("ar", 1.0), row("fixed:1", 1.0), row("fixed:2", 1.2), row("pacer", 1.1), row("pacer:b=1,t=0.5", 1.32),
        row("oracle", 1.5), row("fixed:2", 1.0, 0.7), row("pacer", 1.1, 0.7)]}
    g = story.bench_pacer_standing(b)
    assert g["config"] == "pacer:b=1,t=0.5" and g["best_gamma"] == 2
    assert g["over_fixed"] == pytest.approx(1.1) and g["of_oracle"] == pytest.approx(0.88)
    t07 = story.bench_pacer_standing(b, temperature=0.7)
    assert "of_oracle" not in t07 and t07["over_fixed"] == pytest.approx(1.1)
    assert story.pacer_wall_clock_sentence("b.json", b) == (
        "On the wall clock (docs/results/b.json, all tasks) the best PACER rule (pacer:b=1,t=0.5) runs at 1.32× AR "
        "= 1.10× the best fixed window (γ = 2, 1.20×) and 0.88 of the real oracle's speedup (1.50×); at T = 0.7, "
        "1.10× the best fixed window (greedy unless stated).")
    no_pacer = {"rows": [r for r in b["rows"] if not r["config"].startswith("pacer")]}
    assert story.bench_pacer_standing(no_pacer) is None and story.pacer_wall_clock_sentence("x", no_pacer) is None
    assert story.find_bench({"a": b, "n": {**no_pacer, "target": "T", "draft": "D"}}, "T", "D",
                            need=story.bench_pacer_standing)[0] == "a"


def test_pacer_sweep_for_picks_the_drafts_sweep(tmp_path):
    from app import result_files

    models, results = tmp_path / "models", tmp_path / "results"
    for folder, pair in (("pacer-a", ("t1", "d1")), ("pacer-b", ("t2", "d2"))):
        (models / folder).mkdir(parents=True)
        (models / folder / "README.md").write_text(f"# PACER pre-verifier for `{pair[0]}` + `{pair[1]}`\n")
    results.mkdir()
    (results / "pacer-sweep-b.json").write_text(json.dumps({"weights": "models/pacer-b/pacer.safetensors"}))
    (results / "pacer-sweep-a.json").write_text(json.dumps({"weights": "models/pacer-a/pacer.safetensors"}))
    assert result_files.pacer_sweep_for("d2", str(results), str(models)) == str(results / "pacer-sweep-b.json")
    assert result_files.pacer_sweep_for("d1", str(results), str(models)) == str(results / "pacer-sweep-a.json")
    assert result_files.pacer_sweep_for("other", str(results), str(models)) == str(result_files.PACER_SWEEP)


def test_bench_gap_closed_on_the_wall_clock():
    def row(config, s, t=0.0):
        return {"temperature": t, "task": "overall", "config": config, "speedup_vs_ar": s}

    b = {"rows": [row("ar", 1.0), row("fixed:1", 1.1), row("fixed:2", 1.2), row("oracle", 1.6), row("pacer", 1.3),
                  row("pacer:b=1,t=0.9", 1.4), row("heuristic", 1.0), row("hf:lookup:10", 2.0),
                  row("fixed:10@lookup:n=10", 2.0), row("pacer", 9.0, t=0.7)]}
    g = story.bench_gap_closed(b)
    assert list(g["policy"]) == ["pacer", "pacer:b=1,t=0.9", "heuristic"]
    assert list(g["label"]) == ["pacer", "pacer:b=1,t=0.9", "heuristic"]  # two pacers: full specs
    assert g["position"].tolist() == pytest.approx([0.25, 0.5, -0.5])
    no_gain = {"rows": [row("fixed:1", 1.2), row("oracle", 1.1), row("pacer", 1.3)]}
    assert story.bench_gap_closed(no_gain).empty and story.bench_gap_closed({"rows": []}).empty


def test_pacer_is_said_uncalibrated_for_a_draft_without_committed_weights():
    models = {"pacer-smollm2": ("smollm2-135m", "smollm2-draft")}
    assert story.pacer_calibration("smollm2-draft", models) is None
    note = story.pacer_calibration("my-draft", models)
    assert note.startswith("PACER is uncalibrated for my-draft") and "python -m engine pacer calibrate" in note
