"""What Live says and carries after a run (app.live_explain), without loading a model: the loss sentence
with the run's own measured c and one suggestion, the autoregressive baseline carried into Replay with
the side it ran beside, and the load estimate learned from this machine's loads. The traces are the
tiny demo traces (tests/system/app/conftest.py), recorded in one run like a Live run's sides."""

from __future__ import annotations

import json
import shutil

import pytest
import streamlit as st

from app import live_explain, runs, traces
from engine.trace.format import load_trace, summarize


def _summaries(trace_dir, name):
    side = summarize(load_trace(trace_dir / name).steps)
    base = summarize(load_trace(trace_dir / "demo-tiny-autoregressive.jsonl").steps)
    return side, base


def test_loss_sentence_names_the_measured_c_and_one_suggestion(trace_dir):
    side, base = _summaries(trace_dir, "demo-tiny-fixed8.jsonl")
    slow = {**side, "tokens_per_s": base["tokens_per_s"] * 0.43}
    c, _ = live_explain.cost_ratios(slow, base)
    text = live_explain.loss_sentence("A", "fixed:8", slow, base)
    assert text.startswith("A (fixed:8) lost to autoregressive decoding at 0.43× AR because ")
    if c >= 0.15:  # the tiny draft costs about as much as its target: the reason is the draft's cost
        assert f"c = {c:.2f} of a target step" in text and "try a model-free drafter" in text
    assert text.count("try ") == 1  # one suggestion
    # c is this run's own: the draft ms per drafted token over the baseline's ms per target step
    step = base["verify_ms"] / base["target_calls"]
    assert c == pytest.approx(slow["draft_ms"] / slow["drafted_tokens"] / step)
    # a side that won, or a run without a baseline, has no loss to explain
    assert live_explain.loss_sentence("B", "fixed:2", {**side, "tokens_per_s": base["tokens_per_s"] * 1.2}, base) is None
    assert live_explain.loss_sentence("B", "fixed:2", side, None) is None


def test_a_cheap_draft_loses_through_verify_cost_and_says_so():
    base = {"tokens_per_s": 10.0, "verify_ms": 1000.0, "target_calls": 10}
    side = {"tokens_per_s": 6.0, "verify_ms": 1500.0, "target_calls": 10, "draft_ms": 1.0, "drafted_tokens": 40,
            "mean_emitted_per_call_incl_bonus": 1.3}
    text = live_explain.loss_sentence("A", "lookup", side, base)
    assert "verifying a block costs 1.50× a plain target step" in text and "0.60× AR" in text


def test_open_in_replay_carries_the_autoregressive_baseline(trace_dir, tmp_path):
    """A Live side opened in Replay: its ×AR comes from the baseline the run measured, so Replay's
    conclusion states it instead of 'no autoregressive trace'."""
    paths = {}
    for side, name in (("A", "demo-tiny-fixed4.jsonl"), ("baseline", "demo-tiny-autoregressive.jsonl")):
        paths[side] = str(shutil.copy(trace_dir / name, tmp_path / f"live-{side}.jsonl"))
    st.session_state[traces.UPLOADS] = {}
    alone, err = traces.add_trace_bytes("alone-A.jsonl", (trace_dir / "demo-tiny-fixed4.jsonl").read_bytes(), "live")
    assert err is None
    before = runs.trace_conclusion(runs.runs_frame(traces.uploads()), alone)
    assert "no autoregressive trace" in before  # what the issue saw: the side without its baseline

    st.session_state[traces.UPLOADS] = {}
    label, err = live_explain.open_in_replay(paths, "A", "baseline")
    assert err is None and label == "live: live-A.jsonl"
    df = runs.runs_frame(traces.uploads())
    row = df[df["label"] == label].iloc[0]
    assert row["ar"] == "live: live-baseline.jsonl" and row["×AR"] > 0
    text = runs.trace_conclusion(df, label)
    assert "no autoregressive trace" not in text and f"{row['×AR']:.2f}× AR" in text
    # without a baseline file it opens the side alone and says nothing wrong
    st.session_state[traces.UPLOADS] = {}
    label, err = live_explain.open_in_replay({"A": paths["A"]}, "A", "baseline")
    assert err is None and list(traces.uploads()) == [label]


def test_load_estimate_learns_from_this_machines_loads(tmp_path):
    f = tmp_path / "loads.json"
    guess = live_explain.LOAD_GUESS_S["smollm2"]
    assert live_explain.load_estimate("smollm2", f) == (guess, "a first estimate: later loads on this machine are timed")
    # Another pair loaded 2.85× slower than its guess here: the first smollm2 estimate is scaled alike
    # (the 20 s said for a 57 s load).
    live_explain.record_load("qwen2.5-coder", 2.85 * live_explain.LOAD_GUESS_S["qwen2.5-coder"], f)
    est, how = live_explain.load_estimate("smollm2", f)
    assert est == pytest.approx(57.0, abs=0.1) and "scaled by this machine's other loads" in how
    for s in (55.0, 60.0, 57.0):
        live_explain.record_load("smollm2", s, f)
    assert live_explain.load_estimate("smollm2", f) == (57.0, "the median of this machine's last 3 loads")
    for _ in range(10):
        live_explain.record_load("smollm2", 40.0, f)
    assert json.loads(f.read_text())["smollm2"] == [40.0] * live_explain.KEEP
    f.write_text(json.dumps({"smollm2": 33.0}))  # the older one-number file still reads
    assert live_explain.load_estimate("smollm2", f)[0] == 33.0
    f.write_text("not json")
    assert live_explain.load_estimate("smollm2", f)[1].startswith("a first estimate")
