"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import json
from pathlib import Path
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import audit_view, frames, plots, tokens, traces, window_plots
from tests.conftest import MAIN, REPO, TIMEOUT


def test_draft_fates_and_step_pieces():
    assert frames.draft_fates(2, 4) == ["accepted", "accepted", "rejected", "pending"]
    assert frames.draft_fates(3, 3) == ["accepted"] * 3
    step = {"draft_tokens": [5, 6, 7], "accepted": 1, "window": 3, "emitted_tokens": [5, 9], "bonus": None,
            "correction": 9, "q_draft": [0.9, 0.5, 0.4], "p_target": [0.8, 0.1, 0.3], "accept_probs": [1, 0.2, 0.7]}
    texts = {5: "a", 6: "<b>", 7: "c", 9: "d"}
    pieces = tokens.step_pieces(step, texts)
    assert [p[1] for p in pieces] == ["accepted", "rejected", "pending", "correction"]
    assert [p[1] for p in tokens.emitted_pieces(step, texts)] == ["accepted", "correction"]
    html = tokens.strip(pieces)
    assert "&lt;b&gt;" in html and "<b>" not in html  # token text is escaped
    assert plots.COLORS["rejected"] in html and "line-through" in html


def test_frames_and_describe(trace_dir):
    from engine.trace.format import load_trace

    t = load_trace(trace_dir / "demo-tiny-heuristic.jsonl")
    e = frames.make_entry("x", "bundled", t)
    assert len(e.steps) == len(t.steps) and e.steps["emitted"].sum() == t.summary["new_tokens"]
    assert (e.steps["rejected"] + e.steps["pending"] == e.steps["window"] - e.steps["accepted"]).all()
    assert e.steps["rejected"].isin([0, 1]).all()  # one rejected draft at most; the ones after it are pending
    assert len(e.positions) == t.summary["drafted_tokens"]
    assert e.info["demo"] and e.info["policy"].startswith("heuristic") and "qa" in e.info["tasks"]
    req = frames.requests_frame(t, e.steps)
    assert req["new_tokens"].sum() == t.summary["new_tokens"]


def test_figures_are_pure_and_share_the_palette(trace_dir):
    from engine.trace.format import load_trace

    e = frames.make_entry("x", "bundled", load_trace(trace_dir / "demo-tiny-fixed4.jsonl"))
    one = e.steps[e.steps["request_id"] == 0]
    fig = plots.step_timeline(one, cursor=1).to_dict()
    assert any(s.get("type") == "line" for s in fig["layout"].get("shapes", []))  # the cursor
    heat = plots.position_heatmap(e.positions[e.positions["request_id"] == 0]).to_dict()
    assert heat["data"][0]["type"] == "heatmap" and heat["data"][0]["zmax"] == 1
    assert plots.policy_scores({}, 3) is None
    pf = plots.policy_scores({"scores": [0.9, 0.4, 0.2], "threshold": 0.5, "stop": "score"}, 3).to_dict()
    assert pf["data"][0]["y"] == (0.9, 0.4, 0.2) or list(pf["data"][0]["y"]) == [0.9, 0.4, 0.2]
    dist = pd.DataFrame({"policy": ["a", "a", "b"], "emitted": [1, 2, 3]})
    assert window_plots.accepted_distribution(dist, ecdf=True).to_dict()["data"][0]["type"] == "scatter"


def test_pending_drafts_grey_and_autoregressive_tokens_neutral(trace_dir):
    """Never-checked drafts are 'pending' (grey) in the timeline as in the token strip, not 'rejected';
    a plain target step's token has its own neutral colour, not the bonus blue."""
    from engine.trace.format import load_trace

    e = frames.make_entry("x", "bundled", load_trace(trace_dir / "demo-tiny-fixed8.jsonl"))
    fates = e.positions["fate"].value_counts()
    assert fates.get("pending", 0) > 0  # the fixture has some, or this test proves nothing
    bars = {d.name: d for d in plots.step_timeline(e.steps).data if d.type == "bar"}
    assert sum(bars["pending"].y) == fates["pending"] and sum(bars["rejected"].y) == fates["rejected"]
    assert bars["pending"].marker.color == plots.COLORS["pending"]
    ar = frames.make_entry("y", "bundled", load_trace(trace_dir / "demo-tiny-autoregressive.jsonl"))
    bars = {d.name: d for d in plots.step_timeline(ar.steps).data if d.type == "bar"}
    assert sum(bars["autoregressive"].y) == len(ar.steps) and sum(bars["bonus"].y) == 0
    assert bars["autoregressive"].marker.color == plots.COLORS["autoregressive"] != plots.COLORS["bonus"]
    step = ar.trace.steps[0]
    assert [f for _, f, _ in tokens.step_pieces(step, {t: "x" for t in step["emitted_tokens"]})] == ["autoregressive"]
    heat = plots.position_heatmap(e.positions).to_dict()
    grey = [d for d in heat["data"] if d.get("name") == "not checked"]
    assert grey and grey[0]["colorscale"][0][1] == plots.COLORS["pending"]


def test_every_figure_shares_one_layout(trace_dir, tmp_path):
    """One figure style: title in the top margin, legend vertical outside the plot on the right (never over
    the title or the data), height that fits every legend entry, axis titles, colour bars titled in
    words, and one distinct colour per series."""
    from app import dpace_plots, sweep_plots
    from engine.trace.format import load_trace

    e = frames.make_entry("x", "bundled", load_trace(trace_dir / "demo-tiny-fixed4.jsonl"))
    many = pd.DataFrame({"series": [f"trace-{i}" for i in range(12) for _ in range(3)],
                         "emitted": [1, 2, 3] * 12})
    verdicts = audit_view.verdicts(audit_view.load_audit(REPO / "docs" / "results" / "audit.csv"))
    summary = json.loads((REPO / "docs" / "results" / "dpace" / "summary.json").read_text())
    from engine.bench.sweep import SUMMARY_NAME

    sweep = pd.read_parquet(synthetic_sweep(tmp_path / "sweep") / SUMMARY_NAME)
    figs = [plots.step_timeline(e.steps[e.steps["request_id"] == 0]), plots.position_heatmap(e.positions),
            plots.position_rate(e.positions), window_plots.accepted_distribution(many, color="series"),
            window_plots.accepted_distribution(many, color="series", ecdf=True), plots.audit_errors(verdicts, 1e-12),
            plots.cumulative_compare({"A": e.steps, "B": e.steps}), dpace_plots.alpha_sweep(summary),
            sweep_plots.speedup_heatmap(sweep)]
    for fig in figs:
        d = fig.to_dict()
        lay = d["layout"]
        title = lay["title"]["text"]
        assert lay["title"]["yref"] == "container" and lay["xaxis"]["title"]["text"] and lay["yaxis"]["title"]["text"]
        entries = [t for t in d["data"] if t.get("showlegend") is not False and t.get("name")]
        if lay.get("showlegend"):
            assert lay["legend"]["orientation"] == "v" and lay["legend"]["x"] > 1, title
            assert lay["height"] >= 110 + plots.LEGEND_ROW_PX * len(entries), title
        for t in d["data"]:
            if t["type"] == "heatmap" and t.get("showscale", True):
                assert len(t["colorbar"]["title"]["text"]) > 3, title  # words, not a symbol
        assert not lay.get("annotations") or title.startswith("Worst"), title  # no labels sitting on the data
    colors = [t["marker"]["color"] for t in window_plots.accepted_distribution(many, color="series").to_dict()["data"]]
    assert len(set(colors)) == 12


def test_bundled_traces_all_load():
    """Whatever sits in traces/ (demo or real) must load, or the Overview reports it as broken."""
    paths = traces.bundled_paths(REPO / "traces")
    assert paths, "traces/ should ship demo traces: python -m app.make_demo_traces"
    from engine.trace.format import load_trace

    for p in paths:
        load_trace(p)


def synthetic_sweep(folder: Path) -> Path:
    """A sweep folder with only summary.parquet (what the Sweeps page reads): 2 policies × 2 tasks."""
    from engine.bench.sweep import SUMMARY_NAME, add_speedup

    rows = [{"task_id": f"{pol}-{task}", "pair": "p", "target": "t", "dtype": "fp32", "policy": pol,
             "verifier": "token", "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0, "max_new_tokens": 8,
             "chat": True, "task": task, "shard_hash": task, "prompts": 1, "new_tokens": 8,
             "decode_ms": 8 / tps * 1e3, "target_calls": 4, "mean_accepted_per_call_excl_bonus": 0.5, "drafted_tokens": 4,
             "mean_emitted_per_call_incl_bonus": 2.0, "draft_acceptance_rate": 0.5, "tokens_per_s": tps}
            for pol, tps in (("autoregressive", 100.0), ("fixed:4", 150.0)) for task in ("qa", "rag")]
    folder.mkdir(parents=True, exist_ok=True)
    add_speedup(pd.DataFrame(rows)).to_parquet(folder / SUMMARY_NAME, index=False)
    return folder


def test_multi_draft_rows_colour_only_the_chosen_block():
    step = {"all_drafts": [[1, 2], [3, 4]], "chosen": 1, "draft_tokens": [3, 4], "accepted": 2, "window": 2,
            "emitted_tokens": [3, 4, 5], "bonus": 5, "correction": None, "decisions": [0, 1],
            "q_draft": [0.5, 0.5], "p_target": [0.6, 0.6], "accept_probs": [1.0, 1.0]}
    texts = {i: f"<{i}>" for i in range(6)}
    rows = tokens.multi_draft_rows(step, texts)
    assert [r["chosen"] for r in rows] == [False, True]
    assert [p[1] for p in rows[1]["pieces"]] == ["accepted", "accepted", "bonus"]
    assert "coin ✗" in rows[1]["pieces"][0][2] and "coin ✓" in rows[1]["pieces"][1][2]  # BV: failed coin, accepted
    html = tokens.multi_draft_html(step, texts)
    assert "&lt;1&gt;" in html and "<1>" not in html and plots.COLORS["bonus"] in html
    assert html.count("★ followed") == 1 and html.count("○ not followed") == 1


def test_a_draft_read_through_a_context_window_is_named_with_its_window():
    from app import frames

    assert frames.draft_label({"draft": {"name": "d"}}) == "d"
    assert frames.draft_label({"draft": {"name": "d", "context": {"window": 192, "sink": 64}}}) == "d [ctx:192,sink=64]"
    assert frames.draft_label({"draft": None}) is None and frames.draft_label({}) is None
