"""app/costaware_view.py: the Replay figure of costaware's U(k) and the one-line advice of Overview."""

import glob
from types import SimpleNamespace

from app import costaware_view as view
from app.frames import describe
from engine.offline.analysis import load_any


def test_utilities_figure_marks_plan_and_verified_window():
    fields = {"decision": "draft", "k_plan": 2, "u": [10.0, 11.0, 12.0, 9.0], "u_unit": "tok/s", "lambda": 10.0,
              "stop": "value"}
    fig = view.utilities_figure(fields, 1)
    colors = list(fig.data[0].marker.color)
    assert list(fig.data[0].y) == fields["u"] and colors[1] != colors[2] != colors[0]
    assert "stopped when one more draft" in view.caption(fields)
    assert view.utilities_figure({"gamma": 3}, 3) is None and view.caption({}) == ""
    line = view.caption({"decision": "no-probe", "ceiling": 0.985})
    assert "even a perfect draft could not pay" in line and "0.98× AR" in line


def test_overview_advice_is_about_one_pair():
    entries = {}
    for p in sorted(glob.glob("traces/qwen-*-t0.jsonl")) + ["traces/demo-tiny-fixed2.jsonl"]:
        t = load_any(p)[1]
        entries[p] = SimpleNamespace(trace=t, info=describe(t))
    pair, traces = view.pick_pair(entries)
    assert pair.startswith("qwen2.5-coder-1.5b ← ") and all("qwen" in t.header["target"]["name"] for t in traces)
    line = view.advice_line(traces)
    assert line.startswith("use K = ") and "\n" not in line
    assert view.pick_pair({}) == ("", [])
