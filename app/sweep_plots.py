"""Pure figure builders for sweep summaries (engine.bench.sweep_summary.load_sweep_summary): dataframe in, plotly
figure out, no Streamlit calls. Speedup colours run from the app's "rejected" red (slower than
autoregressive) through white at 1× to its "accepted" green (faster).

Rows are *settings* (engine.bench.sweep_summary.with_settings): the window policy, prefixed with the drafter
(`lookup:n=10,ngram=2 · matchlen:…`) once a sweep has model-free drafters, so a drafter × window
grid reads as one table."""

from __future__ import annotations

from typing import Callable

import pandas as pd
import plotly.graph_objects as go

from app.plots import CELL_TEXT, COLORS, colorbar, layout, ratio_scale
from engine.bench.sweep_grid import AUTOREGRESSIVE, MODEL_DRAFTER, NO_DRAFTER
from engine.bench.sweep_summary import speedup_matrix, with_settings
from engine.metrics import ACCEPTANCE_RATE, ACCEPTED_PER_CALL, EMITTED_PER_CALL

FACETS = ["pair", "verifier", "temperature", "max_new_tokens", "dtype", "prompt_set"]
KEYS = ["setting", "drafter", "policy"]  # setting names the other two; they stay as columns to filter on


def facet_values(df: pd.DataFrame) -> dict[str, list]:
    """Columns on which a heatmap must be sliced (more than one value in the sweep), with their values."""
    return {c: sorted(df[c].dropna().unique().tolist()) for c in FACETS
            if c in df.columns and df[c].nunique(dropna=True) > 1}


def _pooled(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Sums per group and the ratios of sums: tokens/s (Σ tokens / Σ decode time), emitted per call incl.
    bonus (Σ emitted / Σ target calls), acceptance (Σ accepted / Σ drafted, excl. bonus)."""
    g = df.assign(accepted=df[ACCEPTED_PER_CALL] * df["target_calls"]).groupby(by)
    out = g.agg(tasks=("task_id", "count"), prompts=("prompts", "sum"), new_tokens=("new_tokens", "sum"),
                decode_ms=("decode_ms", "sum"), target_calls=("target_calls", "sum"),
                drafted=("drafted_tokens", "sum"), accepted=("accepted", "sum"))
    out["tokens_per_s"] = out["new_tokens"] / (out["decode_ms"] / 1e3)
    out[EMITTED_PER_CALL] = out["new_tokens"] / out["target_calls"]
    out[ACCEPTANCE_RATE] = (out["accepted"] / out["drafted"]).where(out["drafted"] > 0)
    return out


def _lookup(sp: pd.DataFrame, setting: str, col) -> float:
    if not sp.empty and setting in sp.index and col in sp.columns:
        return sp.at[setting, col]
    return 1.0 if setting == AUTOREGRESSIVE else float("nan")


def policy_task_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per setting (drafter × policy) × task, pooled over shards: the `_pooled` ratios and the speedup."""
    if df.empty:
        return pd.DataFrame()
    df = with_settings(df)
    out = _pooled(df, KEYS + ["task"])
    sp = speedup_matrix(df)
    out["speedup"] = [_lookup(sp, s, t) for s, _, _, t in out.index]
    return out.drop(columns=["accepted", "decode_ms"]).reset_index()


def setting_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per setting (drafter × policy), pooled over every task and shard of `df`: the `_pooled` ratios and the
    speedup over the autoregressive tasks on the same shards — one line per drafter × window choice."""
    if df.empty:
        return pd.DataFrame()
    df = with_settings(df).assign(all_tasks="all")
    out = _pooled(df, KEYS)
    sp = speedup_matrix(df, columns="all_tasks")
    out["speedup"] = [_lookup(sp, s, "all") for s, _, _ in out.index]
    return out.drop(columns=["accepted", "decode_ms"]).reset_index().sort_values(
        "speedup", ascending=False, na_position="last", ignore_index=True)


def speedup_heatmap(df: pd.DataFrame, title: str = "Speedup over autoregressive (tokens/s ratio)") -> go.Figure:
    """Heatmap setting (drafter × policy) × task of speedup; filter `df` to one slice of facet_values() first."""
    df = with_settings(df)
    m = speedup_matrix(df)
    fig = go.Figure()
    if not m.empty:
        text = [[f"{v:.2f}×" if pd.notna(v) else "" for v in row] for row in m.to_numpy()]
        z = m.to_numpy(dtype=float)
        # A ratio cannot be negative: the bar runs from 0 (or the smallest value) to the largest, white at 1×
        # wherever 1 falls inside it (zmid would mirror the top around 1 and print −4…6).
        lo, hi = min(0.0, float(pd.Series(z.ravel()).min())), max(1.0, float(pd.Series(z.ravel()).max()))
        mid = (1.0 - lo) / (hi - lo) if hi > lo else 0.5
        fig.add_heatmap(z=z, x=[str(c) for c in m.columns], y=[str(i) for i in m.index], text=text,
                        texttemplate="%{text}", zmin=lo, zmax=hi, colorbar=colorbar("speedup over autoregressive (×)"),
                        colorscale=ratio_scale(mid), textfont=dict(color=CELL_TEXT),  # red–white–blue, never red–green
                        hovertemplate="%{y}<br>task %{x}<br>speedup %{z:.3f}×<extra></extra>")
    fig.update_yaxes(autorange="reversed")
    ylabel = "drafter · policy" if (~df["drafter"].isin([NO_DRAFTER, MODEL_DRAFTER])).any() else "policy"
    return layout(fig, title, "task", ylabel, height=max(300, 90 + 45 * max(1, len(m.index))), legend=False)


def conclusion(view: pd.DataFrame, tasks_table: pd.DataFrame | None = None,
               link: Callable[[str, str | None], str | None] | None = None) -> str:
    """One or two sentences: the best drafter × policy pooled over tasks and its speedup, the tasks where
    it does best and worst; where no setting beats autoregressive, say so. `link(setting, task)` (task None:
    pooled) gives a figure's URL on the Speedups page, or None to print it plain."""

    def fig(x: float, setting: str, task: str | None = None) -> str:
        url = link(setting, task) if link else None
        return f"[{x:.2f}×]({url})" if url else f"{x:.2f}×"

    settings = setting_table(view)
    spec = settings[settings["policy"] != AUTOREGRESSIVE] if "policy" in settings else settings
    spec = spec[spec["speedup"].notna()] if len(spec) else spec
    if spec.empty:
        return "This slice has no speculative setting with an autoregressive baseline on the same prompts."
    best = spec.iloc[0]
    name = f"**{best['drafter']} × {best['policy']}**"
    per = policy_task_table(view)
    per = per[(per["drafter"] == best["drafter"]) & (per["policy"] == best["policy"]) & per["speedup"].notna()]
    span = ""
    if len(per) > 1:
        lo, hi = per.loc[per["speedup"].idxmin()], per.loc[per["speedup"].idxmax()]
        span = (f", from {fig(lo['speedup'], best['setting'], lo['task'])} on {lo['task']} to "
                f"{fig(hi['speedup'], best['setting'], hi['task'])} on {hi['task']}")
    n_tasks = view["task"].nunique()
    if best["speedup"] >= 1:
        return f"Best setting: {name} at **{fig(best['speedup'], best['setting'])}** autoregressive over {n_tasks} tasks{span}."
    return (f"No setting beats autoregressive decoding in this slice: the best, {name}, runs at "
            f"**{fig(best['speedup'], best['setting'])}** over {n_tasks} tasks{span} — the draft's forwards cost more than the "
            "tokens they save; compare model-free drafters (no draft forward) or shorter windows.")
