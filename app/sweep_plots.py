"""Pure figure builders for sweep summaries (engine.sweep.load_sweep_summary): dataframe in, plotly
figure out, no Streamlit calls. Speedup colours run from the app's "rejected" red (slower than
autoregressive) through white at 1× to its "accepted" green (faster)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.plots import COLORS, colorbar, layout
from engine.sweep import speedup_matrix

FACETS = ["pair", "verifier", "temperature", "max_new_tokens", "dtype", "prompt_set"]


def facet_values(df: pd.DataFrame) -> dict[str, list]:
    """Columns on which a heatmap must be sliced (more than one value in the sweep), with their values."""
    return {c: sorted(df[c].dropna().unique().tolist()) for c in FACETS
            if c in df.columns and df[c].nunique(dropna=True) > 1}


def policy_task_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per policy × task, pooled over shards: tokens/s (Σ tokens / Σ decode time), emitted per call incl.
    bonus (Σ emitted / Σ target calls), acceptance (Σ accepted / Σ drafted, excl. bonus), and speedup."""
    if df.empty:
        return pd.DataFrame()
    g = df.assign(accepted=df["accepted_per_call_excl_bonus"] * df["target_calls"]).groupby(["policy", "task"])
    out = g.agg(tasks=("task_id", "count"), prompts=("prompts", "sum"), new_tokens=("new_tokens", "sum"),
                decode_ms=("decode_ms", "sum"), target_calls=("target_calls", "sum"),
                drafted=("drafted_tokens", "sum"), accepted=("accepted", "sum"))
    out["tokens_per_s"] = out["new_tokens"] / (out["decode_ms"] / 1e3)
    out["emitted_per_call_incl_bonus"] = out["new_tokens"] / out["target_calls"]
    out["acceptance_rate"] = (out["accepted"] / out["drafted"]).where(out["drafted"] > 0)
    sp = speedup_matrix(df)
    out["speedup"] = [sp.at[p, t] if not sp.empty and p in sp.index and t in sp.columns else
                      (1.0 if p == "autoregressive" else float("nan")) for p, t in out.index]
    return out.drop(columns=["accepted", "decode_ms"]).reset_index()


def speedup_heatmap(df: pd.DataFrame, title: str = "Speedup over autoregressive (tokens/s ratio)") -> go.Figure:
    """Heatmap policy × task of speedup; filter `df` to one slice of facet_values() first."""
    m = speedup_matrix(df)
    fig = go.Figure()
    if not m.empty:
        text = [[f"{v:.2f}×" if pd.notna(v) else "" for v in row] for row in m.to_numpy()]
        fig.add_heatmap(z=m.to_numpy(), x=[str(c) for c in m.columns], y=[str(i) for i in m.index], text=text,
                        texttemplate="%{text}", zmid=1.0, colorbar=colorbar("speedup over autoregressive (×)"),
                        colorscale=[[0, COLORS["rejected"]], [0.5, "#ffffff"], [1, COLORS["accepted"]]],
                        hovertemplate="policy %{y}<br>task %{x}<br>speedup %{z:.3f}×<extra></extra>")
    fig.update_yaxes(autorange="reversed")
    return layout(fig, title, "task", "policy", height=max(300, 90 + 45 * max(1, len(m.index))), legend=False)
