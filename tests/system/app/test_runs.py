"""app.runs and the pages' other pure conclusions: ×AR against the same run's AR, the drafter's cost ratio
c, the sentence each page opens with (runs, D-PACE, Sweeps, Multi-draft) and the default series."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from app import acceptance, dpace_plots, frames, multidraft_view, runs, sweep_plots, traces
from tests.conftest import REPO


@pytest.fixture(scope="module")
def entries(trace_dir):
    from engine.trace.format import load_trace

    return {p.name: frames.make_entry(p.name, "bundled", load_trace(p)) for p in traces.bundled_paths(trace_dir)}


def test_cost_ratio_from_the_two_traces(entries):
    e, ar = entries["demo-tiny-fixed4.jsonl"], entries["demo-tiny-autoregressive.jsonl"]
    c, v = runs.cost_ratios(e, ar)
    s, a = e.info["summary"], ar.info["summary"]
    step = a["verify_ms"] / a["target_calls"]
    assert c == pytest.approx(s["draft_ms"] / s["drafted_tokens"] / step)
    assert v == pytest.approx(s["verify_ms"] / s["target_calls"] / step)
    assert runs.cost_ratios(ar, ar) == (None, None)


def test_runs_without_an_ar_in_their_run_have_no_speedup(entries):
    solo = {k: v for k, v in entries.items() if k != "demo-tiny-autoregressive.jsonl"}
    df = runs.runs_frame(solo)
    assert df.loc[df["speculative"], "×AR"].isna().all()
    assert "no speedup can be stated" in runs.conclusion(df)
    assert "has no autoregressive trace" in runs.trace_conclusion(df, "demo-tiny-fixed4.jsonl")


def test_pair_traces_are_a_handful_of_one_run(entries):
    df = runs.runs_frame(entries)
    pick = runs.pair_traces(df, "demo-tiny-fixed4.jsonl", limit=3)
    assert pick[0] == "demo-tiny-fixed4.jsonl" and len(pick) == 3
    assert all(entries[k].info["draft"] for k in pick)


def test_per_position_acceptance_is_vllms(entries):
    e = entries["demo-tiny-fixed4.jsonl"]
    pos = acceptance.frame(entries, ["demo-tiny-fixed4.jsonl", "demo-tiny-autoregressive.jsonl"])
    assert set(pos["label"]) == {"demo-tiny-fixed4.jsonl"}  # AR drafts nothing: no line
    spec = [s for s in e.trace.steps if s["window"] > 0]
    for i in (1, 2, 3):
        want = sum(s["accepted"] >= i for s in spec) / len(spec)
        assert pos.loc[pos["position"] == i, "rate"].iloc[0] == pytest.approx(want)
    assert pos["mean acceptance length"].iloc[0] == pytest.approx(1 + sum(s["accepted"] for s in spec) / len(spec))


def test_dpace_conclusion_and_chosen_run():
    summary = json.loads((REPO / "docs" / "results" / "dpace-smollm2" / "summary.json").read_text())
    c = dpace_plots.chosen(summary)
    assert c["objective"] == "dpace" and c["alpha"] != 0  # not the collapsed α = 0 run
    text = dpace_plots.conclusion(summary)
    assert c["label"] in text and "95% CI" in text and "vs DFlash" not in text
    lo, hi = dpace_plots.tau_range(summary["summary"])
    assert lo > 0.9 and hi < 1.4  # the τ axis starts where the data does


def test_sweep_conclusion_of_the_bundled_example():
    from engine.bench.sweep_summary import load_sweep_summary, with_settings

    df = with_settings(load_sweep_summary(REPO / "app" / "example_sweep"))
    assert df["task"].nunique() == 6 and df["policy"].nunique() == 4
    text = sweep_plots.conclusion(df)
    best = sweep_plots.setting_table(df).query("policy != 'autoregressive'").iloc[0]
    assert f"{best['speedup']:.2f}×" in text


def test_multidraft_wall_clock_sentence():
    rows, _, _ = multidraft_view.load_paired(REPO / "docs" / "results" / "multibench-qwen-paired-bf16.json")
    t = float(rows["temperature"].max())
    text = multidraft_view.wall_clock(rows, t)
    d = rows[(rows["temperature"] == t) & rows["method"].isin(multidraft_view.LOSSLESS_MULTI + ("token",))]
    assert f"{d['sr_model'].max():.2f}× AR" in text
    assert "K" in multidraft_view.DEFINITIONS and "L" in multidraft_view.DEFINITIONS


def test_heatmap_greys_steps_that_drafted_nothing(entries):
    from app import plots

    e = entries["demo-tiny-heuristic.jsonl"]
    steps = e.steps[e.steps["request_id"] == 0]
    pos = e.positions[e.positions["request_id"] == 0]
    fig = plots.position_heatmap(pos, steps=steps.assign(step=steps["step"]))
    assert list(fig.data[0].y) == sorted(steps["step"])  # every step has its row
    fake = pos[pos["step"] != pos["step"].iloc[0]]  # pretend the first drafting step drafted nothing
    fig = plots.position_heatmap(fake, steps=steps)
    grey = next(d for d in fig.data if d.name == "not checked")
    row = list(grey.y).index(pos["step"].iloc[0])
    assert all(v == 1.0 for v in grey.z[row]) and all(c == "nothing drafted" for c in grey.customdata[row])
    assert all(v != v for v in fig.data[0].z[row])  # no accept probability drawn there: nothing spreads over it
