"""Per-position acceptance across runs, as serving engines' dashboards show it (vLLM's
"Per-position acceptance rate"), beside mean acceptance length and acceptance rate.

    rate(i) = drafting steps that accepted position i ÷ drafting steps        (vLLM, i = 1 … K)

computed by engine.interop.diagnose.counts_of over each trace's drafting steps, so an adaptive window's
short steps count as not accepting the positions they never drafted — the same definition vLLM's
counters give. Pure: entries in, a long frame and a plotly figure out.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.plots import layout, palette
from engine.interop.diagnose import counts_of, drafting_steps, per_step_known

MAX_POS = 10  # beyond ~10 positions every rate is near 0: the chart stays readable


def frame(entries: dict, labels: list[str], titles: dict[str, str] | None = None) -> pd.DataFrame:
    """Long form: one row per (trace, position) with its rate, plus the trace's mean acceptance length
    (1 + accepted ÷ drafting steps, bonus included) and acceptance rate (accepted ÷ drafted)."""
    rows = []
    for k in labels:
        e = entries[k]
        if not e.info.get("draft") or "window" in ((e.trace.header.get("imported") or {}).get("lacks") or []):
            continue
        if not per_step_known(e.trace):  # totals only: a per-position line would be an even split, not data
            continue
        m = counts_of(drafting_steps(e.trace), True)
        for i, r in enumerate(m["per_position_rate"][:MAX_POS], start=1):
            rows.append({"label": k, "series": (titles or {}).get(k, k), "position": i, "rate": r,
                         "mean acceptance length": m["mean_acceptance_length"],
                         "acceptance rate": m["draft_acceptance_rate"]})
    return pd.DataFrame(rows, columns=["label", "series", "position", "rate", "mean acceptance length",
                                       "acceptance rate"])


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per trace: its mean acceptance length and acceptance rate (the chart's companions)."""
    cols = ["series", "mean acceptance length", "acceptance rate"]
    return df.drop_duplicates("label")[cols].rename(columns={"series": "Run"}).reset_index(drop=True)


def overlay(df: pd.DataFrame) -> go.Figure:
    """One line per trace: share of drafting steps that accepted each position."""
    fig = go.Figure()
    names = list(dict.fromkeys(df["series"]))
    for name, color in zip(names, palette(len(names))):
        g = df[df["series"] == name]
        fig.add_scatter(x=g["position"], y=g["rate"], name=name, mode="lines+markers", line=dict(color=color),
                        hovertemplate="position %{x}<br>accepted in %{y:.1%} of drafting steps<extra></extra>")
    fig.update_yaxes(range=[0, 1], tickformat=".0%")
    fig.update_xaxes(dtick=1)
    fig = layout(fig, "Per-position acceptance", "position in the drafted block",
                 "drafting steps accepting it", height=320, legend=True)
    # Legend under the plot: long run titles would squeeze it to a sliver at the side.
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.25, yanchor="top"),
                      height=320 + 22 * len(names), margin=dict(b=40 + 22 * len(names)))
    return fig


def totals_only(entries: dict, labels: list[str]) -> list[str]:
    """The chosen traces that keep totals only (no per-step or per-position counts): they have no
    per-position line, and the page says so rather than draw one from an even split."""
    return [k for k in labels if entries[k].info.get("draft") and not per_step_known(entries[k].trace)]
