"""Does acceptance persist from one verify call to the next? The autocorrelation of per-step acceptance
at lags 1..5 — the evidence for or against adaptive windows: a window can only adapt usefully if a good
step predicts a good next step. Pure: decode-trace steps in, a small frame and a sentence out.

Per step, x = accepted ÷ drafted (steps that drafted nothing are skipped). Each prompt's series is
centred on the pooled mean, and lag k pools the products x_t·x_{t+k} within every prompt (never across
two prompts) over the pooled variance: r(k) = Σ (x_t − x̄)(x_{t+k} − x̄) / Σ (x_t − x̄)².
"""

from __future__ import annotations

import numpy as np
import pandas as pd

LAGS = (1, 2, 3, 4, 5)
# Below this |r| the steps look like fresh draws for a window rule (about 2/√n at a few hundred steps).
PERSISTS = 0.1


def acceptance_series(steps: pd.DataFrame) -> dict:
    """request id -> per-step acceptance in step order (app.frames.steps_frame columns)."""
    s = steps[steps["window"] > 0].sort_values(["request_id", "step"])
    return {rid: (g["accepted"] / g["window"]).to_numpy(float) for rid, g in s.groupby("request_id")}


def autocorrelation(series: list[np.ndarray], lags=LAGS) -> pd.DataFrame:
    """lag, r, pairs (how many step pairs the lag rests on)."""
    xs = [x for x in series if len(x)]
    if not xs:
        return pd.DataFrame(columns=["lag", "r", "pairs"])
    mean = float(np.concatenate(xs).mean())
    var = float(sum(((x - mean) ** 2).sum() for x in xs))
    rows = []
    for k in lags:
        num = sum(float(((x[:-k] - mean) * (x[k:] - mean)).sum()) for x in xs if len(x) > k)
        pairs = sum(len(x) - k for x in xs if len(x) > k)
        rows.append({"lag": k, "r": num / var if var > 0 and pairs else float("nan"), "pairs": pairs})
    return pd.DataFrame(rows)


def of_traces(steps_frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Pooled over several traces (each prompt of each trace its own series)."""
    return autocorrelation([x for f in steps_frames for x in acceptance_series(f).values()])


def sentence(ac: pd.DataFrame, what: str) -> str:
    """One sentence: r at lag 1 (and the range over 2..5), and what it means for adaptive windows."""
    ok = ac.dropna(subset=["r"])
    if ok.empty:
        return f"Acceptance autocorrelation: {what} have too few drafting steps to measure it."
    r1 = float(ok.loc[ok["lag"] == 1, "r"].iloc[0]) if (ok["lag"] == 1).any() else float("nan")
    rest = ok[ok["lag"] > 1]["r"]
    span = f"; lags 2–5: {rest.min():.2f} to {rest.max():.2f}" if len(rest) else ""
    head = (f"Acceptance autocorrelation in {what}: **r(1) = {r1:.2f}**{span} "
            f"({int(ok['pairs'].iloc[0])} step pairs)")
    if abs(r1) < PERSISTS:
        return (head + " — a good step barely predicts the next, so a window that adapts to the last steps has "
                "little to go on; what an adaptive rule gains must come from per-token signals (confidence).")
    if r1 > 0:
        return (head + " — acceptance persists from step to step, so a window that grows after good steps and "
                "shrinks after bad ones has a real signal to use.")
    return head + " — a good step tends to follow a bad one: a window that chases the last step would lag behind."
