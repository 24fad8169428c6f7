"""engine.bench.prefill: a prefill's ms per token by length and route — each quantized model timed on the panel
product and with it switched off (SPECLAB_QPANEL=0, restored after), a dense model on its one route, interleaved,
the best round kept, and the ratio one-row ÷ panel per length."""

import os
import time

import pytest

from engine.bench.prefill import format_prefill, measure
from engine.kernels import qkernel


class _LM:
    """A stand-in for HFModel: `weights` picks the arms; prefill sleeps per token by the route it sees."""

    def __init__(self, weights: str, ms_panel: float, ms_one_row: float) -> None:
        self.weights, self.ms = weights, {"1": ms_panel, "0": ms_one_row}
        self.seen: list[tuple[str | None, int]] = []
        self.tiles: list[str | None] = []  # SPECLAB_QPANEL_TILES per call
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def prefill(self, ids) -> None:
        route = os.environ.get("SPECLAB_QPANEL")
        self.seen.append((route, len(ids)))
        self.tiles.append(os.environ.get("SPECLAB_QPANEL_TILES"))
        time.sleep(self.ms[route or "1"] * len(ids) / 1e3)


def test_each_quantized_model_runs_both_routes_interleaved_and_the_switch_is_restored(monkeypatch):
    monkeypatch.setattr(qkernel, "panel_tiles", lambda: False)
    monkeypatch.setenv("SPECLAB_QPANEL", "1")
    q, d = _LM("quantized", 0.5, 1.5), _LM("dense", 1.0, 1.0)
    rows = measure({"q": q, "d": d}, (4, 8), repeats=2)
    assert os.environ["SPECLAB_QPANEL"] == "1"  # the caller's value back
    # panel (switch unset) and one-row, each round starting at the next arm
    assert q.seen == [(None, 4), ("0", 4), ("0", 4), (None, 4), (None, 8), ("0", 8), ("0", 8), (None, 8)]
    assert [n for _, n in d.seen] == [4, 4, 8, 8] and q.resets >= 8
    by = {(r["model"], r["arm"], r["tokens"]): r for r in rows}
    assert set(by) == {("q", "panel", 4), ("q", "one-row", 4), ("q", "panel", 8), ("q", "one-row", 8),
                       ("d", "dense", 4), ("d", "dense", 8)}
    for L in (4, 8):
        assert by[("q", "panel", L)]["ms_per_token"] == pytest.approx(0.5, abs=0.4)
        assert by[("q", "one-row", L)]["ms_per_token"] == pytest.approx(1.5, abs=0.4)
        assert 1.5 < by[("q", "panel", L)]["vs_one_row"] < 4.5 and by[("q", "one-row", L)]["vs_one_row"] == 1.0
        assert by[("d", "dense", L)]["vs_one_row"] is None
    table = format_prefill(rows)
    assert "| q | 8 |" in table and "| d | 4 |" in table and "×" in table.split("| q | 4 |")[1].split("\n")[0]


def test_where_the_panel_runs_on_tiles_its_vpdpbusd_route_is_an_arm_too(monkeypatch):
    """On the AMX build the panel's sums run on tiles; `panel-vnni` times the same product on vpdpbusd
    (SPECLAB_QPANEL_TILES=0), each arm with only its own switch set, the caller's values back after."""
    monkeypatch.setattr(qkernel, "panel_tiles", lambda: True)
    monkeypatch.setenv("SPECLAB_QPANEL_TILES", "1")
    monkeypatch.delenv("SPECLAB_QPANEL", raising=False)
    q = _LM("quantized", 0.2, 0.4)
    rows = measure({"q": q}, (4,), repeats=1)
    assert [r for r, _ in q.seen] == [None, None, "0"] and q.tiles == [None, "0", None]
    assert [r["arm"] for r in rows] == ["panel", "panel-vnni", "one-row"]
    assert os.environ["SPECLAB_QPANEL_TILES"] == "1" and "SPECLAB_QPANEL" not in os.environ
    assert "panel-vnni ms/token" in format_prefill(rows)


def test_bad_lengths_repeats_and_too_few_ids_are_refused():
    lm = _LM("quantized", 0.1, 0.1)
    with pytest.raises(ValueError, match="repeats must be"):
        measure({"q": lm}, (4,), repeats=0)
    with pytest.raises(ValueError, match="every length"):
        measure({"q": lm}, (0, 4))
    with pytest.raises(ValueError, match="3 ids for a length of 4"):
        measure({"q": lm}, (4,), ids=[1, 2, 3])
