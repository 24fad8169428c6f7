"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations

import re

import base64
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import result_files, traces
from tests.conftest import MAIN, REPO, TIMEOUT
from tests.system.app.conftest import goto


def test_windows_page_uses_engine_analysis(app):
    at = goto(app, "windows")
    got = {m.label: m.value for m in at.metric}
    assert {"best fixed γ*", "oracle (a) speedup", "oracle ÷ best fixed"} <= set(got)
    before = got["speedup at γ*"]
    at.slider(key="win_c").set_value(0.3).run()
    assert not at.exception and {m.label: m.value for m in at.metric}["speedup at γ*"] != before
    def titles():
        return {json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")}

    assert "Speedup vs window" in titles() and "Cost of one speculative step" not in titles()  # one section a run
    at.segmented_control(key="win_section").set_value("Cost model").run()
    assert "Cost of one speculative step" in titles() and "Speedup vs window" not in titles()
    at.segmented_control(key="win_section").set_value("Oracle ÷ best fixed, per task").run()
    assert "Oracle ÷ best fixed window" in titles()
    assert len(at.dataframe) >= 1
    at.segmented_control(key="win_task").set_value("qa").run()
    assert not at.exception


def test_windows_page_opens_on_the_qwen_pair_with_its_headline(trace_dir, tmp_path, monkeypatch):
    """With two real pairs' references (and the demo one) present, the page opens on the Qwen pair
    alone, says the headline sentences, draws the gap chart, and warns once two pairs are blended."""
    import shutil

    from app import window_story as story

    refs = tmp_path / "refs"
    refs.mkdir()
    shutil.copy(REPO / "traces" / "ref-smollm2-greedy.jsonl", refs)  # sorts after the demo, before qwen: not first
    shutil.copy(REPO / "docs" / "results" / "ref-qwen-greedy-w8.jsonl", refs)
    shutil.copy(trace_dir / "demo-tiny-reference.jsonl", refs)
    monkeypatch.setenv(traces.TRACES_ENV, str(refs))
    at = goto(AppTest.from_file(MAIN, default_timeout=TIMEOUT).run(), "windows")
    assert at.multiselect(key="win_refs").value == ["ref-qwen-greedy-w8.jsonl"]
    assert not any("blend" in w.value for w in at.warning)
    text = [m.value for m in at.markdown]
    said = "\n".join(text)
    head = at.info[0].value  # the page opens with its conclusion
    assert head.startswith("**qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b: which window?** ")
    assert "a window reading the draft's confidence reaches at most" in head  # the confidence ceiling, said once
    gain, *persist = head.split("**Oracle gain.** ", 1)[1].split(" **Does acceptance persist?** ")
    assert gain.startswith("Oracle (a) ÷ best fixed window: **")
    assert "per task — paper: up to 1.4×. Overall this " in gain and ("the paper's figure" in gain)
    for p in persist:  # only with this pair's fixed-window decode traces loaded (test_autocorrelation: its value)
        assert re.search(r"fixed-window decode traces: \*\*r\(1\) = −?\d\.\d\d\*\*", p)
    assert any(t.startswith("**Gap closed.** ") and ("(0 = best fixed" in t or "to the oracle (1)" in t) for t in text)
    sweep = result_files.pacer_sweep_for("qwen2.5-coder-0.5b")  # this draft's own pre-verifier and its sweep
    assert sweep.endswith("pacer-sweep-qwen.json")
    pos = story.pacer_position(result_files.pacer_ceiling(sweep))
    assert (f"**PACER.** PACER's pre-verifier for qwen2.5-coder-0.5b (models/pacer-qwen) reaches "
            f"{story.num(pos['of_oracle'])} of the oracle's speedup, {story.num(pos['position'])} of the way") in said
    pair = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    found = story.find_bench(result_files.bench_results(), *pair)  # the newest bench of the pair with an oracle row
    real = story.bench_oracle_ratio(found[1])
    # the oracle's speedup links to its row on the Speedups page
    assert f"{story.REAL_LABEL} {story.num(real['ratio'])}× (oracle [{story.num(real['oracle'])}× AR](speedups?" in said
    pb = story.find_bench(result_files.bench_results(), *pair, need=story.bench_pacer_standing)
    plain = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", said)  # the text without its links to the Speedups page
    assert pb is not None and story.pacer_wall_clock_sentence(*pb) in plain  # PACER on the wall clock
    assert re.search(r"the best PACER rule \([^)]*\) runs at \[\d\.\d\d× AR\]\(speedups\?", said)  # … linked
    assert said.count(story.REPLAYED_LABEL) == 1 and said.count(story.WHY_DIFFER) == 1
    assert "**Cost.** Cost model: measured (c = " in said
    ceiling = [t for t in text if t.startswith("**Confidence ceiling.** ")]  # what the draft's confidence can buy
    assert len(ceiling) == 1 and "of the way to the cost-optimal schedule" in ceiling[0]
    charts = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
              for c in at.get("plotly_chart")}
    wall = charts["Gap closed on the wall clock (bench, greedy)"]["data"][0]
    want = story.bench_gap_closed(pb[1])
    ys = wall["y"] if isinstance(wall["y"], list) else \
        np.frombuffer(base64.b64decode(wall["y"]["bdata"]), dtype=wall["y"]["dtype"]).tolist()  # plotly's typed array
    assert ys == pytest.approx(want["position"].tolist()) and wall["customdata"] == want["policy"].tolist()
    gap = charts["Gap closed by each adaptive policy"]["data"][0]
    assert len(gap["x"]) == 5 and [x.split(":")[0] for x in gap["customdata"]] == \
        ["heuristic", "confidence", "cumulative", "entropy", "costaware"]  # the lab's own window among them

    # with the pair's decode traces loaded, the replay is priced with what those real steps paid
    for name in ("qwen-ar-t0.jsonl", "qwen-fixed-1-t0.jsonl", "qwen-fixed-4-t0.jsonl", "qwen-lookup-fixed-10-t0.jsonl"):
        shutil.copy(REPO / "traces" / name, refs)
    at = goto(AppTest.from_file(MAIN, default_timeout=TIMEOUT).run(), "windows")
    assert not at.exception and at.radio(key="win_mode").value == "in-run"
    said = "\n".join(m.value for m in at.markdown)
    assert "**Cost.** Cost model: in-run (c = " in said and "from 3 decode traces" in said  # not the lookup run

    at.multiselect(key="win_refs").set_value(["ref-qwen-greedy-w8.jsonl", "ref-smollm2-greedy.jsonl"]).run()
    assert not at.exception
    assert [w.value for w in at.warning if "blend" in w.value] == [
        "These references blend 2 pairs (qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b; smollm2-135m ← smollm2-draft): "
        "every number below mixes them. Pick one pair's references."]


def test_windows_page_shows_pacer_ceiling(app):
    """The ceiling chart and table come from the bundled sweep result, share of the oracle per rule."""
    from app import result_files

    at = goto(app, "windows")
    glance = at.info[0].value.split(": which window?**", 1)[0]
    draft = glance.rsplit(" ← ", 1)[-1]
    PACER_SWEEP = Path(result_files.pacer_sweep_for(draft))  # the sweep of the pair the page opened on
    at.segmented_control(key="win_section").set_value("PACER's ceiling").run()
    titles = {json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")}
    assert "PACER vs the oracle as the draft gets cheaper" in titles
    at.segmented_control(key="win_ceil_split").set_value("greedy").run()
    assert not at.exception
    want = next(c for c in json.loads(PACER_SWEEP.read_text())["splits"]["greedy"]["ceiling"]
                if c["draft_cost_factor"] == 1.0)
    table = next(d.value for d in at.dataframe if "perfect pre-verifier" in d.value.columns)
    row = table[table["draft cost factor f"] == 1.0].iloc[0]
    assert row["perfect pre-verifier"] == pytest.approx(want["perfect_over_oracle"])
    assert row["best PACER"] == pytest.approx(want["pacer_over_oracle"]) and row["oracle"] == pytest.approx(1.0)


def test_windows_page_degrades_without_analysis(app, monkeypatch):
    monkeypatch.setitem(sys.modules, "engine.offline.analysis", None)  # import now raises ImportError
    at = goto(app, "windows")
    assert any("Window analysis is unavailable" in w.value for w in at.warning)


def test_windows_tables_link_every_speedup_to_its_row(app):
    """The oracle table's three ×AR columns and the simulated-policies table's speedups each link to a row
    of the Speedups page that prints the figure; a cost ratio set by hand is no row, so its figures stay
    plain numbers (never a link to a row that is not there)."""
    from app import reconcile_sources
    from tests.system.app.conftest import assert_linked, table_with

    rows = reconcile_sources.rows()
    at = goto(app, "windows")
    at.segmented_control(key="win_section").set_value("Oracle ÷ best fixed, per task").run()
    ratio = table_with(at, "oracle (a) speedup")
    for col in ("speedup at γ*", "oracle (a) speedup", "oracle (b) speedup"):
        assert assert_linked(ratio, col, rows) == len(ratio.value)  # every task × cost model
    sim = table_with(at, "policy")
    assert assert_linked(sim, "speedup", rows) == len(sim.value) > 16  # fixed γs, oracles, adaptive policies
    assert {"fixed:1", "oracle:a", "oracle:c"} <= set(sim.value["policy"])

    at.slider(key="win_c").set_value(0.37).run()  # the demo opens on the flat ratio: one set by hand
    assert not at.exception
    ratio = table_with(at, "oracle (a) speedup")
    assert json.loads(ratio.proto.columns)["oracle (a) speedup"]["type_config"]["type"] == "number"
    assert pd.api.types.is_float_dtype(ratio.value["oracle (a) speedup"])
