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
