"""The issue's last-mile items that are pure functions: the Sweeps colour bar cannot go negative, D-PACE's
headline is against the strongest DFlash run, a deeply nested upload is one line, raw field names
print in words, and token outcomes carry a second cue besides colour."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import streamlit as st

from app import dpace_plots, fmt, sweep_plots, tokens, traces
from engine.bench import sweep
from tests.conftest import REPO
from tests.system.app.test_sweeps_page import synthetic_summary


def test_sweeps_colour_bar_runs_from_zero_with_white_at_one():
    base = synthetic_summary()
    fast = base[base["policy"] == "fixed:4"].drop(columns=[c for c in base if "speedup" in c or "baseline" in c])
    fast = fast.assign(policy="fixed:8", tokens_per_s=600.0, decode_ms=8 / 600 * 1e3)
    raw = base.drop(columns=[c for c in base if "speedup" in c or "baseline" in c])
    h = sweep_plots.speedup_heatmap(sweep.add_speedup(pd.concat([raw, fast], ignore_index=True))).data[0]
    assert h.zmin == 0.0 and h.zmax >= 1.0 and h.zmid is None  # zmid mirrored the top around 1: −4…6
    mid = [stop for stop in h.colorscale if stop[1] == "#ffffff"][0][0]
    assert mid == pytest.approx((1 - h.zmin) / (h.zmax - h.zmin))
    assert all(c.lower() not in ("#2e9d4f", "#d62728") for _, c in h.colorscale)  # no red–green pair


def test_dpace_headline_is_against_the_strongest_dflash_run():
    summary = json.loads((REPO / "docs" / "results" / "dpace-smollm2" / "summary.json").read_text())
    best = max((r for r in summary["summary"] if r["objective"] == "dflash"), key=lambda r: r["tau_offline_mean"])
    text = dpace_plots.conclusion(summary)
    assert f"against the best DFlash setting, {best['label']}, at {best['tau_offline_mean']:.3f}" in text
    assert text.index(best["label"]) < text.index("dflash(γ=7)")  # the weaker reference comes second


def test_a_deeply_nested_upload_is_one_line(tmp_path):
    st.session_state[traces.UPLOADS] = {}
    deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    assert traces.schema_of(deep) is None
    label, err = traces.add_trace_bytes("deep.jsonl", deep)
    assert label is None and err.startswith("deep.jsonl: ") and "\n" not in err
    assert "Traceback" not in err and "/" not in err.split(": ", 1)[1]  # no server path
    label, err = traces.add_trace_bytes("table.csv", b"a,b\n1,2\n")
    assert label is None and err.startswith("table.csv: expected a .jsonl or .parquet trace")


def test_raw_field_names_print_in_words():
    for raw in ("weight_share", "max_lossless_error", "blocks", "t_before", "mb_ms"):
        assert "_" not in fmt.words(raw)
    assert list(fmt.labelled(pd.DataFrame(columns=["max_lossless_error", "verifier"])).columns) == [
        "largest lossless error", "verifier"]
    from app import plots

    fig = plots.policy_scores({"blocks": [{"scores": [0.9, 0.4], "mean": 0.6, "t_before": 0.5, "mb_ms": 3.0}]}, 2)
    names = [t.name for t in fig.data]
    assert names and not any(re.search(r"\w_\w|\.\w", n) for n in names), names


def test_token_outcomes_differ_by_more_than_colour():
    spans = {f: tokens.span("x", f, "tip") for f in ("accepted", "rejected", "correction", "bonus", "pending",
                                                     "autoregressive")}

    def cue(html: str) -> tuple[str, bool, str]:
        line = re.search(r"border-bottom:\d+px (\w+)", html)
        mark = re.search(r'<sup class="tok-cue"[^>]*>([^<]*)</sup>', html)
        return (line.group(1) if line else "none", "line-through" in html, mark.group(1) if mark else "")

    cues = {f: cue(h) for f, h in spans.items()}
    assert len(set(cues.values())) == len(cues), cues  # colour removed, every outcome still reads apart
    card = tokens.card(0.8, 0.4, 0.5, 1.25)
    assert card.splitlines() == ["draft q = 0.800", "target p = 0.400", "min(1, p/q) = 0.500",
                                 "draft entropy = 1.25 nats"]
    assert "verifier's accept prob = 0.300" in tokens.card(0.8, 0.4, 0.3)  # a non-standard verifier's h is shown
