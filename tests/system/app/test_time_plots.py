"""Where a step's time goes (app.time_plots): the stacked draft/verify bars are the steps' own times, and
the two lanes lay each run's phases end to end on one clock, ending at the prompt's decode time."""

from __future__ import annotations

import pandas as pd
import pytest

from app import time_plots


def steps(draft, verify, prefill=None):
    n = len(draft)
    return pd.DataFrame({"step": range(n), "t_draft_ms": draft, "t_verify_ms": verify,
                         "t_prefill_ms": prefill or [0.0] * n, "emitted": [2] * n})


def test_stacked_bars_carry_each_steps_draft_and_verify_time():
    fig = time_plots.step_time_bars(steps([1.0, 2.0], [10.0, 12.0], [50.0, 0.0]), cursor=1)
    by = {t.name: list(t.y) for t in fig.data}
    assert by == {"prefill ms": [50.0, 0.0], "draft ms": [1.0, 2.0], "verify ms": [10.0, 12.0]}
    assert fig.layout.barmode == "stack" and fig.layout.yaxis.title.text == "time (ms)"
    patterns = {t.name: t.marker.pattern.shape for t in fig.data}
    assert patterns["draft ms"] != patterns["verify ms"]  # told apart without colour
    assert "prefill ms" not in {t.name for t in time_plots.step_time_bars(steps([1.0], [2.0])).data}


def test_two_lanes_share_one_clock_and_end_at_the_decode_time():
    ar = steps([0.0, 0.0, 0.0], [10.0, 10.0, 10.0], [40.0, 0.0, 0.0])
    spec = steps([3.0, 3.0], [12.0, 12.0], [40.0, 0.0])
    lanes = time_plots.lanes({"autoregressive": ar, "fixed:2": spec})
    for lane, want in (("autoregressive", 70.0), ("fixed:2", 70.0)):
        g = lanes[lanes["lane"] == lane]
        assert (g["start_ms"] + g["ms"]).max() == pytest.approx(want)
        assert (g["start_ms"].diff().dropna() > 0).all()  # end to end, in order, no overlap
    assert set(lanes[lanes["lane"] == "autoregressive"]["phase"]) == {"prefill", "verify"}  # AR drafts nothing
    fig = time_plots.two_lanes({"autoregressive": ar, "fixed:2": spec})
    assert fig.layout.xaxis.title.text == "wall clock (s)"
    assert sorted(a.text.strip() for a in fig.layout.annotations) == ["0.1 s", "0.1 s"]
