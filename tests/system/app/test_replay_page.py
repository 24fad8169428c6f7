"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import json
import re
import pytest
from streamlit.testing.v1 import AppTest

from app import downloads, frames, plots, tokens
from tests.conftest import MAIN, TIMEOUT
from tests.system.app.conftest import goto


def test_replay_slider_and_buttons_move_the_step(app):
    at = goto(app, "replay")
    assert at.selectbox(key="replay_trace").value == "demo-tiny-fixed4.jsonl"  # opens on the fixed baseline
    assert any(m.value.startswith("**Step 0 of") for m in at.markdown)
    at.slider(key="replay_step").set_value(3).run()
    assert any(m.value.startswith("**Step 3 of") for m in at.markdown)
    strip = next(m.value for m in at.markdown if "token-strip" in m.value)
    assert strip.count('class="current-step"') == 1 and "tok-accepted" in strip
    at.button(key="replay_play").click().run()
    assert at.session_state["replay_playing"] is True
    at.button(key="replay_play").click().run()
    assert at.session_state["replay_playing"] is False
    assert at.session_state["replay_step"] >= 3  # the play timer may have advanced it on a slow machine
    at.slider(key="replay_step").set_value(3).run()
    next_button = next(b for b in at.button if b.label == "Next")
    next_button.click().run()
    assert at.session_state["replay_step"] == 4
    assert len(at.get("plotly_chart")) >= 3  # timeline, heatmap, per-position rate
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    timeline = next(f for f in figs if f["layout"]["title"]["text"] == "Tokens per verify call")
    assert {d["name"]: d["marker"]["color"] for d in timeline["data"] if d["type"] == "bar"} == {
        k: plots.COLORS[k] for k in ("accepted", "rejected", "pending", "correction", "bonus")}


def test_replay_switching_trace_resets_the_step(app):
    at = goto(app, "replay")
    at.slider(key="replay_step").set_value(2).run()
    at.selectbox(key="replay_trace").set_value("demo-tiny-heuristic.jsonl").run()
    assert at.session_state["replay_step"] == 0 and not at.exception
    assert any("heuristic" in c.value for c in at.caption)


def test_replay_renders_pacer_style_policy_fields(app, trace_dir):
    """Whatever a policy logs is shown; per-block records with scores and thresholds get a chart."""
    lines = (trace_dir / "demo-tiny-fixed4.jsonl").read_text().split("\n")
    i = next(k for k, ln in enumerate(lines) if '"type": "step"' in ln)
    step = json.loads(lines[i])
    step["policy_fields"] = {"blocks": [
        {"block": 1, "tokens": [1, 2], "scores": [0.9, 0.7], "mean": 0.8, "t_before": 0.5, "t_after": 0.52,
         "decision": "continue"},
        {"block": 2, "tokens": [3, 4], "scores": [0.3, 0.2], "mean": 0.25, "t_before": 0.52, "t_after": 0.5,
         "decision": "stop"}], "stop": "pre_verify", "t0": 0.5}
    lines[i] = json.dumps(step)
    at = goto(app, "upload")
    at.file_uploader(key="upload_files").set_value(("pacer-like.jsonl", "\n".join(lines).encode(), "text/plain")).run()
    assert not at.error
    at.session_state["replay_trace"] = "uploaded: pacer-like.jsonl"
    at = goto(at, "replay")
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "Policy scores this step" in titles
    assert any(m.value.startswith("**Stop reason:**") and "pre_verify" in m.value for m in at.markdown)
    assert any("decision" in d.value.columns for d in at.dataframe)


def test_replay_offers_the_selected_trace_as_parquet_and_perfetto(app):
    at = goto(app, "replay")
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels[:2] == [downloads.PARQUET_LABEL, downloads.PERFETTO_LABEL]
    before = {b.proto.label: b.proto.deferred_file_id for b in at.get("download_button")}
    at.selectbox(key="replay_trace").set_value("demo-tiny-heuristic.jsonl").run()
    after = {b.proto.label: b.proto.deferred_file_id for b in at.get("download_button")}
    assert after[downloads.PARQUET_LABEL] and after[downloads.PARQUET_LABEL] != before[downloads.PARQUET_LABEL]


def draft_rows(html: str) -> list[dict]:
    """Parse app.tokens.multi_draft_html back into rows: draft index, chosen flag, token ids and fates."""
    rows = []
    for m in re.finditer(r'<div class="draft-row" data-draft="(\d+)" data-chosen="(true|false)"(.*?)</div>', html):
        spans = re.findall(r'<span class="tok tok-(\w+)"[^>]*>⟨(\d+)⟩(?:<sup[^>]*>[^<]*</sup>)?</span>', m.group(3))
        rows.append({"draft": int(m.group(1)), "chosen": m.group(2) == "true",
                     "fates": [f for f, _ in spans], "ids": [int(t) for _, t in spans]})
    return rows


def multi_view(at: AppTest) -> list[dict]:
    html = [m.value for m in at.markdown if 'class="multi-draft"' in m.value]
    assert len(html) == 1
    return draft_rows(html[0])


def test_replay_shows_every_drafted_block_of_a_multi_draft_step(app, trace_dir):
    from engine.trace.format import load_trace

    name = "demo-tiny-rbv-k3-t07.jsonl"
    trace = load_trace(trace_dir / name)
    assert trace.header["verifier"] == "rbv" and trace.header["sampling"]["temperature"] == 0.7
    at = goto(app, "replay")
    at.selectbox(key="replay_trace").set_value(name).run()
    steps = [s for s in trace.steps if s["request_id"] == at.session_state["replay_req"]]
    k = min(2, len(steps) - 1)
    if len(steps) > 1:
        at.slider(key="replay_step").set_value(k).run()
    s = steps[k]
    rows = multi_view(at)
    assert len(rows) == len(s["all_drafts"]) == 3  # K strips
    chosen = [r for r in rows if r["chosen"]]
    assert len(chosen) == 1 and chosen[0]["draft"] == s["chosen"]
    n = s["window"]
    assert chosen[0]["ids"][:n] == s["draft_tokens"]  # the followed strip is the step's drafted block …
    assert chosen[0]["fates"][:n] == frames.draft_fates(s["accepted"], n)  # … coloured by the verifier's outcome
    assert chosen[0]["ids"][n:] == s["emitted_tokens"][s["accepted"]:]  # then the correction / bonus
    for r in rows:
        if not r["chosen"]:
            assert r["ids"] == s["all_drafts"][r["draft"]] and set(r["fates"]) == {tokens.UNCHOSEN}


def test_multi_draft_view_follows_the_chosen_draft(app, trace_dir):
    """A step whose verifier followed draft 1 after rejecting: the star, the colours and the grey move with it."""
    lines = (trace_dir / "demo-tiny-rbv-k3-t07.jsonl").read_text().split("\n")
    i = next(j for j, ln in enumerate(lines) if '"type": "step"' in ln and '"request_id": 0' in ln)
    s = json.loads(lines[i])
    blocks = s["all_drafts"]
    blocks[0], blocks[1] = blocks[1], blocks[0]  # the followed block now sits at index 1
    s.update(chosen=1, accepted=1, emitted_tokens=[s["draft_tokens"][0], 7], emitted=2, correction=7, bonus=None,
             decisions=[1] + [0] * (s["window"] - 1))
    lines[i] = json.dumps(s)
    # The loader recomputes what follows from the edit: later contexts, the request's output, the summary.
    recs = [json.loads(ln) for ln in lines if ln.strip()]
    ctx, out = None, []
    for r in recs:
        if r.get("request_id") == 0 and r["type"] == "step":
            r["context_len"] = ctx = r["context_len"] if ctx is None else ctx
            ctx, out = ctx + len(r["emitted_tokens"]), out + r["emitted_tokens"]
        elif r.get("request_id") == 0 and r["type"] == "request_end":
            r.update(output_ids=out, new_tokens=len(out))
    lines = [json.dumps(r) for r in recs if r["type"] != "footer"]
    at = goto(app, "upload")
    at.file_uploader(key="upload_files").set_value(("md.jsonl", "\n".join(lines).encode(), "text/plain")).run()
    assert not at.error, [e.value for e in at.error]
    at.session_state["replay_trace"] = "uploaded: md.jsonl"
    at = goto(at, "replay")
    rows = multi_view(at)
    assert [r["chosen"] for r in rows] == [False, True, False]
    assert rows[1]["ids"] == s["draft_tokens"] + [7]
    assert rows[1]["fates"] == ["accepted", "rejected"] + ["pending"] * (s["window"] - 2) + ["correction"]
    assert rows[0]["ids"] == blocks[0] and set(rows[0]["fates"]) == {tokens.UNCHOSEN}
