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


# ---------------------------------------------------------------- charts: colour vision and text contrast

# Machado, Oliveira & Fernandes (2009), severity 1: linear-RGB simulation of protanopia and deuteranopia.
CVD = {"protan": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
       "deutan": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]}


def _linear(hex_color: str) -> list[float]:
    c = [int(hex_color.lstrip("#")[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    return [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in c]


def _lab(rgb: list[float]) -> tuple[float, float, float]:
    m = [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
    xyz = [sum(m[i][j] * rgb[j] for j in range(3)) / w for i, w in enumerate((0.95047, 1.0, 1.08883))]
    f = [v ** (1 / 3) if v > (6 / 29) ** 3 else v / (3 * (6 / 29) ** 2) + 4 / 29 for v in xyz]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def seen_apart(a: str, b: str, kind: str) -> float:
    """CIE76 ΔE between two colours as a protan or deutan reader sees them."""
    sim = [[min(1.0, max(0.0, sum(r * v for r, v in zip(row, _linear(c))))) for row in CVD[kind]] for c in (a, b)]
    return sum((x - y) ** 2 for x, y in zip(_lab(sim[0]), _lab(sim[1]))) ** 0.5


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two opaque colours."""
    lum = [0.2126 * r + 0.7152 * g + 0.0722 * bl for r, g, bl in (_linear(a), _linear(b))]
    hi, lo = max(lum), min(lum)
    return (hi + 0.05) / (lo + 0.05)


def test_token_fates_read_apart_without_red_green_vision():
    from itertools import combinations

    from app import plots

    close = [(f, g, kind, round(seen_apart(plots.COLORS[f], plots.COLORS[g], kind), 1))
             for f, g in combinations(plots.COLORS, 2) for kind in CVD
             if seen_apart(plots.COLORS[f], plots.COLORS[g], kind) < 20]
    assert not close, close
    # accepted against rejected, the pair every chart and strip sets side by side, well apart (≥ 30): the
    # old green #2e9d4f and red #d62728 read 22 apart for a deutan reader
    assert min(seen_apart(plots.COLORS["accepted"], plots.COLORS["rejected"], kind) for kind in CVD) >= 30
    assert seen_apart("#2e9d4f", "#d62728", "deutan") < 30
    steps = pd.DataFrame({"step": [0, 1, 2], "window": [4, 4, 0], "accepted": [4, 1, 0], "rejected": [0, 1, 0],
                          "pending": [0, 2, 0], "has_correction": [False, True, False], "has_bonus": [True, False, True],
                          "emitted": [5, 2, 1]})
    bars = {t.name: t for t in plots.step_timeline(steps).data if t.type == "bar"}
    assert set(bars) == set(plots.COLORS)
    hatches = {name: bar.marker.pattern.shape or "" for name, bar in bars.items()}
    assert len(set(hatches.values())) == len(hatches), hatches  # colour removed, every fate still reads apart


def test_chart_text_is_at_least_aa_against_what_is_behind_it():
    import plotly.io as pio

    from app import plots, whatif

    page = "#ffffff"
    template = pio.templates[plots.TEMPLATE].layout
    assert contrast(template.font.color, page) >= 4.5  # axis titles, ticks, legends, chart titles
    base = synthetic_summary()
    sweeps = sweep_plots.speedup_heatmap(base).data[0]
    cells = pd.DataFrame({"threshold": [0.2, 0.2, 0.6, 0.6], "K": [2, 4, 2, 4], "speedup": [0.7, 1.3, 2.4, 0.1]})
    grid = whatif.heatmap(cells, "flat c = 0.1").data[0]
    for h in (sweeps, grid):  # numbers printed in the cells: every colour of the scale under them
        assert h.texttemplate and h.textfont.color
        low = [(stop, c) for stop, c in h.colorscale if contrast(h.textfont.color, c) < 4.5]
        assert not low, (h.textfont.color, low)
    verdicts = pd.DataFrame({"verifier": ["token", "naive"], "verdict": ["lossless", "not lossless"],
                             "max_lossless_error": [1e-16, 0.2], "worst_case": ["a", "b"]})
    notes = [a.font.color for a in plots.audit_errors(verdicts, 1e-9).layout.annotations]
    assert notes and all(contrast(c or template.font.color, page) >= 4.5 for c in notes)


def test_a_long_y_axis_title_breaks_instead_of_reaching_the_chart_title():
    """Windows' y-axis titles ran longer than the plot was tall and overlapped the chart's title: a title
    that does not fit beside the plot is broken over two lines that do."""
    import plotly.graph_objects as go

    from app import plots, window_plots

    gaps = pd.DataFrame({"label": ["a", "b"], "position": [0.2, 0.5], "policy": ["p", "q"]})
    cost = pd.DataFrame({"gamma": [1, 2], "step": [1.2, 1.4]})
    for fig in (window_plots.gap_closed_bars(gaps), window_plots.cost_curve(cost)):
        title, lay = fig.layout.yaxis.title.text, fig.layout
        room = lay.height - lay.margin.t - lay.margin.b
        assert all(len(line) * plots.TITLE_CHAR_PX <= room for line in title.split("<br>")), (title, room)
    assert "<br>" in window_plots.gap_closed_bars(gaps).layout.yaxis.title.text
    assert plots.layout(go.Figure(), "t", "x", "speedup (× AR)").layout.yaxis.title.text == "speedup (× AR)"
    assert plots.fit_axis_title("a b c d", 10) == "a b<br>c d"


def test_a_column_of_durations_reads_in_seconds_once_one_takes_a_second():
    assert fmt.time_unit([410321.0, 12.0]) == (1000.0, "s") and fmt.time_unit([999.0, float("nan")]) == (1.0, "ms")
    assert fmt.duration(410321) == "6.8 min" and fmt.duration(4103.2) == "4.1 s"
