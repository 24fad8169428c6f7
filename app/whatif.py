"""What if the window were a confidence threshold and a cap K? Every (threshold, K) of a grid replayed
over the page's reference runs (engine.offline.analysis.window_table, exact for greedy references) and
priced by the page's cost model — by default the verify curve this pair's decode traces paid (in-run),
else the reference's measured curve — against the best fixed window on the same footing.

Pure except `compute` (cached): a window table in, a grid frame, a heatmap and a sentence out."""

from __future__ import annotations

import re

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from app.plots import CELL_TEXT, SEQUENTIAL, colorbar, layout

THRESHOLDS = (0.2, 0.4, 0.6, 0.8, 0.9)
KS = (2, 4, 6, 8, 12)
SPEC = "confidence:threshold={t},max={k}"
_PARSE = re.compile(r"confidence:threshold=([0-9.]+),max=(\d+)")


def specs(thresholds=THRESHOLDS, ks=KS) -> list[str]:
    return [SPEC.format(t=t, k=k) for t in thresholds for k in ks]


@st.cache_data(max_entries=8, show_spinner="Replaying the threshold × K grid…")
def compute(_refs: list, key: tuple, cost) -> pd.DataFrame:
    from engine.offline import analysis

    return analysis.window_table(_refs, cost, gammas=range(1, max(KS) + 1), policies=specs(), by_task=False)


def grid(wt: pd.DataFrame) -> pd.DataFrame:
    """threshold, K, speedup (vs AR), over best fixed — one row per replayed grid policy (task 'all')."""
    g = wt[wt["task"] == "all"]
    best = float(g.loc[g["kind"] == "fixed", "speedup"].max())
    rows = []
    for r in g.itertuples(index=False):
        m = _PARSE.fullmatch(str(r.policy))
        if m:
            rows.append({"threshold": float(m.group(1)), "K": int(m.group(2)), "speedup": float(r.speedup),
                         "over best fixed": float(r.speedup) / best})
    return pd.DataFrame(rows, columns=["threshold", "K", "speedup", "over best fixed"])


def heatmap(cells: pd.DataFrame, cost_label: str) -> go.Figure:
    m = cells.pivot(index="threshold", columns="K", values="speedup").sort_index()
    fig = go.Figure(go.Heatmap(z=m.to_numpy(), x=[str(k) for k in m.columns], y=[f"{t:g}" for t in m.index],
                               text=[[f"{v:.2f}×" for v in row] for row in m.to_numpy()], texttemplate="%{text}",
                               textfont=dict(color=CELL_TEXT), colorscale=SEQUENTIAL,
                               colorbar=colorbar("speedup over autoregressive (×)"),
                               hovertemplate="threshold %{y} · K = %{x}<br>%{z:.3f}× AR<extra></extra>"))
    return layout(fig, f"What if: confidence threshold × cap K ({cost_label})", "cap K (most drafted tokens per call)",
                  "confidence threshold", height=320, legend=False)


def sentence(cells: pd.DataFrame, best_fixed: float, best_gamma: int) -> str:
    if cells.empty:
        return "No grid cell was replayed (the confidence rule needs greedy references with recorded draft signals)."
    top = cells.loc[cells["speedup"].idxmax()]
    verdict = "beats" if top["speedup"] > best_fixed * 1.005 else "does not beat"
    return (f"Best cell: threshold {top['threshold']:g}, K = {int(top['K'])} at {top['speedup']:.2f}× AR, which "
            f"{verdict} the best fixed window (γ = {best_gamma}, {best_fixed:.2f}× AR) under the same costs.")
