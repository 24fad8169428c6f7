"""Acceptance autocorrelation (app.autocorrelation) on series whose answer is known, and its value on
the bundled Qwen fixed-window traces — the figure the Windows conclusion states."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from app import autocorrelation as ac
from app import frames, traces


def test_known_series():
    alt = np.array([1.0, 0.0] * 20)  # good, bad, good…: r(1) = −1·(n−1)/n, r(2) = +(n−2)/n
    r = ac.autocorrelation([alt]).set_index("lag")["r"]
    assert r[1] == pytest.approx(-39 / 40) and r[2] == pytest.approx(38 / 40)
    runs = np.array([1.0] * 10 + [0.0] * 10)  # long runs: strongly persistent
    assert ac.autocorrelation([runs]).set_index("lag")["r"][1] > 0.8
    # lags never pair the end of one prompt with the start of the next
    two = ac.autocorrelation([np.array([1.0, 1.0]), np.array([0.0, 0.0])]).set_index("lag")
    assert two.loc[1, "pairs"] == 2 and two.loc[1, "r"] == pytest.approx(0.5)  # 0.25 if the seam counted
    assert ac.autocorrelation([]).empty


def test_series_skip_steps_that_drafted_nothing():
    steps = pd.DataFrame({"request_id": [0, 0, 0, 1], "step": [0, 1, 2, 0], "window": [2, 0, 4, 1],
                          "accepted": [1, 0, 4, 0]})
    s = ac.acceptance_series(steps)
    assert list(s[0]) == [0.5, 1.0] and list(s[1]) == [0.0]


def test_sentence_reads_the_sign_and_size():
    frame = lambda r1: pd.DataFrame({"lag": [1, 2], "r": [r1, 0.05], "pairs": [300, 290]})  # noqa: E731
    assert "persists from step to step" in ac.sentence(frame(0.32), "x") and "**r(1) = 0.32**" in ac.sentence(frame(0.32), "x")
    assert "barely predicts" in ac.sentence(frame(0.03), "x")
    assert "would lag behind" in ac.sentence(frame(-0.3), "x")
    assert "too few" in ac.sentence(ac.autocorrelation([]), "x")


def test_bundled_qwen_fixed_window_traces():
    """The value the Windows conclusion states for the bundled Qwen pair: acceptance persists (r(1) ≈ 0.32
    over the fixed:1/2/4 traces), so adaptive windows have a signal."""
    paths = [p for p in traces.bundled_paths(kind="trace") if p.name.startswith("qwen-fixed-")]
    if not paths:
        pytest.skip("the bundled Qwen traces are not in traces/")
    from engine.trace.format import load_trace

    a = ac.of_traces([frames.steps_frame(load_trace(p)) for p in paths]).set_index("lag")
    assert a.loc[1, "r"] == pytest.approx(0.32, abs=0.01) and a.loc[1, "pairs"] == 326
    assert (a["r"] > 0).all()
