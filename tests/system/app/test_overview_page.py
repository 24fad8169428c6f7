"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import pytest
from streamlit.testing.v1 import AppTest

from app import traces
from tests.conftest import MAIN, TIMEOUT
from tests.system.app.conftest import goto


# ---------------------------------------------------------------- pages


def test_overview_cards(app):
    assert not app.metric  # cards on demand: the first screen is the conclusion, the pages and the runs table
    app.toggle(key="ov_cards").set_value(True).run()
    labels = [m.label for m in app.metric]
    n = len(traces.bundled_paths(kind="trace"))
    assert n >= 7 and labels.count("tokens/s") == n and labels.count("emitted / call") == n
    assert any("traces loaded" in h.value for h in app.subheader)
    assert any("say nothing about real models" in c.value for c in app.caption)
    # Every number on a card is the engine's own summary of that trace.
    e = traces.all_traces()["demo-tiny-fixed4.jsonl"]
    assert str(e.info["summary"]["target_calls"]) in [m.value for m in app.metric]
    # Every tokens/s carries where and when it was measured.
    assert all("tokens/s measured" in c.value for c in app.caption if "prompts ·" in c.value)


def card_titles(at: AppTest) -> list[str]:
    return [m.value[6:] for m in at.markdown if m.value.startswith("##### ")]


def test_overview_titles_are_unique_and_group_by_run(app, trace_dir):
    """One title per trace that tells it apart (pair · policy · sampling · date), also when the same
    run is loaded twice; cards sit under their target and run."""
    n = len(traces.bundled_paths(kind="trace"))
    app.toggle(key="ov_cards").set_value(True).run()
    titles = card_titles(app)
    assert len(titles) == n and len(set(titles)) == n, titles
    fixed4 = traces.all_traces()["demo-tiny-fixed4.jsonl"].info
    assert f"{fixed4['pair']} · fixed:4 · greedy · {fixed4['created'][:10]}" in titles
    assert any(t.endswith(f"T = 0.7 · {fixed4['created'][:10]}") for t in titles)  # the sampled RBV demo
    assert any(h.value.startswith("Target tiny-random-llama-target") for h in app.subheader)
    assert any(m.value.startswith("**Run · ") for m in app.markdown)
    at = goto(app, "upload")  # the same trace again under another name: still told apart
    raw = (trace_dir / "demo-tiny-fixed4.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(("again.jsonl", raw, "application/json")).run()
    at = goto(at, "overview")
    at.toggle(key="ov_cards").set_value(True).run()
    titles = card_titles(at)
    assert len(titles) == n + 1 and len(set(titles)) == n + 1, titles
