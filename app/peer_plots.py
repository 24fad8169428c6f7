"""The peers result (`python -m engine peers`) as a chart: pure functions of the peers dataframe
(app.peer_view.peers_frame), Streamlit-free, tested on a committed small result."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.plots import layout, palette


def speedup_bars(df: pd.DataFrame) -> go.Figure:
    """Speedup over each engine's own AR, one bar per (engine, config), coloured by engine; each bar's
    label is its tokens/s, so the absolute speeds stand beside the ratios. 1× marked."""
    fig = go.Figure()
    engines = list(dict.fromkeys(df["engine"]))
    for eng, c in zip(engines, palette(len(engines))):
        d = df[df["engine"] == eng]
        fig.add_bar(x=[f"{eng} · {k}" for k in d["config"]], y=d["speedup vs own AR"], name=eng, marker_color=c,
                    text=[f"{v:.1f} tok/s" for v in d["tokens/s"]], textposition="outside",
                    hovertemplate="%{x}: %{y:.2f}× its AR, %{text}<extra></extra>")
    fig.add_hline(y=1.0, line_color="#555555", line_dash="dot")
    top = df["speedup vs own AR"].max() if len(df) else 1.0
    fig.update_yaxes(range=[0, max(1.2, float(top) * 1.2)])
    return layout(fig, "Speedup over each engine's own autoregressive decoding (labels: tokens/s)",
                  "engine · config", "speedup over own AR (×)", height=360)


def position_lines(df: pd.DataFrame) -> go.Figure:
    """Acceptance rate at each draft position, one line per run (engine.interop.same_pair.position_rows as a
    frame: run, source, position, rate); the imported run drawn thick, the lab's own thin, so the drop of the
    engine's run reads against ours on the same pair."""
    fig = go.Figure()
    runs = list(dict.fromkeys(df["run"]))
    for run, c in zip(runs, palette(len(runs))):
        d = df[df["run"] == run]
        imported = bool((d["source"] == "imported").any())
        fig.add_scatter(x=d["position"], y=d["rate"], mode="lines+markers", name=run + (" (imported)" if imported else ""),
                        line={"color": c, "width": 4 if imported else 1.5, "dash": "solid" if imported else "dot"},
                        hovertemplate="position %{x}: %{y:.1%} of drafting steps accepted it<extra>" + run + "</extra>")
    fig.update_yaxes(range=[0, 1.05], tickformat=".0%")
    fig.update_xaxes(dtick=1)
    return layout(fig, "Acceptance rate at each draft position: the imported run beside the lab's own runs",
                  "draft position", "drafting steps that accepted it", height=340)
