"""Pure figure builders for the D-PACE training dashboard: training traces / summary in, plotly out.

Inputs come from a results directory written by `python -m engine dpace report` (default
docs/results/dpace/): `summary.json` and `traces/*.jsonl` (speclab.dpace_trace, loaded with
`engine.train.dpace.training_trace.load_training_trace`). No Streamlit calls here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from app.plots import colorbar, layout, palette, rgba


def load_results(directory: str | Path) -> tuple[dict, dict[str, object], dict[str, str]]:
    """(summary.json content or {}, {run name: TrainingTrace}, {file: one-line error})."""
    from engine.train.dpace.training_trace import TrainingTraceError, load_training_trace

    d = Path(directory)
    summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() else {}
    traces, bad = {}, {}
    for p in sorted((d / "traces").glob("*.jsonl")):
        try:
            traces[p.stem] = load_training_trace(p)
        except TrainingTraceError as e:
            bad[p.name] = str(e)
    return summary, traces, bad


def logs_frame(traces: dict) -> pd.DataFrame:
    """One row per (run, logging step, position): q, weight_share; plus run label / seed."""
    rows = []
    for name, t in traces.items():
        h = t.header
        for r in t.logs:
            for i, (q, w) in enumerate(zip(r["q"], r["weight_share"]), start=1):
                rows.append({"run": name, "label": h.get("label", h["objective"]), "objective": h["objective"],
                             "alpha": h.get("alpha"), "seed": h["seed"], "step": r["step"], "pos": i, "q": q,
                             "weight_share": w, "surrogate": r["surrogate"], "loss": r["loss"]})
    return pd.DataFrame(rows)


def evals_frame(traces: dict) -> pd.DataFrame:
    rows = []
    for name, t in traces.items():
        h = t.header
        for r in t.evals:
            rows.append({"run": name, "label": h.get("label", h["objective"]), "objective": h["objective"],
                         "alpha": h.get("alpha"), "seed": h["seed"], "step": r["step"],
                         "tau_offline": r["tau_offline"], "split": r.get("split", "heldout")})
    return pd.DataFrame(rows)


def weight_heatmap(logs: pd.DataFrame, label: str, value: str = "weight_share") -> go.Figure:
    """Position × training step heatmap of one objective's weight share (or q), mean over seeds."""
    df = logs[logs["label"] == label]
    grid = df.pivot_table(index="pos", columns="step", values=value, aggfunc="mean")
    title = {"weight_share": "Weight share", "q": "Drafter probability q of the target token"}[value]
    fig = go.Figure(go.Heatmap(z=grid.values, x=list(grid.columns), y=list(grid.index), colorscale="Viridis",
                               zmin=0, zmax=float(grid.values.max()) if grid.size else 1,
                               colorbar=colorbar({"weight_share": "share of the loss weight",
                                                  "q": "drafter probability of the target token"}[value]),
                               hovertemplate="step %{x}, position %{y}<br>" + value + " %{z:.3f}<extra></extra>"))
    fig.update_yaxes(dtick=1, autorange="reversed")
    return layout(fig, f"{title} by block position — {label}", "training step",
                  "block position (1 = first drafted)", height=340)


def share_profiles(logs: pd.DataFrame, label: str, n_curves: int = 4) -> go.Figure:
    """Weight share per position at a few training steps (D-PACE Fig. a style)."""
    df = logs[logs["label"] == label]
    steps = sorted(df["step"].unique())
    pick = [steps[round(i * (len(steps) - 1) / max(1, n_curves - 1))] for i in range(min(n_curves, len(steps)))]
    fig = go.Figure()
    for s, c in zip(pick, palette(len(pick))):
        g = df[df["step"] == s].groupby("pos")["weight_share"].mean()
        fig.add_scatter(x=g.index, y=g.values, name=f"step {s}", mode="lines+markers", line=dict(color=c))
    fig.update_yaxes(tickformat=".0%")
    fig.update_xaxes(dtick=1)
    return layout(fig, f"Weight share profile over training — {label}", "block position (1 = first drafted)",
                  "share of the loss weight", height=340)


def tau_curves(evals: pd.DataFrame, labels: list[str] | None = None) -> go.Figure:
    """Offline τ (held-out, incl. bonus) against training step: mean over seeds, band = min..max."""
    df = evals[evals["split"] == "heldout"]
    labels = labels or list(dict.fromkeys(df["label"]))
    fig = go.Figure()
    for lab, c in zip(labels, palette(len(labels))):
        g = df[df["label"] == lab].groupby("step")["tau_offline"].agg(["mean", "min", "max"])
        if g.empty:
            continue
        fig.add_scatter(x=list(g.index) + list(g.index[::-1]), y=list(g["max"]) + list(g["min"][::-1]),
                        fill="toself", fillcolor=rgba(c, 0.15), line=dict(width=0), showlegend=False,
                        hoverinfo="skip")
        fig.add_scatter(x=g.index, y=g["mean"], name=lab, mode="lines+markers", line=dict(color=c, width=2))
    return layout(fig, "Offline τ during training (mean over seeds, band = seed range)", "training step",
                  "τ = emitted per call (incl. bonus)", height=360)


def alpha_sweep(summary: dict) -> go.Figure:
    """Final offline (and online) τ against α for D-PACE (sum normalisation), ± sd over seeds;
    DFlash and uniform as horizontal reference lines, named in the legend (not on the plot)."""
    rows = summary.get("summary", [])
    sw = sorted([r for r in rows if r["objective"] == "dpace"], key=lambda r: r["alpha"])
    colors = palette(4)
    fig = go.Figure()
    if sw:
        fig.add_scatter(x=[r["alpha"] for r in sw], y=[r["tau_offline_mean"] for r in sw], name="D-PACE offline τ",
                        mode="lines+markers", line=dict(color=colors[0], width=2),
                        error_y=dict(type="data", array=[r["tau_offline_std"] for r in sw], visible=True))
        on = [r for r in sw if r.get("tau_online_mean") is not None]
        if on:
            fig.add_scatter(x=[r["alpha"] for r in on], y=[r["tau_online_mean"] for r in on],
                            name="D-PACE online τ", mode="lines+markers", line=dict(color=colors[1], dash="dot"),
                            error_y=dict(type="data", array=[r["tau_online_std"] or 0 for r in on], visible=True))
    for j, name in enumerate(("dflash", "uniform")):
        ref = next((r for r in rows if r["objective"] == name), None)
        if ref is not None:
            fig.add_scatter(x=[-0.05, 1.05], y=[ref["tau_offline_mean"]] * 2, mode="lines",
                            name=f"{ref['label']} offline τ", line=dict(color=colors[2 + j], dash="dash"),
                            hovertemplate=f"{ref['label']} offline τ %{{y:.3f}}<extra></extra>")
    fig.update_xaxes(range=[-0.05, 1.05], dtick=0.1)
    return layout(fig, "α sweep (D-PACE, official sum normalisation)", "α (smoothing, 0–1)",
                  "τ = emitted per call (incl. bonus)", height=380)


def objectives_bar(summary: dict) -> go.Figure:
    """Final τ per objective (offline and online), mean ± sd over seeds."""
    rows = [r for r in summary.get("summary", []) if r["objective"] != "dpace" or r["alpha"] == 0.5]
    x = [r["label"] for r in rows]
    fig = go.Figure()
    colors = palette(2)
    fig.add_bar(x=x, y=[r["tau_offline_mean"] for r in rows], name="offline", marker_color=colors[0],
                error_y=dict(type="data", array=[r["tau_offline_std"] for r in rows]))
    if any(r.get("tau_online_mean") is not None for r in rows):
        # None (no bar) where an objective was not run online: a zero bar would read as τ = 0.
        fig.add_bar(x=x, y=[r.get("tau_online_mean") for r in rows], name="online (Spec-Bench dev)",
                    marker_color=colors[1],
                    error_y=dict(type="data", array=[r.get("tau_online_std") or 0 for r in rows]))
    fig.update_layout(barmode="group")
    fig.update_yaxes(range=tau_range(rows))
    return layout(fig, "τ per objective (mean ± sd over seeds; the axis starts near the lowest τ)", "objective",
                  "τ = emitted per call (incl. bonus)", height=380)


def tau_range(rows: list[dict]) -> list[float]:
    """A τ axis that starts where the data does: 1.10 vs 1.26 must not look equal on a 0-based axis."""
    lo = [r["tau_offline_mean"] - (r.get("tau_offline_std") or 0) for r in rows]
    lo += [r["tau_online_mean"] - (r.get("tau_online_std") or 0) for r in rows if r.get("tau_online_mean") is not None]
    hi = [r["tau_offline_mean"] + (r.get("tau_offline_std") or 0) for r in rows]
    hi += [r["tau_online_mean"] + (r.get("tau_online_std") or 0) for r in rows if r.get("tau_online_mean") is not None]
    if not lo:
        return [0, 1]
    pad = max(0.02, 0.15 * (max(hi) - min(lo)))
    return [max(0.0, min(lo) - pad), max(hi) + pad]


def chosen(summary: dict) -> dict | None:
    """D-PACE's chosen run: the α that was also evaluated online (the one carried forward), else α = 0.5,
    else the best offline τ among D-PACE runs."""
    runs = [r for r in summary.get("summary", []) if r["objective"] == "dpace"]
    if not runs:
        return None
    online = [r for r in runs if r.get("tau_online_mean") is not None]
    half = [r for r in runs if r.get("alpha") == 0.5]
    return (online or half or [max(runs, key=lambda r: r["tau_offline_mean"])])[0]


def _ci(d: dict, pct: bool = True) -> str:
    lo, hi = d.get("t_lo"), d.get("t_hi")
    if lo is None or hi is None or lo != lo or hi != hi:
        return f"{d.get('n', 0)} seed{'s' if d.get('n') != 1 else ''}, no interval"
    unit = "%" if pct else ""
    return f"95% CI {lo:+.1f}{unit} to {hi:+.1f}{unit}, {d['n']} seeds"


def conclusion(summary: dict) -> str:
    """One sentence from summary.json: the chosen D-PACE run against DFlash, offline and online, with
    its CPU speedup where measured."""
    c = chosen(summary)
    ref = next((r for r in summary.get("summary", []) if r["objective"] == "dflash"
                and (r.get("diff_vs_dflash_offline") or {}).get("mean") == 0), None)
    if c is None or ref is None:
        return "No D-PACE and DFlash rows in this summary to compare."
    rel = c.get("rel_pct_vs_dflash_offline") or {}
    # The baseline is the strongest DFlash run on the same chart, not the summary's reference (its intervals
    # are against that one, so they follow as the second clause).
    best = max((r for r in summary.get("summary", []) if r["objective"] == "dflash"), key=lambda r: r["tau_offline_mean"])
    if best is not ref:
        gap = 100 * (c["tau_offline_mean"] / best["tau_offline_mean"] - 1)
        out = (f"**{c['label']}** reaches τ = {c['tau_offline_mean']:.3f} offline against the best DFlash setting, "
               f"{best['label']}, at {best['tau_offline_mean']:.3f}: **{gap:+.1f}%**; against {ref['label']} "
               f"({ref['tau_offline_mean']:.3f}), the reference the seed intervals use, {rel.get('mean', float('nan')):+.1f}% "
               f"({_ci(rel)})")
    else:
        out = (f"**{c['label']}** reaches τ = {c['tau_offline_mean']:.3f} offline against {ref['label']}'s "
               f"{ref['tau_offline_mean']:.3f}: **{rel.get('mean', float('nan')):+.1f}%** ({_ci(rel)})")
    on = c.get("rel_pct_vs_dflash_online") or {}
    if c.get("tau_online_mean") is not None and on.get("n"):
        out += f"; online {c['tau_online_mean']:.3f} vs {ref['tau_online_mean']:.3f}, {on['mean']:+.1f}% ({_ci(on)})"
    if c.get("speedup_cpu_mean") is not None:
        x = c["speedup_cpu_mean"]
        out += (f". On this CPU it decodes at {x:.2f}× AR" + (": τ this close to 1 does not pay for the drafter's "
                                                           "forward — the gain is in acceptance, not yet in time"
                                                           if x < 1 else ""))
    return out + "."
