"""The Windows page's figures (and an imported run's accepted-length distribution): speedup against the
window, the verify cost curves, accepted-length distributions and ECDFs, the oracle ÷ best-fixed ratios,
the gap each policy closes and the ceiling lines. Pure builders like app.plots, through its `layout`,
colour map and palette.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.plots import COLORS, layout, palette


def speedup_vs_window(fixed: pd.DataFrame, x: str, y: str, oracle: float | None = None,
                      adaptive: pd.DataFrame | None = None, theory: pd.DataFrame | None = None,
                      group: str | None = None) -> go.Figure:
    """Fixed windows as a line (one per `group`), the oracle as a dashed line, adaptive policies as
    markers at their mean window, and the i.i.d. closed form as a dotted curve. Every series is a
    legend entry (no text on the plot, where it would sit on the data)."""
    fig = go.Figure()
    groups = [(None, fixed)] if group is None or group not in fixed else list(fixed.groupby(group, sort=False))
    n_adaptive = 0 if adaptive is None else len(adaptive)
    colors = palette(len(groups) + n_adaptive)
    for i, (g, df) in enumerate(groups):
        fig.add_scatter(x=df[x], y=df[y], mode="lines+markers", name=f"fixed γ{'' if g is None else f' · {g}'}",
                        line=dict(color=colors[i], width=2))
    if theory is not None and len(theory):
        fig.add_scatter(x=theory[x], y=theory[y], mode="lines", name="i.i.d. theory",
                        line=dict(color="#777777", dash="dot"))
    if oracle is not None and len(fixed):
        lo, hi = float(fixed[x].min()), float(fixed[x].max())
        fig.add_scatter(x=[lo, hi], y=[oracle, oracle], mode="lines", name=f"oracle {oracle:.2f}×",
                        line=dict(color=COLORS["bonus"], dash="dash"), hoverinfo="skip")
    symbols = ["diamond", "square", "triangle-up", "star", "cross", "x", "pentagon", "hexagon"]
    for i, (_, row) in enumerate((adaptive if adaptive is not None else pd.DataFrame()).iterrows()):
        # One trace per policy (legend + hover), no text labels: adaptive policies often coincide.
        fig.add_scatter(x=[row[x]], y=[row[y]], mode="markers", name=str(row["policy"]),
                        marker=dict(symbol=symbols[i % len(symbols)], size=12, color=colors[len(groups) + i],
                                    line=dict(width=1, color="#222222")),
                        hovertemplate=f"{row['policy']}<br>mean window %{{x:.2f}}<br>speedup %{{y:.3f}}<extra></extra>")
    fig.update_xaxes(dtick=1)
    return layout(fig, "Speedup vs window", "window γ (drafted tokens per call)", "speedup (× AR)",
                  height=420)


def cost_curve(df: pd.DataFrame, x: str = "gamma") -> go.Figure:
    """Cost of one speculative step by window, one line per column (e.g. verify v(γ), step γc + v(γ)),
    in units of one single-token target forward — as the cost model prices it."""
    fig = go.Figure()
    cols = [c for c in df.columns if c != x]
    for col, color in zip(cols, palette(len(cols))):
        fig.add_scatter(x=df[x], y=df[col], mode="lines+markers", name=col, line=dict(color=color))
    fig.update_xaxes(dtick=1)
    return layout(fig, "Cost of one speculative step", "window γ (drafted tokens per call)",
                  "cost (single-token target forwards)", height=340)


def verify_curves(df: pd.DataFrame) -> go.Figure:
    """t(k)/t(1) by forward width k, one line per weights path (app.cost_paths.curve_frame), with the
    diagonal t(k) = k·t(1) that k separate one-token forwards would cost."""
    fig = go.Figure()
    paths = list(dict.fromkeys(df["path"]))
    for (path, c) in zip(paths, palette(len(paths))):
        g = df[df["path"] == path]
        fig.add_scatter(x=g["k"], y=g["t(k)/t(1)"], mode="lines+markers", line=dict(color=c),
                        name=f"{path} (c = {g['c'].iloc[0]:.2f}, t(1) = {g['t(1) ms'].iloc[0]:.0f} ms)")
    if len(df):
        k = sorted(set(df["k"]))
        fig.add_scatter(x=k, y=k, mode="lines", name="k one-token forwards", line=dict(color="#999", dash="dot"))
    fig.update_xaxes(dtick=1)
    return layout(fig, "Verify cost by weights path", "tokens in one target forward (k = drafts + 1)",
                  "t(k) / t(1)", height=340)


def accepted_distribution(df: pd.DataFrame, x: str = "emitted", color: str = "policy", ecdf: bool = False) -> go.Figure:
    """Distribution of tokens per verify call by series: grouped histogram (discrete, dtick 1) or ECDF.
    One distinct colour per series; the legend (right of the plot) sets the figure's height."""
    fig = go.Figure()
    label = "emitted tokens per call (incl. bonus)" if x == "emitted" else "accepted drafts per call (excl. bonus)"
    groups = list(df.groupby(color, sort=False))
    for (name, g), c in zip(groups, palette(len(groups))):
        if ecdf:
            v = g[x].sort_values().reset_index(drop=True)
            fig.add_scatter(x=v, y=(v.index + 1) / len(v), mode="lines", line_shape="hv", name=str(name),
                            line=dict(color=c, width=2))
        else:
            share = g[x].value_counts(normalize=True).sort_index()
            fig.add_bar(x=share.index, y=share.values, name=str(name), marker_color=c,
                        hovertemplate=f"{name}<br>%{{x}} tokens: %{{y:.1%}} of calls<extra></extra>")
    fig.update_xaxes(dtick=1)
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02] if ecdf else None)
    return layout(fig, "Tokens per verify call, by trace", label,
                  "cumulative share of calls" if ecdf else "share of calls", height=420)


def accept_run_ecdf(positions: pd.DataFrame, clip: int = 32) -> go.Figure:
    """ECDF of the accepted run A(j) (excl. bonus) over every output position, one line per task:
    the per-step variability a fixed window cannot follow. Runs above `clip` are drawn at `clip`."""
    fig = go.Figure()
    groups = list(positions.groupby("task", sort=True))
    for (task, g), c in zip(groups, palette(len(groups))):
        v = g["accept_run"].clip(upper=clip).sort_values().reset_index(drop=True)
        fig.add_scatter(x=v, y=(v.index + 1) / len(v), mode="lines", line_shape="hv", name=str(task),
                        line=dict(color=c, width=2))
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    return layout(fig, "Accepted run A(j) from each position, by task", f"A(j) (runs ≥ {clip} drawn at {clip})",
                  "cumulative share of positions", height=380)


def ratio_bars(df: pd.DataFrame, x: str, y: str, color: str | None = None) -> go.Figure:
    """Oracle ÷ best-fixed ratio per task as bars, with 1× (no gain) as a reference line."""
    fig = go.Figure()
    groups = [(None, df)] if color is None or color not in df else list(df.groupby(color, sort=False))
    for (g, d), c in zip(groups, palette(len(groups))):
        fig.add_bar(x=d[x], y=d[y], name=f"cost {g}" if g is not None else "", marker_color=c)
    fig.add_hline(y=1.0, line_color="#555555", line_dash="dot")
    fig.update_layout(barmode="group")
    return layout(fig, "Oracle ÷ best fixed window", x, "speedup ratio (×)", height=340,
                  legend=color is not None)


def gap_closed_bars(df: pd.DataFrame, x: str = "label", y: str = "position", hover: str | None = "policy",
                    title: str = "Gap closed by each adaptive policy") -> go.Figure:
    """How far each adaptive policy closes the oracle's gap over the best fixed window: one bar per
    policy, 0 = best fixed γ, 1 = the oracle, negative = worse than the best fixed window. Bars take
    the colours the same policies' markers get in `speedup_vs_window` (after its one fixed-γ line), so
    a policy looks the same in both charts; the oracle line is drawn dashed in the bonus colour there
    and here."""
    colors = palette(len(df) + 1)[1:]
    names = df[hover] if hover and hover in df else df[x]
    fig = go.Figure(go.Bar(x=df[x], y=df[y], marker_color=colors, customdata=names,
                           hovertemplate="%{customdata}<br>gap closed %{y:.2f}<extra></extra>"))
    fig.add_hline(y=0.0, line_color="#555555", line_dash="dot")
    fig.add_hline(y=1.0, line_color=COLORS["bonus"], line_dash="dash")
    lo = min(0.0, float(df[y].min())) if len(df) and df[y].notna().any() else 0.0
    fig.update_yaxes(range=[lo - 0.1, 1.1])  # always show both ends of the scale, best fixed and oracle
    return layout(fig, title, "adaptive policy",
                  "gap closed (0 = best fixed γ, 1 = oracle)", height=340, legend=False)


def ceiling_lines(df: pd.DataFrame) -> go.Figure:
    """Simulated speedup of each rule against the draft-cost factor f (t_d → f·t_d), one line per rule.
    The oracle is drawn in the bonus colour, like the oracle line of `speedup_vs_window`."""
    fig = go.Figure()
    groups = list(df.groupby("rule", sort=False))
    colors = iter(palette(len(groups)))
    for rule, g in groups:
        color = COLORS["bonus"] if rule == "oracle" else next(colors)
        fig.add_scatter(x=g["f"], y=g["speedup"], mode="lines+markers", name=str(rule),
                        line=dict(color=color, dash="dash" if rule == "oracle" else "solid"),
                        hovertemplate=f"{rule}<br>f %{{x}}<br>speedup %{{y:.3f}}<extra></extra>")
    fig.add_hline(y=1.0, line_color="#555555", line_dash="dot")
    fig.update_xaxes(autorange="reversed")  # cheaper drafts to the right
    return layout(fig, "PACER vs the oracle as the draft gets cheaper", "draft cost factor f (t_d → f·t_d)",
                  "simulated speedup over autoregressive (×)", height=360)
