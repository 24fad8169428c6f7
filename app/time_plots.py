"""Where a step's time goes: draft and verify stacked per verify call, and one prompt decoded twice —
autoregressive beside speculative — as two lanes on one wall-clock axis. Pure: steps frames
(app.frames.steps_frame) in, Plotly figures out, through app.plots.layout and its palette."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from app.plots import COLORS, SERIES, layout

# Phases of a step, one palette colour each (not fate colours: a phase is not an outcome). Draft and
# verify also differ in pattern, so the stack reads without colour.
PHASES = {"prefill": (COLORS["pending"], ""), "draft": (SERIES[4], "/"), "verify": (SERIES[0], "")}
COLUMN = {"prefill": "t_prefill_ms", "draft": "t_draft_ms", "verify": "t_verify_ms"}


def step_time_bars(steps: pd.DataFrame, cursor: int | None = None) -> go.Figure:
    """Per verify call of one prompt: draft ms and verify ms stacked (prefill on the first call)."""
    fig = go.Figure()
    for phase, (color, pattern) in PHASES.items():
        y = steps[COLUMN[phase]].fillna(0)
        if phase == "prefill" and not (y > 0).any():
            continue
        fig.add_bar(x=steps["step"], y=y, name=f"{phase} ms", marker=dict(color=color, pattern_shape=pattern),
                    hovertemplate=f"step %{{x}}<br>{phase} %{{y:.1f}} ms<extra></extra>")
    fig.update_layout(barmode="stack")
    if cursor is not None:
        fig.add_vline(x=cursor, line_dash="dot", line_color="#222222")
    return layout(fig, "Time per verify call: draft and verify", "verify call (step)", "time (ms)", legend=True)


def lanes(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per phase of every step, laid end to end per lane: lane, step, phase, start_ms, ms, emitted."""
    rows = []
    for lane, steps in runs.items():
        t = 0.0
        for r in steps.sort_values("step").itertuples(index=False):
            for phase in PHASES:
                ms = float(getattr(r, COLUMN[phase]) or 0.0)
                if ms > 0:
                    rows.append({"lane": lane, "step": int(r.step), "phase": phase, "start_ms": t, "ms": ms,
                                 "emitted": int(r.emitted)})
                    t += ms
    return pd.DataFrame(rows, columns=["lane", "step", "phase", "start_ms", "ms", "emitted"])


def two_lanes(runs: dict[str, pd.DataFrame]) -> go.Figure:
    """The same prompt decoded by each run, one lane each on one wall-clock axis (seconds): where the
    speculative lane ends against the autoregressive one is the speedup on this prompt."""
    frame = lanes(runs)
    fig = go.Figure()
    for phase, (color, pattern) in PHASES.items():
        g = frame[frame["phase"] == phase]
        if g.empty:
            continue
        fig.add_bar(y=g["lane"], x=g["ms"] / 1000, base=g["start_ms"] / 1000, orientation="h", name=phase,
                    marker=dict(color=color, pattern_shape=pattern, line=dict(color="#ffffff", width=0.5)),
                    customdata=g[["step", "emitted"]].to_numpy(),
                    hovertemplate=f"%{{y}} · step %{{customdata[0]}} · {phase}<br>%{{x:.2f}} s, "
                                  f"%{{customdata[1]}} tokens emitted<extra></extra>")
    ends = frame.groupby("lane").apply(lambda g: (g["start_ms"] + g["ms"]).max() / 1000, include_groups=False)
    for lane, end in ends.items():
        fig.add_annotation(x=end, y=lane, text=f" {end:.1f} s", showarrow=False, xanchor="left")
    fig.update_layout(barmode="overlay", bargap=0.35)
    fig.update_yaxes(categoryorder="array", categoryarray=list(runs)[::-1])
    return layout(fig, "One prompt, two runs on one clock", "wall clock (s)", "run",
                  height=150 + 40 * len(runs), legend=True)
