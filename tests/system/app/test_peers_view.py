"""The peers result on the Compare page (app.peer_view.peers_section, app.peer_plots.speedup_bars), on a
committed small result in the schema `python -m engine peers` writes: tests/fixtures/peers/peers-synthetic.json
(three fake engines of tests/unit/bench/test_peers.py through engine.bench.peers.run_peers, the per-run
records left out; its numbers are made up)."""

import json
import shutil
from pathlib import Path

import pytest

from app import peer_view
from app.peer_plots import speedup_bars
from tests.system.app.conftest import goto

SMALL = Path(__file__).resolve().parents[2] / "fixtures" / "peers" / "peers-synthetic.json"


@pytest.fixture()
def result():
    return json.loads(SMALL.read_text(encoding="utf-8"))


def test_frame_and_bars_carry_the_rows(result):
    df = peer_view.peers_frame(result)
    assert len(df) == len(result["rows"]) and {"engine", "tokens/s", "speedup vs own AR"} <= set(df.columns)
    assert list(df["tokens/s"]) == [r["tokens_per_s"] for r in result["rows"]]
    i = next(i for i, r in enumerate(result["rows"]) if r["per_position_acceptance"])
    assert df["accepted per position"].iat[i] == " ".join(f"{x:.2f}" for x in result["rows"][i]["per_position_acceptance"])
    assert df["accepted per position"].iat[0] == "–"  # the AR row
    fig = speedup_bars(df)
    engines = list(dict.fromkeys(r["engine"] for r in result["rows"]))
    assert [t.name for t in fig.data] == engines
    for t in fig.data:
        want = [r["speedup_vs_own_ar"] for r in result["rows"] if r["engine"] == t.name]
        assert list(t.y) == want and all(s.endswith("tok/s") for s in t.text)
    assert "×" in peer_view.target_line(result) and "\n" not in peer_view.target_line(result)


def test_compare_page_shows_the_peers_table_and_bars(app, tmp_path, monkeypatch, result):
    shutil.copy(SMALL, tmp_path / "peers-qwen.json")
    monkeypatch.setenv(peer_view.PEERS_ENV, str(tmp_path))
    at = goto(app, "compare")
    assert any(s.value.startswith("Peers") for s in at.subheader)
    table = next(d.value for d in at.dataframe if "speedup vs own AR" in d.value.columns)
    import re

    from app import reconcile

    shown = [float(re.search(reconcile.FIGURE_TEXT, u).group(1)) if isinstance(u, str) else None
             for u in table["speedup vs own AR"]]
    assert shown == [None if r["config"] == "ar" else round(r["speedup_vs_own_ar"], 2) for r in result["rows"]]
    assert all("row=peer-" in u for u in table["speedup vs own AR"] if isinstance(u, str))  # each figure links to its row
    assert any("×" in m.value and "tokens/s" in m.value for m in at.markdown)


def test_compare_page_without_a_peers_result_draws_no_section(app, tmp_path, monkeypatch):
    (tmp_path / "peers-broken.json").write_text("{not json")
    monkeypatch.setenv(peer_view.PEERS_ENV, str(tmp_path))
    at = goto(app, "compare")
    assert not any(s.value.startswith("Peers") for s in at.subheader)


def test_position_lines_draw_each_run_s_rates_the_imported_one_thick():
    import pandas as pd

    from app.peer_plots import position_lines
    from engine.interop import formats
    from engine.interop.same_pair import beside_ours, position_rows
    from engine.trace.format import load_trace

    fix = SMALL.parent
    imp = formats.loads_peer((fix / "vllm-draft-k4.jsonl").read_bytes(), "v.jsonl")
    ours = {"qwen-fixed-4-t0.jsonl": load_trace(fix.parents[2] / "traces" / "qwen-fixed-4-t0.jsonl")}
    b = beside_ours(imp, ours, "v.jsonl")
    df = pd.DataFrame(position_rows(b))
    fig = position_lines(df)
    assert [t.name for t in fig.data] == ["v.jsonl (imported)", "qwen-fixed-4-t0.jsonl"]
    assert list(fig.data[0].y) == b["imported"]["per_position"]["rates"] and len(fig.data[0].x) == 4
    assert list(fig.data[1].y) == b["ours"][0]["per_position"]["rates"]
    assert fig.data[0].line.width > fig.data[1].line.width
