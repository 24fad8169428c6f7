"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import pytest
from streamlit.testing.v1 import AppTest

from app import frames, site_map, traces
from engine.trace.format import load_trace
from tests.conftest import MAIN, TIMEOUT
from tests.system.app.conftest import goto


def test_compare_page(app, trace_dir):
    at = goto(app, "compare")
    assert at.selectbox(key="cmp_a").value != at.selectbox(key="cmp_b").value
    assert any("target calls" in m.label for m in at.metric)
    table = next(d.value for d in at.dataframe if "Δ calls" in d.value.columns)  # the per-prompt table
    # Every demo trace decodes the same prompts (one per Spec-Bench task, or the built-in fallback lines).
    n_prompts = len(load_trace(trace_dir / "demo-tiny-fixed4.jsonl").requests)
    assert len(table) == n_prompts and {"Δ calls", "Δ ms"} <= set(table.columns)
    at.slider(key="cmp_step").set_value(2).run()
    assert not at.exception


def test_compare_pairs_like_with_like_and_warns_on_mismatch(app):
    """By default B is a trace with the same pair, sampling and prompts as A; switching the filter off and
    picking a sampled trace against a greedy one is allowed, and said. Hardware-free numbers come first."""
    at = goto(app, "compare")
    entries = traces.all_traces()
    a, b = at.selectbox(key="cmp_a").value, at.selectbox(key="cmp_b").value
    assert frames.comparable(entries[a].info, entries[b].info) == []
    by_title = {t: k for k, t in frames.unique_titles(entries).items()}
    options = [by_title[o] for o in at.selectbox(key="cmp_b").options]  # shown by title
    assert len(options) >= 2 and all(not frames.comparable(entries[a].info, entries[k].info) for k in options)
    assert not at.warning
    labels = [m.label for m in at.metric]
    assert labels.index("emitted per call · B") < labels.index("decode time · B")
    assert labels[0].startswith("target calls")
    at.toggle(key="cmp_only").set_value(False).run()
    at.selectbox(key="cmp_b").set_value("demo-tiny-rbv-k3-t07.jsonl").run()
    warn = " ".join(w.value for w in at.warning)
    assert "not a like-for-like pair" in warn and "different sampling (greedy vs T = 0.7)" in warn
    assert any("timed" in c.value and "float32" in c.value for c in at.caption)  # wall clock with its context


def test_only_comparable_drops_a_linked_incomparable_b_once_a_changes(trace_dir, monkeypatch):
    """A link may pair A with an incomparable B (kept, and warned about); once A changes with the filter on,
    B is chosen among A's comparable traces again — the issue's B that outlived its A."""
    monkeypatch.setenv(traces.TRACES_ENV, str(trace_dir))
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    at.switch_page(site_map.file("compare"))
    at.query_params = {"a": "demo-tiny-fixed4.jsonl", "b": "demo-tiny-rbv-k3-t07.jsonl"}  # B samples at T = 0.7
    at.run()
    assert not at.exception
    entries = traces.all_traces()
    assert at.selectbox(key="cmp_b").value == "demo-tiny-rbv-k3-t07.jsonl"  # the link's B, though incomparable
    assert any("not a like-for-like pair" in w.value for w in at.warning)
    at.selectbox(key="cmp_a").set_value("demo-tiny-fixed2.jsonl").run()
    b = at.selectbox(key="cmp_b").value
    assert b != "demo-tiny-rbv-k3-t07.jsonl" and frames.comparable(entries["demo-tiny-fixed2.jsonl"].info, entries[b].info) == []
    assert not any("not a like-for-like pair" in w.value for w in at.warning)


def test_decode_time_reads_in_seconds_and_deltas_carry_no_doubled_sign():
    from app import fmt

    assert fmt.duration(410321.0) == "6.8 min" and fmt.duration(41032.1) == "41.0 s" and fmt.duration(412.4) == "412 ms"
    assert fmt.delta(-1.04) == ("1.04", "down") and fmt.delta(2.5, "2.5 s") == ("2.5 s", "up")
    assert fmt.delta(0.0) == ("±0", "off") and fmt.delta(None) == (None, "off")
