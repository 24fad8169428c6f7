"""Pure figure builders: dataframe in, plotly figure out. No Streamlit calls, so tests assert on
`fig.to_dict()` and every page draws the same thing the same way.

One colour map for every token fate, used by charts and by the token strips (app.tokens):
accepted green, rejected red, correction orange, bonus blue, pending (drafted but never checked)
grey — the Leviathan et al. / SpeculatoViz convention, with orange for corrections so blue can mean
the free bonus token. Pages pass `theme=None` to st.plotly_chart so Streamlit keeps these colours.

Colour is never the only cue, and red never stands against green alone:
- the green is a bluish green and the red a vermillion (Okabe–Ito / Tol), far apart in lightness and hue
  for protan and deutan readers too (tests/system/app/test_last_mile.py simulates both, ΔE ≥ 20 for
  every pair of fates), and the bars of each fate carry their own hatch (`PATTERNS`, the token strips'
  marks: ✗ struck → x, ↻ → /, + → +, dashed → dots);
- text drawn on a chart is at least 4.5:1 against what is behind it: the template's axis and legend
  text on white, and numbers printed in heatmap cells in `CELL_TEXT` over scales light enough for it
  (`RATIO_SCALE`, `SEQUENTIAL`; no dark end).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from app.fmt import words

COLORS = {
    "accepted": "#009e73",
    "rejected": "#cc3311",
    "correction": "#ff8c1a",
    "bonus": "#1f6fd1",
    "pending": "#b8b8b8",
    # A plain target step (nothing drafted, or every draft trimmed): the target's own token. Neutral
    # slate, so "bonus" keeps meaning the free token after a fully accepted block.
    "autoregressive": "#5b6776",
}
# Each fate's hatch in bar charts: the second cue besides colour (the token strips' marks, app.tokens.CUES).
PATTERNS = {"accepted": "", "rejected": "x", "pending": ".", "correction": "/", "bonus": "+", "autoregressive": "-"}
# Numbers printed in heatmap cells, and the scales under them: every stop ≥ 4.5:1 against CELL_TEXT.
CELL_TEXT = "#1a1a1a"
RATIO_LOW, RATIO_MID, RATIO_HIGH = "#e07b67", "#ffffff", "#6aa6d4"  # a ratio: below 1 red, 1 white, above blue


def ratio_scale(mid: float) -> list[list]:
    """A diverging red–white–blue scale (never red–green) with white at `mid` (where 1× falls on the bar)."""
    return [[0, RATIO_LOW], [mid, RATIO_MID], [1, RATIO_HIGH]]


SEQUENTIAL = [[0, "#f4f8fc"], [1, RATIO_HIGH]]  # more is bluer, light enough for CELL_TEXT throughout
# Policies and series that are not token fates (lines in comparison charts): a colour-blind-safe cycle
# (Tol's muted scheme); past eight series, Plotly's Dark24 so no two series share a colour.
SERIES = ["#332288", "#117733", "#44AA99", "#88CCEE", "#DDCC77", "#CC6677", "#AA4499", "#882255"]
MANY = ["#2E91E5", "#E15F99", "#1CA71C", "#FB0D0D", "#DA16FF", "#222A2A", "#B68100", "#750D86", "#EB663B",
        "#511CFB", "#00A08B", "#FB00D1", "#FC0080", "#B2828D", "#6C7C32", "#778AAE", "#862A16", "#A777F1",
        "#620042", "#1616A7", "#DA60CA", "#6C4516", "#0D2A63", "#AF0038"]
TEMPLATE = "plotly_white"
LEGEND_ROW_PX = 22  # one vertical legend entry
MARGIN = dict(l=60, r=20, t=56, b=56)
TITLE_CHAR_PX = 7.5  # an axis title's character at Plotly's 14 px default font, on the wide side


def palette(n: int) -> list[str]:
    """n distinct qualitative colours (cycling only beyond 24 series, where a chart should facet instead)."""
    base = SERIES if n <= len(SERIES) else MANY
    return [base[i % len(base)] for i in range(n)]


def layout(fig: go.Figure, title: str, x: str, y: str, height: int = 340, legend: bool | None = None) -> go.Figure:
    """The one figure style every chart goes through.

    - Title top-left in the top margin; the legend, when shown, is vertical *outside* the plot on the
      right (Plotly grows the right margin to fit it), so it can cover neither the title nor the data.
    - Height grows with the number of legend entries, so the legend never scrolls and the plot area
      never shrinks to a sliver.
    - Axis titles are passed explicitly (with units); colour bars get their own titles at the call site.
    - A y-axis title longer than the plot is tall is broken over two lines (`fit_axis_title`): run along
      the axis it would reach up into the chart title (the Windows charts did).
    """
    entries = sum(1 for t in fig.data if t.showlegend is not False and t.name)
    show = entries > 1 if legend is None else legend
    height = max(height, 110 + LEGEND_ROW_PX * entries) if show else height
    fig.update_layout(template=TEMPLATE, height=height, showlegend=show,
                      title=dict(text=title, x=0, xanchor="left", y=0.98, yanchor="top", yref="container",
                                 font=dict(size=15)),
                      margin=MARGIN,
                      legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top",
                                  bgcolor="rgba(255,255,255,0)", itemclick="toggle"))
    fig.update_xaxes(title_text=x, automargin=True)
    fig.update_yaxes(title_text=fit_axis_title(y, height - MARGIN["t"] - MARGIN["b"]), automargin=True)
    return fig


def fit_axis_title(text: str, room_px: float) -> str:
    """`text` on one line when it fits `room_px` (the plot's height, for a y title), else broken at the
    space that balances two lines."""
    if not text or "<br>" in text or len(text) * TITLE_CHAR_PX <= room_px or " " not in text:
        return text
    words = text.split(" ")
    cut = min(range(1, len(words)), key=lambda i: max(len(" ".join(words[:i])), len(" ".join(words[i:]))))
    return " ".join(words[:cut]) + "<br>" + " ".join(words[cut:])


def colorbar(title: str) -> dict:
    """A colour bar titled in words (read along the bar), for heatmaps."""
    return dict(title=dict(text=title, side="right"), thickness=12)


def rgba(hex_color: str, alpha: float) -> str:
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


# ---------------------------------------------------------------- replay


def step_timeline(steps: pd.DataFrame, cursor: int | None = None) -> go.Figure:
    """Stacked tokens per verify call: accepted drafts, the rejected one, the pending ones (drafted after
    the rejection, never checked: grey, as in the token strips), then the correction or bonus token; a
    plain target step (nothing drafted) is one token in its own neutral colour. The drafted window is a
    step line, the replayed step a cursor. `steps` is one request (`app.frames.steps_frame`)."""
    x = steps["step"]
    ar = steps["window"].eq(0)
    fig = go.Figure()
    for name, y in (("accepted", steps["accepted"]), ("rejected", steps["rejected"]), ("pending", steps["pending"]),
                    ("correction", steps["has_correction"].astype(int)),
                    ("bonus", (steps["has_bonus"] & ~ar).astype(int)),
                    ("autoregressive", (ar & steps["emitted"].gt(0)).astype(int))):
        if name == "autoregressive" and not y.any():
            continue
        fig.add_bar(x=x, y=y, name=name, marker=dict(color=COLORS[name], pattern_shape=PATTERNS[name]),
                    hovertemplate=f"step %{{x}}<br>{name}: %{{y}}<extra></extra>")
    fig.add_scatter(x=x, y=steps["window"], name="window (drafted)", mode="lines", line_shape="hvh",
                    line=dict(color="#222222", width=1.5, dash="dot"))
    fig.update_layout(barmode="stack", bargap=0.1)
    if cursor is not None:
        fig.add_vline(x=cursor, line_color="#222222", line_width=2, opacity=0.6)
    return layout(fig, "Tokens per verify call", "step (verify call)", "tokens per call")


def position_heatmap(positions: pd.DataFrame, cursor: int | None = None, steps: pd.DataFrame | None = None) -> go.Figure:
    """Accept probability h_i = min(1, p/q) of each verified draft token: rows are steps, columns are
    the token's position in the drafted block. Grey: drafted after the rejection (pending: the verifier
    computed h there, but it decided nothing) or, given `steps` (the request's steps frame), a whole row
    for a step that drafted nothing, so no neighbour's colour spreads over it. One request."""
    checked = positions.assign(accept_prob=positions["accept_prob"].where(positions["fate"] != "pending"))
    grid = checked.pivot_table(index="step", columns="pos", values="accept_prob", aggfunc="first", dropna=False)
    fates = positions.pivot_table(index="step", columns="pos", values="fate", aggfunc="first")
    if steps is not None and len(steps):
        grid = grid.reindex(sorted(set(steps["step"]) | set(grid.index)))
        fates = fates.reindex(grid.index)
        empty = [st for st in grid.index if st not in set(positions["step"])]
        fates.loc[empty] = "nothing drafted"
    fig = go.Figure(go.Heatmap(z=grid.values, x=list(grid.columns), y=list(grid.index), zmin=0, zmax=1,
                               colorscale=[[0, COLORS["rejected"]], [0.5, "#f2f2f2"], [1, COLORS["accepted"]]],
                               customdata=fates.reindex_like(grid).values,
                               colorbar=colorbar("accept probability h = min(1, p/q)"),
                               hovertemplate="step %{y}, position %{x}<br>accept prob %{z:.3f}<br>%{customdata}"
                                             "<extra></extra>"))
    pend = fates.reindex_like(grid)
    grey = pend.isin(["pending", "nothing drafted"]).astype(float).where(pend.isin(["pending", "nothing drafted"]))
    if grey.notna().any().any():  # never-checked drafts and steps with no draft: grey cells, as in the strips
        fig.add_heatmap(z=grey.values, x=list(grid.columns), y=list(grid.index), zmin=0, zmax=1, showscale=False,
                        colorscale=[[0, COLORS["pending"]], [1, COLORS["pending"]]], name="not checked",
                        customdata=pend.values,
                        hovertemplate="step %{y}, position %{x}<br>%{customdata}: no accept decision<extra></extra>")
    if cursor is not None:
        fig.add_hline(y=cursor, line_color="#222222", line_width=1.5, opacity=0.7)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(dtick=1)
    return layout(fig, "Accept probability by block position", "position in drafted block", "step (verify call)",
                  height=max(340, min(700, 90 + 14 * len(grid.index))))


def position_rate(positions: pd.DataFrame) -> go.Figure:
    """vLLM's per-position acceptance rate: of the drafted tokens at position i, the share accepted."""
    rate = positions.assign(ok=positions["fate"].eq("accepted")).groupby("pos")["ok"].agg(["mean", "size"])
    fig = go.Figure(go.Bar(x=rate.index, y=rate["mean"], marker_color=COLORS["accepted"], customdata=rate["size"],
                           hovertemplate="position %{x}<br>accepted %{y:.1%} of %{customdata} drafts<extra></extra>"))
    fig.update_yaxes(range=[0, 1], tickformat=".0%")
    fig.update_xaxes(dtick=1)
    return layout(fig, "Acceptance rate by block position (whole trace)", "position in drafted block",
                  "share of drafts accepted", height=300)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _threshold_like(name: str) -> bool:
    n = name.lower()
    return "threshold" in n or n in ("t", "t0") or n.startswith("t_")


PER_WINDOW = ("u",)  # policy fields listed per window k = 0..max (costaware's utilities U(k))


def policy_scores(fields: dict[str, Any], window: int) -> go.Figure | None:
    """Whatever per-token numbers a policy logged this step, against its thresholds; None if none.

    Generic over `policy_fields`: top-level numeric lists are per-token series; a list of records
    (PACER's `blocks`: per-token `scores`, block `mean`, thresholds `t_before`/`t_after`) becomes
    per-token score markers plus one point per record at the record's last token; scalar fields
    named like thresholds (threshold, t0, t_*) become dashed lines."""
    fig = go.Figure()
    n = 0
    colors = palette(24)
    for k, v in fields.items():
        if k in PER_WINDOW:  # indexed by window k = 0.., not by drafted token: costaware_view plots it
            continue
        if isinstance(v, list) and v and all(_is_num(x) for x in v):
            fig.add_scatter(x=list(range(1, len(v) + 1)), y=v, name=words(k), mode="lines+markers",
                            line=dict(color=colors[n % 24]))
            n += 1
        elif isinstance(v, list) and v and all(isinstance(r, dict) for r in v):
            df = pd.DataFrame(v)
            score_cols = [c for c in df if "score" in c.lower()
                          and df[c].map(lambda x: isinstance(x, list) and all(_is_num(y) for y in x)).all()]
            sizes = df[score_cols[0]].map(len) if score_cols else pd.Series(1, index=df.index)
            ends = sizes.cumsum()
            for c in score_cols:
                xs = [int(e - len(row) + j + 1) for e, row in zip(ends, df[c]) for j in range(len(row))]
                fig.add_scatter(x=xs, y=[y for row in df[c] for y in row], name=f"{words(k)} · {words(c)}", mode="markers",
                                marker=dict(color=colors[n % 24], size=8))
                n += 1
            for c in df:
                if c in score_cols or not df[c].map(_is_num).all() or c.lower() in ("block", "index", "mb_ms"):
                    continue
                dash = "dash" if _threshold_like(c) else None
                color = "#222222" if dash else colors[n % 24]
                fig.add_scatter(x=list(ends), y=list(df[c]), name=f"{words(k)} · {words(c)}", mode="lines+markers",
                                line=dict(color=color, dash=dash, shape="hv" if dash else "linear"))
                n += dash is None
    if not fig.data:
        return None
    for k, v in fields.items():
        if _threshold_like(k) and _is_num(v):
            # A named line (legend entry) rather than an annotation: labels on the plot land on the data.
            fig.add_scatter(x=[0.5, window + 0.5], y=[v, v], mode="lines", name=f"{k} = {v:g}",
                            line=dict(color="#222222", dash="dot", width=1.5), hoverinfo="skip")
    fig.update_xaxes(dtick=1, range=[0.5, max(window, max(max(t.x) for t in fig.data if len(t.x))) + 0.5])
    return layout(fig, "Policy scores this step", "drafted token position", "score (policy units)", height=300)


# ---------------------------------------------------------------- compare


def cumulative_compare(curves: dict[str, pd.DataFrame], cursor: int | None = None) -> go.Figure:
    """Tokens generated after each verify call, one line per trace: step-aligned, so the vertical gap
    is how far ahead one policy is after the same number of target calls."""
    fig = go.Figure()
    colors = palette(len(curves))
    for i, (label, df) in enumerate(curves.items()):
        fig.add_scatter(x=df["step"] + 1, y=df["cum_emitted"], name=label, mode="lines", line_shape="hv",
                        line=dict(color=colors[i], width=2),
                        hovertemplate="%{x} target calls<br>%{y} tokens<extra>" + label + "</extra>")
    if cursor is not None:
        fig.add_vline(x=cursor + 1, line_color="#222222", line_width=1.5, opacity=0.6)
    return layout(fig, "Tokens generated vs target calls", "target calls (verify forwards)",
                  "tokens generated (incl. bonus)")


def time_compare(curves: dict[str, pd.DataFrame]) -> go.Figure:
    """Tokens generated against decode time (draft + verify + prefill), one line per trace."""
    fig = go.Figure()
    colors = palette(len(curves))
    for i, (label, df) in enumerate(curves.items()):
        fig.add_scatter(x=df["cum_ms"], y=df["cum_emitted"], name=label, mode="lines", line_shape="hv",
                        line=dict(color=colors[i], width=2))
    return layout(fig, "Tokens generated vs decode time (wall clock: machine-dependent)", "decode time (ms)",
                  "tokens generated (incl. bonus)")


# ---------------------------------------------------------------- audit


def audit_errors(verdicts: pd.DataFrame, tol: float) -> go.Figure:
    """Worst lossless error per verifier on a log axis, green if lossless and red if not, with the
    tolerance as a dashed line labelled right at the line (errors ≈ 1e-16 are float64 rounding;
    ≥ 1e-3 is a wrong rule). Bars run horizontally so long verifier names stay readable. Exact zeros
    are drawn at 1e-18 so the log axis can show them."""
    ok = verdicts["verdict"].eq("lossless")
    x = verdicts["max_lossless_error"].clip(lower=1e-18)
    fig = go.Figure(go.Bar(y=verdicts["verifier"], x=x, orientation="h",
                           marker_color=[COLORS["accepted"] if v else COLORS["rejected"] for v in ok],
                           # hatched when NOT lossless: the verdict does not rest on red vs green alone
                           marker_pattern_shape=["" if v else "x" for v in ok],
                           customdata=verdicts[["verdict", "worst_case"]].values,
                           hovertemplate="%{y}<br>max lossless error %{x:.1e}<br>%{customdata[0]} · worst toy "
                                         "%{customdata[1]}<extra></extra>"))
    fig.add_vline(x=tol, line_color="#555555", line_dash="dash")
    # On a log axis annotation coordinates are log10 values (add_vline's own label lands elsewhere).
    fig.add_annotation(x=math.log10(tol), xref="x", y=1, yref="paper", yanchor="bottom", xanchor="left",
                       text=f"tolerance {tol:g}", showarrow=False, font=dict(size=12, color="#555555"))
    fig.update_xaxes(type="log", exponentformat="power")
    fig.update_yaxes(autorange="reversed")
    return layout(fig, "Worst lossless error per verifier", "max lossless error (log scale, probability units)",
                  "verifier", height=max(320, 90 + 26 * len(verdicts)), legend=False)


# ---------------------------------------------------------------- multi-draft


MD_Y = {"be": ("Block efficiency", "tokens per target call (BE)", "BE %{y:.2f}"),
        "sr_model": ("Wall clock: modelled speedup over AR", "× autoregressive (measured costs)", "%{y:.2f}× AR")}


def multidraft_be(rows: pd.DataFrame, temperature: float, y: str = "be") -> go.Figure:
    """Block efficiency (emitted per target call; or `y="sr_model"`, the speedup modelled from measured
    per-call costs) against K, one panel per block length L and one line per verifier, at one temperature
    (rows of app.multidraft_view.load_paired). SD, a K = 1 rule, is the dashed level every multi-draft
    line has to clear."""
    from plotly.subplots import make_subplots

    d = rows[rows["temperature"] == temperature]
    ls = sorted(d["L"].unique())
    fig = make_subplots(rows=1, cols=max(1, len(ls)), shared_yaxes=True, subplot_titles=[f"L = {L}" for L in ls])
    labels = list(dict.fromkeys(d["label"]))
    colors = dict(zip(labels, palette(len(labels))))
    for i, L in enumerate(ls, start=1):
        g = d[d["L"] == L]
        for label in labels:
            s = g[g["label"] == label].sort_values("k")
            if s.empty:
                continue
            if s["method"].iloc[0] == "token" and s[y].notna().any():
                fig.add_hline(y=float(s[y].iloc[0]), line_dash="dash", line_color=colors[label], row=1, col=i)
            fig.add_scatter(x=s["k"], y=s[y], mode="lines+markers", name=label, legendgroup=label,
                            showlegend=i == 1, line=dict(color=colors[label], width=2),
                            hovertemplate=f"{label}<br>K = %{{x}}<br>{MD_Y[y][2]}<extra></extra>", row=1, col=i)
        fig.update_xaxes(dtick=1, title_text="drafts per step K", row=1, col=i)
    if y == "sr_model":
        fig.add_hline(y=1.0, line_dash="dot", line_color="#222222", annotation_text="AR", annotation_position="bottom right")
    layout(fig, f"{MD_Y[y][0]} by drafts per step, T = {temperature:g}", "drafts per step K", MD_Y[y][1], height=380)
    for i in range(2, len(ls) + 1):
        fig.update_yaxes(title_text="", row=1, col=i)  # shared axis: one title is enough
    return fig
