"""Replay shows, for a lookup step, the context span its draft was copied from (app.tokens.copy_source_html)."""

import re

from streamlit.testing.v1 import AppTest

from app import site_map, tokens, traces
from engine.trace.format import load_trace
from tests.conftest import MAIN, TIMEOUT


def test_copy_source_marks_exactly_the_span():
    ctx = [10, 11, 12, 13, 10, 11]
    texts = {t: f"w{t} " for t in ctx}
    out = tokens.copy_source_html(ctx, {"span": [2, 4], "match": [0, 2], "match_len": 2}, texts)
    assert re.findall(r'<mark class="copied"[^>]*>([^<]*)</mark>', out) == ["w12 ", "w13 "]
    assert re.findall(r'<span class="matched"[^>]*>([^<]*)</span>', out) == ["w10 ", "w11 "]


def test_replay_highlights_the_prompt_span_of_a_lookup_step(model_dirs, tmp_path, monkeypatch):
    from engine.__main__ import main

    t, _, prompts = model_dirs
    out = tmp_path / "lookup.jsonl"
    assert main(["decode", "--target", str(t), "--draft", "lookup:n=4,ngram=1", "--policy", "fixed:4",
                 "--prompts", str(prompts), "--limit", "1", "--max-new-tokens", "16", "--dtype", "fp32",
                 "--out", str(out)]) == 0
    steps = load_trace(out).steps
    k = next(i for i, s in enumerate(steps) if s["policy_fields"]["drafter"].get("span"))
    a, b = steps[k]["policy_fields"]["drafter"]["span"]
    monkeypatch.setenv(traces.TRACES_ENV, str(tmp_path))
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    at.switch_page(site_map.file("replay")).run()
    at.session_state["replay_step"] = k
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    html = next(m.value for m in at.markdown if 'class="copy-source"' in m.value)
    assert len(re.findall(r'<mark class="copied"', html)) == b - a
    assert any(f"positions {a}–{b - 1}" in m.value for m in at.markdown)
