"""Per-weights-path costs on the Windows page: the newest measured file of the pair, its curve frame,
the plot, and the page offering each path as a cost model."""

from __future__ import annotations

import json

from app import cost_paths, window_plots
from tests.system.app.conftest import goto

T = {"target_ms_by_tokens": [100.0, 130.0, 160.0, 290.0], "draft_ms_per_token": 60.0}
D = {"target_ms_by_tokens": [400.0, 410.0, 405.0, 450.0], "draft_ms_per_token": 100.0}


def _write(d, name, created, blocks, target="t", draft="d"):
    (d / name).write_text(json.dumps({"created": created, "target": target, "draft": draft, "by_threads": blocks}))


def test_the_newest_file_of_the_pair_with_the_most_threads(tmp_path):
    _write(tmp_path, "costs-a.json", "2026-01-01", [{"threads": 2, "weights": "dense", "timings": D}])
    _write(tmp_path, "costs-b.json", "2026-02-01", [{"threads": 1, "weights": "dense", "timings": T},
                                                    {"threads": 2, "weights": "dense", "timings": D},
                                                    {"threads": 2, "weights": "quantized", "timings": T}])
    _write(tmp_path, "costs-c.json", "2026-03-01", [{"threads": 2, "timings": T}])  # no paths recorded
    _write(tmp_path, "costs-other.json", "2026-04-01", [{"threads": 2, "weights": "dense", "timings": T}], target="x")
    (tmp_path / "costs-broken.json").write_text("{")
    got = cost_paths.path_timings("t", "d", tmp_path)
    assert got == {"dense": D, "quantized": T}
    assert cost_paths.path_timings("nobody", "d", tmp_path) == {}


def test_curve_frame_is_the_cost_models_view_and_plots():
    df = cost_paths.curve_frame({"dense": D, "quantized": T})
    q = df[df["path"] == "quantized"]
    assert list(q["k"]) == [1, 2, 3, 4] and list(q["t(k)/t(1)"]) == [1.0, 1.3, 1.6, 2.9]
    dense = df[df["path"] == "dense"]["t(k)/t(1)"].tolist()
    assert dense == sorted(dense)  # the monotone fit: 405 ms after 410 ms is noise
    assert abs(q["c"].iloc[0] - 0.6) < 1e-12
    fig = window_plots.verify_curves(df)
    assert len(fig.data) == 3 and fig.data[2].name == "k one-token forwards"


def test_windows_offers_each_measured_path_as_its_cost_model(app, monkeypatch):
    monkeypatch.setattr(cost_paths, "path_timings", lambda target, draft, results=None: {"dense": D, "quantized": T})
    at = goto(app, "windows")
    radio = at.radio(key="win_mode")
    assert "quantized weights path" in radio.options and "dense weights path" in radio.options
    before = {m.label: m.value for m in at.metric}["speedup at γ*"]
    radio.set_value("quantized weights path").run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["speedup at γ*"] != before
    at.segmented_control(key="win_section").set_value("Cost model").run()
    titles = {json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")}
    assert "Verify cost by weights path" in titles
