"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import audit_view, data, downloads, plots, tokens
from engine.trace.format import load_trace
from tests.conftest import MAIN, REPO, TIMEOUT


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    from app.make_demo_traces import main

    d = tmp_path_factory.mktemp("traces")
    assert main(["--out", str(d), "--max-new-tokens", "16", "--prompt-bytes", "12"]) == 0
    return d


@pytest.fixture()
def app(trace_dir, monkeypatch):
    monkeypatch.setenv(data.TRACES_ENV, str(trace_dir))
    monkeypatch.setenv("SPECLAB_LIVE_MODELS", "tiny")
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    assert not at.exception
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def broken_trace(trace_dir: Path) -> tuple[bytes, int]:
    """A valid trace with one step's `accepted` pushed past its window; returns (bytes, 1-based line)."""
    lines = (trace_dir / "demo-tiny-fixed4.jsonl").read_bytes().split(b"\n")
    i = next(k for k, ln in enumerate(lines) if b'"type": "step"' in ln)
    lines[i] = re.sub(rb'"accepted": \d+', b'"accepted": 99', lines[i], count=1)
    return b"\n".join(lines), i + 1


# ---------------------------------------------------------------- pages


def test_overview_cards(app):
    labels = [m.label for m in app.metric]
    n = len(data.bundled_paths(kind="trace"))
    assert n >= 7 and labels.count("tokens/s") == n and labels.count("emitted / call") == n
    assert any("traces loaded" in m.value for m in app.markdown)
    assert any("tiny-model demo" in i.value for i in app.info)
    # Every number on a card is the engine's own summary of that trace.
    e = data.all_traces()["demo-tiny-fixed4.jsonl"]
    assert str(e.info["summary"]["target_calls"]) in [m.value for m in app.metric]
    # Every tokens/s carries where and when it was measured.
    assert all("tokens/s measured" in c.value for c in app.caption if "prompts ·" in c.value)


def card_titles(at: AppTest) -> list[str]:
    return [m.value[6:] for m in at.markdown if m.value.startswith("##### ")]


def test_overview_titles_are_unique_and_group_by_run(app, trace_dir):
    """One title per trace that tells it apart (pair · policy · sampling · date), also when the same
    run is loaded twice; cards sit under their target and run."""
    n = len(data.bundled_paths(kind="trace"))
    titles = card_titles(app)
    assert len(titles) == n and len(set(titles)) == n, titles
    fixed4 = data.all_traces()["demo-tiny-fixed4.jsonl"].info
    assert f"{fixed4['pair']} · fixed:4 · greedy · {fixed4['created'][:10]}" in titles
    assert any(t.endswith(f"T = 0.7 · {fixed4['created'][:10]}") for t in titles)  # the sampled RBV demo
    assert any(h.value.startswith("Target tiny-random-llama-target") for h in app.subheader)
    assert any(m.value.startswith("**Run · ") for m in app.markdown)
    at = goto(app, "upload")  # the same trace again under another name: still told apart
    raw = (trace_dir / "demo-tiny-fixed4.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(("again.jsonl", raw, "application/json")).run()
    at = goto(at, "overview")
    titles = card_titles(at)
    assert len(titles) == n + 1 and len(set(titles)) == n + 1, titles


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


def test_windows_page_uses_engine_analysis(app):
    at = goto(app, "windows")
    got = {m.label: m.value for m in at.metric}
    assert {"best fixed γ*", "oracle (a) speedup", "oracle ÷ best fixed"} <= set(got)
    before = got["speedup at γ*"]
    at.slider(key="win_c").set_value(0.3).run()
    assert not at.exception and {m.label: m.value for m in at.metric}["speedup at γ*"] != before
    titles = {json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")}
    assert {"Speedup vs window", "Cost of one speculative step", "Oracle ÷ best fixed window"} <= titles
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
    monkeypatch.setenv(data.TRACES_ENV, str(refs))
    at = goto(AppTest.from_file(MAIN, default_timeout=TIMEOUT).run(), "windows")
    assert at.multiselect(key="win_refs").value == ["ref-qwen-greedy-w8.jsonl"]
    assert not any("blend" in w.value for w in at.warning)
    text = [m.value for m in at.markdown]
    said = "\n".join(text)
    assert "At a glance: qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b" in [h.value for h in at.subheader]
    gain = next(t for t in text if t.startswith("**Oracle gain.** Oracle (a) ÷ best fixed window: **"))
    assert "per task — paper: up to 1.4×; this " in gain and gain.endswith(" the paper's figure.")
    assert any(t.startswith("**Gap closed.** ") and ("(0 = best fixed" in t or "to the oracle (1)" in t) for t in text)
    sweep = data.pacer_sweep_for("qwen2.5-coder-0.5b")  # this draft's own pre-verifier and its sweep
    assert sweep.endswith("pacer-sweep-qwen.json")
    pos = story.pacer_position(data.pacer_ceiling(sweep))
    assert (f"**PACER.** PACER's pre-verifier for qwen2.5-coder-0.5b (models/pacer-qwen) reaches "
            f"{story.num(pos['of_oracle'])} of the oracle's speedup, {story.num(pos['position'])} of the way") in said
    pair = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
    found = story.find_bench(data.bench_results(), *pair)  # the newest bench of the pair with an oracle row
    real = story.bench_oracle_ratio(found[1])
    assert f"{story.REAL_LABEL} {story.num(real['ratio'])}× (oracle {story.num(real['oracle'])}× AR)" in said
    pb = story.find_bench(data.bench_results(), *pair, need=story.bench_pacer_standing)
    assert pb is not None and story.pacer_wall_clock_sentence(*pb) in said  # PACER on the wall clock
    assert said.count(story.REPLAYED_LABEL) == 1 and said.count(story.WHY_DIFFER) == 1
    assert "**Cost.** Cost model: measured (c = " in said
    charts = {json.loads(c.proto.spec)["layout"]["title"]["text"]: json.loads(c.proto.spec)
              for c in at.get("plotly_chart")}
    wall = charts["Gap closed on the wall clock (bench, greedy)"]["data"][0]
    want = story.bench_gap_closed(pb[1])
    ys = wall["y"] if isinstance(wall["y"], list) else \
        np.frombuffer(base64.b64decode(wall["y"]["bdata"]), dtype=wall["y"]["dtype"]).tolist()  # plotly's typed array
    assert ys == pytest.approx(want["position"].tolist()) and wall["customdata"] == want["policy"].tolist()
    gap = charts["Gap closed by each adaptive policy"]["data"][0]
    assert len(gap["x"]) == 4 and [x.split(":")[0] for x in gap["customdata"]] == \
        ["heuristic", "confidence", "cumulative", "entropy"]

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
    from app import data

    at = goto(app, "windows")
    glance = next(h.value for h in at.subheader if h.value.startswith("At a glance: "))
    draft = glance.rsplit(" ← ", 1)[-1]
    PACER_SWEEP = Path(data.pacer_sweep_for(draft))  # the sweep of the pair the page opened on
    titles = {json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")}
    assert "PACER vs the oracle as the draft gets cheaper" in titles
    at.segmented_control(key="win_ceil_split").set_value("greedy").run()
    assert not at.exception
    want = next(c for c in json.loads(PACER_SWEEP.read_text())["splits"]["greedy"]["ceiling"]
                if c["draft_cost_factor"] == 1.0)
    table = next(d.value for d in at.dataframe if "perfect pre-verifier" in d.value.columns)
    row = table[table["f"] == 1.0].iloc[0]
    assert row["perfect pre-verifier"] == pytest.approx(want["perfect_over_oracle"])
    assert row["best PACER"] == pytest.approx(want["pacer_over_oracle"]) and row["oracle"] == pytest.approx(1.0)


def test_windows_page_degrades_without_analysis(app, monkeypatch):
    monkeypatch.setitem(sys.modules, "engine.offline.analysis", None)  # import now raises ImportError
    at = goto(app, "windows")
    assert any("Window analysis is unavailable" in w.value for w in at.warning)


def test_compare_page(app, trace_dir):
    at = goto(app, "compare")
    assert at.selectbox(key="cmp_a").value != at.selectbox(key="cmp_b").value
    assert any("target calls" in m.label for m in at.metric)
    table = at.dataframe[0].value
    # Every demo trace decodes the same prompts (one per Spec-Bench task, or the built-in fallback lines).
    n_prompts = len(load_trace(trace_dir / "demo-tiny-fixed4.jsonl").requests)
    assert len(table) == n_prompts and {"Δ calls", "Δ ms"} <= set(table.columns)
    at.slider(key="cmp_step").set_value(2).run()
    assert not at.exception


def test_compare_pairs_like_with_like_and_warns_on_mismatch(app):
    """By default B is a trace with the same pair, sampling and prompts as A; switching the filter off and
    picking a sampled trace against a greedy one is allowed, and said. Hardware-free numbers come first."""
    at = goto(app, "compare")
    entries = data.all_traces()
    a, b = at.selectbox(key="cmp_a").value, at.selectbox(key="cmp_b").value
    assert data.comparable(entries[a].info, entries[b].info) == []
    by_title = {t: k for k, t in data.unique_titles(entries).items()}
    options = [by_title[o] for o in at.selectbox(key="cmp_b").options]  # shown by title
    assert len(options) >= 2 and all(not data.comparable(entries[a].info, entries[k].info) for k in options)
    assert not at.warning
    labels = [m.label for m in at.metric]
    assert labels.index("emitted per call · B") < labels.index("decode time · B (ms)")
    assert labels[0].startswith("target calls")
    at.toggle(key="cmp_only").set_value(False).run()
    at.selectbox(key="cmp_b").set_value("demo-tiny-rbv-k3-t07.jsonl").run()
    warn = " ".join(w.value for w in at.warning)
    assert "not a like-for-like pair" in warn and "different sampling (greedy vs T = 0.7)" in warn
    assert any("timed" in c.value and "float32" in c.value for c in at.caption)  # wall clock with its context


def test_malformed_upload_shows_one_line_error_and_nothing_else_breaks(app, trace_dir):
    at = goto(app, "upload")
    raw, line = broken_trace(trace_dir)
    at.file_uploader(key="upload_files").set_value(("broken.jsonl", raw, "application/json")).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].startswith(f"broken.jsonl: line {line}: field 'accepted'")
    good = (trace_dir / "demo-tiny-heuristic.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(
        [("broken.jsonl", raw, "application/json"), ("mine.jsonl", good, "application/json")]).run()
    assert any("mine.jsonl" in s.value for s in at.success)
    for page in ("overview", "replay", "compare"):  # the upload is visible everywhere, the bad file nowhere
        goto(at, page)
    goto(at, "replay")  # its options read "title · label"
    assert any(o.endswith(" · uploaded: mine.jsonl") for o in at.selectbox(key="replay_trace").options)
    assert not any("broken" in o for o in at.selectbox(key="replay_trace").options)


def test_parquet_upload(app, trace_dir, tmp_path):
    from engine.trace.format import load_trace, to_parquet

    pq = tmp_path / "t.parquet"
    to_parquet(load_trace(trace_dir / "demo-tiny-fixed2.jsonl"), pq)
    at = goto(app, "upload")
    at.file_uploader(key="upload_files").set_value(("t.parquet", pq.read_bytes(), "application/octet-stream")).run()
    assert not at.error and any("t.parquet" in s.value for s in at.success)
    at.file_uploader(key="upload_files").set_value(("junk.parquet", b"not parquet", "application/octet-stream")).run()
    assert len(at.error) == 1 and at.error[0].value.startswith("junk.parquet: not a readable Parquet file")


def test_reference_upload_reaches_windows(app, trace_dir):
    at = goto(app, "upload")
    ref = (trace_dir / "demo-tiny-reference.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(("my-ref.jsonl", ref, "application/json")).run()
    assert not at.error and any("1 reference runs" in m.value for m in at.subheader)
    bad = ref.replace(b'"mode": "greedy"', b'"mode": "fast"', 1)
    at.file_uploader(key="upload_files").set_value(("bad-ref.jsonl", bad, "application/json")).run()
    assert len(at.error) == 1 and at.error[0].value.startswith("bad-ref.jsonl: line 1")
    at = goto(at, "windows")
    assert "uploaded: my-ref.jsonl" in at.multiselect(key="win_refs").options


def test_live_page_decodes_side_by_side_and_opens_in_replay(app):
    at = goto(app, "live")
    assert any("tiny random demo models" in w.value for w in at.warning)
    at.number_input(key="live_max").set_value(8).run()
    at.button(key="live_run").click().run()
    assert not at.exception and not at.error
    assert [m.label for m in at.metric].count("target calls") == 3  # A, B and the autoregressive baseline
    res = at.session_state["live_result"]
    assert res["state"] == "finished"
    from engine.trace.format import load_trace

    for side in ("A", "B"):
        t = load_trace(res["paths"][side])
        assert t.complete and t.summary["new_tokens"] == 8
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == [downloads.JSONL_LABEL, downloads.PARQUET_LABEL, downloads.PERFETTO_LABEL] * 2  # per side
    next(b for b in at.button if b.label == "Open A in Replay").click().run()
    assert not at.exception
    assert at.selectbox(key="replay_trace").value.startswith("live: live-A-")


def test_live_page_refuses_bad_input(app):
    """Invalid fields disable Decode and name themselves; a click that arrives together with the bad edit
    runs nothing and leaves the last run's panes as they were."""
    at = goto(app, "live")
    at.text_area(key="live_text").set_value("   ").run()
    assert [e.value for e in at.error] == ["The prompt is empty: pick a question or type one."]
    assert at.button(key="live_run").disabled
    at.text_area(key="live_text").set_value("hi").run()
    at.number_input(key="live_max").set_value(4).run()
    at.button(key="live_run").click().run()
    from app import live

    before = dict(at.session_state["live_result"])
    panes = [m.value for m in at.markdown if m.value.startswith("**A · ") or m.value.startswith("**B · ")]
    assert len(panes) == 2
    for key, value, field in (("live_temp", 5.0, "Temperature"), ("live_b", "banana", "Policy B"),
                              ("live_b", "fixed:0", "Policy B"), ("live_max", 0, "Max new tokens")):
        widget = at.number_input(key=key) if key != "live_b" else at.text_input(key=key)
        widget.set_value(value)
        at = at.button(key="live_run").click().run()  # the edit and the click arrive in the same rerun
        assert any(e.value.startswith(field) for e in at.error), (key, [e.value for e in at.error])
        assert len(live.model_queue()) == 0  # nobody left waiting in line
        assert at.button(key="live_run").disabled  # and from now on Decode cannot be pressed
        assert at.session_state["live_result"] == before and not at.exception
        assert [m.value for m in at.markdown if m.value.startswith(("**A · ", "**B · "))] == panes
        assert any(":orange-badge[stale]" in m.value for m in at.markdown)  # the inputs no longer match the run
        at = at.number_input(key="live_temp").set_value(0.0).run()
        at = at.text_input(key="live_b").set_value("heuristic").run()
        at = at.number_input(key="live_max").set_value(4).run()
    at.text_input(key="live_a").set_value("banana").run()
    msg = next(e.value for e in at.error if e.value.startswith("Policy A"))
    assert all(name in msg for name in live.policy_names())  # every policy the engine accepts, by name
    assert {"pacer", "autoregressive", "fixed", "heuristic", "confidence", "cumulative", "entropy"} <= \
        set(live.policy_names())


def test_live_policy_choice_fills_an_editable_spec(app):
    from app import live

    at = goto(app, "live")
    assert at.selectbox(key="live_a_kind").options == live.policy_names()
    at.selectbox(key="live_a_kind").set_value("entropy").run()
    assert at.text_input(key="live_a").value == live.preset("entropy")
    at.text_input(key="live_a").set_value("confidence:0.3,max=8").run()
    assert at.selectbox(key="live_a_kind").value == "confidence" and not at.error


def test_live_labels_panes_with_what_ran_and_reports_speedup(app):
    at = goto(app, "live")
    at.number_input(key="live_max").set_value(6).run()
    at.text_input(key="live_b").set_value("autoregressive").run()
    at.button(key="live_run").click().run()
    assert not at.exception and not at.error
    res = at.session_state["live_result"]
    assert set(res["paths"]) == {"A", "B", "baseline"}
    from engine.trace.format import load_trace

    base = load_trace(res["paths"]["baseline"])
    assert base.header["policy"]["spec"] == "autoregressive" and base.complete
    heads = [m.value for m in at.markdown if m.value.startswith(("**A · ", "**B · "))]
    a = load_trace(res["paths"]["A"]).header
    assert heads[0].startswith(f"**A · {a['policy']['spec']} · ") and "greedy" in heads[0]
    assert heads[1].startswith("**B · autoregressive · ")
    speedups = [m.value for m in at.metric if m.label == "speedup"]
    assert len(speedups) == 2 and all(v.endswith("×") for v in speedups)
    want = load_trace(res["paths"]["A"]).summary["tokens_per_s"] / base.summary["tokens_per_s"]
    assert speedups[0] == f"{want:.2f}×"
    assert any("Timed on this machine" in c.value for c in at.caption)


def test_live_runs_model_free_drafters_side_by_side(app):
    """Each side can draft with lookup or suffix instead of the draft model: the run goes through the same
    decode loop (lossless at T = 0: the baseline's tokens), the panes say which drafter ran and show where
    the latest draft was copied from, and bad drafter input is refused under its field before anything runs."""
    from app import live
    from engine.trace.format import load_trace

    at = goto(app, "live")
    box = at.selectbox(key="live_a_draft_kind")
    assert box.value == "model" and box.options[0] == "draft model (tiny-random-llama-draft)"
    at.selectbox(key="live_a_draft_kind").set_value("suffix").run()
    assert at.text_input(key="live_a_draft").value == live.draft_preset("suffix") == "suffix:n=16"
    at.text_input(key="live_a_draft").set_value("suffix:n=8").run()
    at.selectbox(key="live_b_draft_kind").set_value("lookup").run()
    assert at.text_input(key="live_b_draft").value == "lookup:n=10,ngram=2"
    at.text_input(key="live_b").set_value("matchlen:1,offset=2,max=8").run()
    # Repeats in the prompt: the first step's context ends in an n-gram that occurred before.
    at.text_area(key="live_text").set_value("the cat sat on the mat; the cat sat on the mat; the cat").run()
    at.number_input(key="live_max").set_value(12).run()
    assert not at.error
    at.button(key="live_run").click().run()
    assert not at.exception and not at.error
    res = at.session_state["live_result"]
    base = load_trace(res["paths"]["baseline"])
    for side, spec in (("A", "suffix:n=8,depth=32,p=0.1"), ("B", "lookup:n=10,ngram=2")):
        t = load_trace(res["paths"][side])
        assert t.complete and t.header["draft"]["name"] == spec
        assert t.ends[0]["output_ids"] == base.ends[0]["output_ids"]  # greedy: the target's own tokens
        assert all("drafter" in d["policy_fields"] for d in t.steps)
        k, context, src = live.last_copy(t.steps, t.requests[0]["prompt_ids"])
        a, b = src["span"]
        assert context[a:b] == t.steps[k]["draft_tokens"][: b - a]  # the span indexes the context it shows
    b_steps = load_trace(res["paths"]["B"]).steps
    assert b_steps[0]["policy_fields"]["drafter"]["source"] == "prompt"
    heads = [m.value for m in at.markdown if m.value.startswith(("**A · ", "**B · "))]
    assert "← suffix:n=8,depth=32,p=0.1 · " in heads[0] and "← lookup:n=10,ngram=2 · " in heads[1]
    copied = [m.value for m in at.markdown if m.value.startswith("**Copied from the ")]
    assert len(copied) == 2 and len([m for m in at.markdown if 'class="copy-source"' in m.value]) == 2
    assert Path(res["paths"]["B"]).name.startswith("live-B-lookup")
    # Bad drafter input is refused under its field; a policy the drafter cannot feed under the policy.
    for key, value, field, words in (("live_b_draft", "banana", "Draft B", "unknown drafter 'banana'"),
                                     ("live_b_draft", "lookup:x=1", "Draft B", "no parameter 'x'"),
                                     ("live_a", "pacer", "Policy A", "hidden states")):
        at = at.text_input(key=key).set_value(value).run()
        assert any(e.value.startswith(field) and words in e.value for e in at.error), [e.value for e in at.error]
        assert at.button(key="live_run").disabled
        assert any(":orange-badge[stale]" in m.value for m in at.markdown)
    at = at.text_input(key="live_a").set_value("fixed:4").run()
    at = at.text_input(key="live_b_draft").set_value("model").run()
    assert not at.error and at.selectbox(key="live_b_draft_kind").value == "model"
    assert any("Draft B" in m.value for m in at.markdown if ":orange-badge[stale]" in m.value)


def test_live_offers_installed_pairs_only(app, monkeypatch):
    from app import live

    monkeypatch.setattr(live, "qwen_installed", lambda: False)
    at = goto(app, "live")
    assert at.selectbox(key="live_pair").options == [f"{live.DEMO_TARGET} ← {live.DEMO_DRAFT}"]
    assert any("make models" in c.value for c in at.caption)
    monkeypatch.setattr(live, "qwen_installed", lambda: True)  # offered, not loaded (the tests never load it)
    at = goto(at, "live")
    assert at.selectbox(key="live_pair").options[1] == f"{live.QWEN_TARGET} ← {live.QWEN_DRAFT}"
    assert not any("make models" in c.value for c in at.caption)


def test_live_run_folders_are_removed(app):
    """Each run writes into a fresh temp folder; the previous one goes at the next run, and the last one
    when the session's state is dropped."""
    import gc

    from app import live

    at = goto(app, "live")
    at.number_input(key="live_max").set_value(3).run()
    at.button(key="live_run").click().run()
    first = Path(at.session_state["live_result"]["paths"]["A"]).parent
    assert first.is_dir()
    at.button(key="live_run").click().run()
    second = Path(at.session_state["live_result"]["paths"]["A"]).parent
    assert second.is_dir() and not first.exists()
    d = live.RunDir()
    path = d.path
    del d
    gc.collect()
    assert not path.exists()


# ---------------------------------------------------------------- pure helpers


def test_add_trace_bytes_limits(monkeypatch):
    monkeypatch.setattr(data, "MAX_UPLOAD_MB", 0)
    label, err = data.add_trace_bytes("x.jsonl", b"{}")
    assert label is None and "exceeds the 0 MB upload limit" in err
    monkeypatch.setattr(data, "MAX_UPLOAD_MB", 50)
    assert "expected a .jsonl or .parquet" in data.add_trace_bytes("x.csv", b"a,b")[1]
    cfg = (REPO / ".streamlit" / "config.toml").read_text()
    assert f"maxUploadSize = {data.MAX_UPLOAD_MB}" in cfg  # the stated limit is the server's limit


def test_draft_fates_and_step_pieces():
    assert data.draft_fates(2, 4) == ["accepted", "accepted", "rejected", "pending"]
    assert data.draft_fates(3, 3) == ["accepted"] * 3
    step = {"draft_tokens": [5, 6, 7], "accepted": 1, "window": 3, "emitted_tokens": [5, 9], "bonus": None,
            "correction": 9, "q_draft": [0.9, 0.5, 0.4], "p_target": [0.8, 0.1, 0.3], "accept_probs": [1, 0.2, 0.7]}
    texts = {5: "a", 6: "<b>", 7: "c", 9: "d"}
    pieces = tokens.step_pieces(step, texts)
    assert [p[1] for p in pieces] == ["accepted", "rejected", "pending", "correction"]
    assert [p[1] for p in tokens.emitted_pieces(step, texts)] == ["accepted", "correction"]
    html = tokens.strip(pieces)
    assert "&lt;b&gt;" in html and "<b>" not in html  # token text is escaped
    assert plots.COLORS["rejected"] in html and "line-through" in html


def test_frames_and_describe(trace_dir):
    from engine.trace.format import load_trace

    t = load_trace(trace_dir / "demo-tiny-heuristic.jsonl")
    e = data.make_entry("x", "bundled", t)
    assert len(e.steps) == len(t.steps) and e.steps["emitted"].sum() == t.summary["new_tokens"]
    assert (e.steps["rejected"] + e.steps["pending"] == e.steps["window"] - e.steps["accepted"]).all()
    assert e.steps["rejected"].isin([0, 1]).all()  # one rejected draft at most; the ones after it are pending
    assert len(e.positions) == t.summary["drafted_tokens"]
    assert e.info["demo"] and e.info["policy"].startswith("heuristic") and "qa" in e.info["tasks"]
    req = data.requests_frame(t, e.steps)
    assert req["new_tokens"].sum() == t.summary["new_tokens"]


def test_figures_are_pure_and_share_the_palette(trace_dir):
    from engine.trace.format import load_trace

    e = data.make_entry("x", "bundled", load_trace(trace_dir / "demo-tiny-fixed4.jsonl"))
    one = e.steps[e.steps["request_id"] == 0]
    fig = plots.step_timeline(one, cursor=1).to_dict()
    assert any(s.get("type") == "line" for s in fig["layout"].get("shapes", []))  # the cursor
    heat = plots.position_heatmap(e.positions[e.positions["request_id"] == 0]).to_dict()
    assert heat["data"][0]["type"] == "heatmap" and heat["data"][0]["zmax"] == 1
    assert plots.policy_scores({}, 3) is None
    pf = plots.policy_scores({"scores": [0.9, 0.4, 0.2], "threshold": 0.5, "stop": "score"}, 3).to_dict()
    assert pf["data"][0]["y"] == (0.9, 0.4, 0.2) or list(pf["data"][0]["y"]) == [0.9, 0.4, 0.2]
    dist = pd.DataFrame({"policy": ["a", "a", "b"], "emitted": [1, 2, 3]})
    assert plots.accepted_distribution(dist, ecdf=True).to_dict()["data"][0]["type"] == "scatter"


def test_pending_drafts_grey_and_autoregressive_tokens_neutral(trace_dir):
    """Never-checked drafts are 'pending' (grey) in the timeline as in the token strip, not 'rejected';
    a plain target step's token has its own neutral colour, not the bonus blue."""
    from engine.trace.format import load_trace

    e = data.make_entry("x", "bundled", load_trace(trace_dir / "demo-tiny-fixed8.jsonl"))
    fates = e.positions["fate"].value_counts()
    assert fates.get("pending", 0) > 0  # the fixture has some, or this test proves nothing
    bars = {d.name: d for d in plots.step_timeline(e.steps).data if d.type == "bar"}
    assert sum(bars["pending"].y) == fates["pending"] and sum(bars["rejected"].y) == fates["rejected"]
    assert bars["pending"].marker.color == plots.COLORS["pending"]
    ar = data.make_entry("y", "bundled", load_trace(trace_dir / "demo-tiny-autoregressive.jsonl"))
    bars = {d.name: d for d in plots.step_timeline(ar.steps).data if d.type == "bar"}
    assert sum(bars["autoregressive"].y) == len(ar.steps) and sum(bars["bonus"].y) == 0
    assert bars["autoregressive"].marker.color == plots.COLORS["autoregressive"] != plots.COLORS["bonus"]
    step = ar.trace.steps[0]
    assert [f for _, f, _ in tokens.step_pieces(step, {t: "x" for t in step["emitted_tokens"]})] == ["autoregressive"]
    heat = plots.position_heatmap(e.positions).to_dict()
    grey = [d for d in heat["data"] if d.get("name") == "pending"]
    assert grey and grey[0]["colorscale"][0][1] == plots.COLORS["pending"]


def test_every_figure_shares_one_layout(trace_dir, tmp_path):
    """One figure style: title in the top margin, legend vertical outside the plot on the right (never over
    the title or the data), height that fits every legend entry, axis titles, colour bars titled in
    words, and one distinct colour per series."""
    from app import dpace_plots, sweep_plots
    from engine.trace.format import load_trace

    e = data.make_entry("x", "bundled", load_trace(trace_dir / "demo-tiny-fixed4.jsonl"))
    many = pd.DataFrame({"series": [f"trace-{i}" for i in range(12) for _ in range(3)],
                         "emitted": [1, 2, 3] * 12})
    verdicts = audit_view.verdicts(audit_view.load_audit(REPO / "docs" / "results" / "audit.csv"))
    summary = json.loads((REPO / "docs" / "results" / "dpace" / "summary.json").read_text())
    from engine.bench.sweep import SUMMARY_NAME

    sweep = pd.read_parquet(synthetic_sweep(tmp_path / "sweep") / SUMMARY_NAME)
    figs = [plots.step_timeline(e.steps[e.steps["request_id"] == 0]), plots.position_heatmap(e.positions),
            plots.position_rate(e.positions), plots.accepted_distribution(many, color="series"),
            plots.accepted_distribution(many, color="series", ecdf=True), plots.audit_errors(verdicts, 1e-12),
            plots.cumulative_compare({"A": e.steps, "B": e.steps}), dpace_plots.alpha_sweep(summary),
            sweep_plots.speedup_heatmap(sweep)]
    for fig in figs:
        d = fig.to_dict()
        lay = d["layout"]
        title = lay["title"]["text"]
        assert lay["title"]["yref"] == "container" and lay["xaxis"]["title"]["text"] and lay["yaxis"]["title"]["text"]
        entries = [t for t in d["data"] if t.get("showlegend") is not False and t.get("name")]
        if lay.get("showlegend"):
            assert lay["legend"]["orientation"] == "v" and lay["legend"]["x"] > 1, title
            assert lay["height"] >= 110 + plots.LEGEND_ROW_PX * len(entries), title
        for t in d["data"]:
            if t["type"] == "heatmap" and t.get("showscale", True):
                assert len(t["colorbar"]["title"]["text"]) > 3, title  # words, not a symbol
        assert not lay.get("annotations") or title.startswith("Worst"), title  # no labels sitting on the data
    colors = [t["marker"]["color"] for t in plots.accepted_distribution(many, color="series").to_dict()["data"]]
    assert len(set(colors)) == 12


def test_bundled_traces_all_load():
    """Whatever sits in traces/ (demo or real) must load, or the Overview reports it as broken."""
    paths = data.bundled_paths(REPO / "traces")
    assert paths, "traces/ should ship demo traces: python -m app.make_demo_traces"
    from engine.trace.format import load_trace

    for p in paths:
        load_trace(p)


def synthetic_sweep(folder: Path) -> Path:
    """A sweep folder with only summary.parquet (what the Sweeps page reads): 2 policies × 2 tasks."""
    from engine.bench.sweep import SUMMARY_NAME, add_speedup

    rows = [{"task_id": f"{pol}-{task}", "pair": "p", "target": "t", "dtype": "fp32", "policy": pol,
             "verifier": "token", "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0, "max_new_tokens": 8,
             "chat": True, "task": task, "shard_hash": task, "prompts": 1, "new_tokens": 8,
             "decode_ms": 8 / tps * 1e3, "target_calls": 4, "mean_accepted_per_call_excl_bonus": 0.5, "drafted_tokens": 4,
             "mean_emitted_per_call_incl_bonus": 2.0, "draft_acceptance_rate": 0.5, "tokens_per_s": tps}
            for pol, tps in (("autoregressive", 100.0), ("fixed:4", 150.0)) for task in ("qa", "rag")]
    folder.mkdir(parents=True, exist_ok=True)
    add_speedup(pd.DataFrame(rows)).to_parquet(folder / SUMMARY_NAME, index=False)
    return folder


TORCH_FREE_MODULES = ("app.data", "app.plots", "app.tokens", "app.downloads", "app.audit_view", "app.multidraft_view",
                      "app.sweep_plots",
                      "app.dpace_plots", "engine.offline.analysis", "engine.offline.reference", "engine.offline.replay", "engine.bench.sweep",
                      "engine.trace.perfetto", "engine.trace.format", "engine.trace.prompts")


def test_page_modules_do_not_import_torch():
    """A fresh interpreter importing what the torch-free pages use must not load torch (seconds to import)."""
    code = f"import importlib, sys\nfor m in {TORCH_FREE_MODULES!r}: importlib.import_module(m)\n" \
           "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_pages_other_than_live_do_not_import_torch(trace_dir, tmp_path):
    """Only the Live page may pull torch in: every other page, Windows (engine.offline.analysis over reference
    runs), Sweeps, D-PACE and Audit included, runs in a fresh interpreter without it."""
    sweep = synthetic_sweep(tmp_path / "sweep")
    code = f"""
import os, sys
os.environ[{data.TRACES_ENV!r}] = {str(trace_dir)!r}
os.environ["SPECLAB_SWEEP_DIR"] = {str(sweep)!r}
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({MAIN!r}, default_timeout={TIMEOUT}).run()
for page in ("replay", "compare", "upload", "overview", "windows", "sweeps", "dpace", "audit"):
    at.switch_page(f"pages/{{page}}.py").run()
    assert not at.exception, (page, [e.value for e in at.exception])
    assert page in ("upload", "overview") or len(at.get("plotly_chart")), page  # the page really drew
    assert "torch" not in sys.modules, page
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_live_checks_and_queue(tmp_path, monkeypatch):
    """Rules the decoder would refuse mid-run are refused up front; a run waits in line for the shared
    models (their KV caches) and the line is first come, first served."""
    import threading
    import time

    from app import live
    from engine.decode import DecodeConfig
    from engine.trace.format import load_trace

    pair = live.demo_pair("tiny")
    ids, policies, err = live.check_inputs(pair, "hello", {"A": "fixed:2", "B": "autoregressive"}, 4)
    assert err is None and policies["B"] is None
    _, _, err = live.check_inputs(pair, "hello", {"A": "pacer:b=2,trim=1", "B": "fixed:2"}, 4, temperature=0.7)
    assert err.startswith("Policy A:") and "greedy decoding only" in err
    _, _, err = live.check_inputs(pair, "hello", {"A": "fixed:2", "B": "pacer"}, 4)
    assert err.startswith("Policy B:") and "576-dim" in err  # committed M_Bs: 576 (SmolLM2), 896 (Qwen); tiny: 32

    q = live.ModelQueue()
    holder = q.take()  # another session holds the models
    assert q.wait(holder, 1)
    specs = {"A": "fixed:2", "B": "autoregressive"}
    monkeypatch.setattr(live, "LOCK_WAIT_S", 0.05)
    with pytest.raises(TimeoutError, match="another session"):
        live.run_pair(pair, ids, "hello", specs, policies, DecodeConfig(max_new_tokens=4), tmp_path,
                      lambda *a: None, queue=q)
    monkeypatch.undo()
    assert len(q) == 1  # the timed-out run left the line

    order, waits = [], {}

    def session(name: str, ticket: int) -> None:
        out = tmp_path / name
        out.mkdir()
        live.run_pair(pair, ids, "hello", specs, policies, DecodeConfig(max_new_tokens=4), out,
                      lambda side, steps, done: order.append(name) if done and side == "A" else None,
                      queue=q, ticket=ticket, on_wait=lambda ahead: waits.setdefault(name, ahead))

    tickets = {name: q.take() for name in ("first", "second", "third")}  # the clicks, in this order
    threads = [threading.Thread(target=session, args=(n, tickets[n])) for n in ("third", "second", "first")]
    for t in threads:  # started in reverse: the line, not thread scheduling, decides
        t.start()
        time.sleep(0.05)
    time.sleep(0.3)
    assert order == [] and waits == {"first": 1, "second": 2, "third": 3}  # all wait behind the holder
    q.release(holder)
    for t in threads:
        t.join(60)
    assert order == ["first", "second", "third"] and len(q) == 0
    for name in order:
        paths = {p.name: p for p in (tmp_path / name).iterdir()}
        assert len(paths) == 3 and all(load_trace(p).complete for p in paths.values())
    starts = [load_trace(next((tmp_path / n).glob("live-A-*"))).header["live"]["started_at"] for n in order]
    assert starts == sorted(starts)


def test_model_queue_drops_tickets_of_dead_threads():
    import threading

    from app import live

    q = live.ModelQueue()
    t = threading.Thread(target=q.take)
    t.start()
    t.join()
    mine = q.take()
    assert q.wait(mine, 1) and q.position(mine) == 0  # the vanished session does not block the line


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
    assert any(m.label == "stop reason" and "pre_verify" in m.value for m in at.metric)
    assert any("decision" in d.value.columns for d in at.dataframe)


# ---------------------------------------------------------------- downloads, audit, multi-draft, examples


def test_every_table_has_its_csv_button(app, monkeypatch, tmp_path):
    """Each st.dataframe on every page comes with a '⬇ CSV' button carrying that same table."""
    made = []
    real = downloads.csv_button

    def spy(df, name, key, *where):
        made.append((key, name, df))
        return real(df, name, key, *where)

    monkeypatch.setattr(downloads, "csv_button", spy)
    monkeypatch.setenv("SPECLAB_SWEEP_DIR", str(synthetic_sweep(tmp_path / "sweep")))
    for page in ("replay", "windows", "compare", "sweeps", "dpace", "audit"):
        made.clear()
        at = goto(app, page)
        shown = [d.value for d in at.dataframe]
        buttons = [b for b in at.get("download_button") if b.proto.label == downloads.CSV_LABEL]
        assert shown and len(buttons) == len(shown) == len(made), page
        for df, (key, name, sent) in zip(shown, made):
            assert name and list(df.columns) == list(sent.columns) and len(df) == len(sent), (page, key)
            pd.testing.assert_frame_equal(df.reset_index(drop=True), sent.reset_index(drop=True), check_dtype=False)


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
        spans = re.findall(r'<span class="tok-(\w+)"[^>]*>⟨(\d+)⟩</span>', m.group(3))
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
    assert chosen[0]["fates"][:n] == data.draft_fates(s["accepted"], n)  # … coloured by the verifier's outcome
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


def test_multi_draft_rows_colour_only_the_chosen_block():
    step = {"all_drafts": [[1, 2], [3, 4]], "chosen": 1, "draft_tokens": [3, 4], "accepted": 2, "window": 2,
            "emitted_tokens": [3, 4, 5], "bonus": 5, "correction": None, "decisions": [0, 1],
            "q_draft": [0.5, 0.5], "p_target": [0.6, 0.6], "accept_probs": [1.0, 1.0]}
    texts = {i: f"<{i}>" for i in range(6)}
    rows = tokens.multi_draft_rows(step, texts)
    assert [r["chosen"] for r in rows] == [False, True]
    assert [p[1] for p in rows[1]["pieces"]] == ["accepted", "accepted", "bonus"]
    assert "coin ✗" in rows[1]["pieces"][0][2] and "coin ✓" in rows[1]["pieces"][1][2]  # BV: failed coin, accepted
    html = tokens.multi_draft_html(step, texts)
    assert "&lt;1&gt;" in html and "<1>" not in html and plots.COLORS["bonus"] in html
    assert html.count("★ followed") == 1 and html.count("○ not followed") == 1


def test_audit_page_shows_the_verdicts_of_the_csv(app, tmp_path):
    csv = REPO / "docs" / "results" / "audit.csv"
    at = goto(app, "audit")
    want = audit_view.verdicts(pd.read_csv(csv))
    pd.testing.assert_frame_equal(at.dataframe[0].value.reset_index(drop=True), want, check_dtype=False)
    not_ok = want.loc[want["verdict"] != "lossless", "verifier"].tolist()
    assert {m.label: m.value for m in at.metric}["NOT lossless"] == str(len(not_ok))
    assert len(at.warning) == len(not_ok) and all(any(n in w.value for w in at.warning) for n in not_ok)
    # One lossless row pushed to 1e-3 flips that verifier's verdict on the page.
    df = pd.read_csv(csv)
    i = df.index[df["verifier"] == "token"][0]
    df.loc[i, "lossless_error"] = 1e-3
    df.to_csv(tmp_path / "audit.csv", index=False)
    at.text_input(key="audit_csv").set_value(str(tmp_path / "audit.csv")).run()
    shown = at.dataframe[0].value.set_index("verifier")
    assert shown.at["token", "verdict"] == "NOT lossless" and shown.at["token", "worst_case"] == df.at[i, "case"]
    assert not at.exception
    at.text_input(key="audit_csv").set_value(str(tmp_path / "nope.csv")).run()
    assert len(at.error) == 1 and "no such audit file" in at.error[0].value


def synthetic_paired(path: Path) -> Path:
    """A paired multi-draft result with hand-set BE: at T = 0.7, L = 4 RBV K = 4 beats SD by 20 %."""
    rows = []
    for t in (0.4, 0.7):
        for L in (2, 4):
            sd = 2.0 + L / 4
            rows.append({"temperature": t, "L": L, "method": "token", "k": 1, "be": sd, "sr_model": 1.0})
            rows.append({"temperature": t, "L": L, "method": "block", "k": 1, "be": sd * 1.05, "sr_model": 1.0})
            for k in (2, 3, 4):
                rows.append({"temperature": t, "L": L, "method": "rbv", "k": k,
                             "be": sd * (1 + (0.2 if (t, L) == (0.7, 4) else 0.1) * k / 4), "sr_model": 1.1})
                rows.append({"temperature": t, "L": L, "method": "spectr-gbv-published", "k": k, "be": sd * 1.5,
                             "sr_model": 1.2})
    path.write_text(json.dumps({"kind": "paired", "rows": rows, "real_rows": [], "prompts": [{}] * 6,
                                "target": "t", "draft": "d", "dtype": "bfloat16"}))
    return path


def test_audit_page_multidraft_section_matches_the_view(app, tmp_path, monkeypatch):
    """The headline is multidraft_view.headline of the file, the lossy published rule is never the pick,
    and a file that is not a paired result gets one line instead of the section."""
    from app import multidraft_view

    path = synthetic_paired(tmp_path / "paired.json")
    rows, _, _ = multidraft_view.load_paired(path)
    g = multidraft_view.gains(rows).set_index(["temperature", "L"])
    assert g.at[(0.7, 4), "gain"] == pytest.approx(0.2) and g.at[(0.7, 4), "best"] == "RBV (ours), K = 4"
    monkeypatch.setenv("SPECLAB_MULTIDRAFT_JSON", str(path))
    at = goto(app, "audit")
    text = [m.value for m in at.markdown]
    assert multidraft_view.headline(rows, 0.7) in text and "+20%" in multidraft_view.headline(rows, 0.7)
    fig = at.get("plotly_chart")[-1].proto.spec
    assert "Block efficiency by drafts per step, T = 0.7" in fig and "L = 4" in fig
    at.radio(key="md_temp").set_value(0.4).run()
    assert multidraft_view.headline(rows, 0.4) in [m.value for m in at.markdown]
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "sweep", "rows": []}))
    at.text_input(key="md_json").set_value(str(tmp_path / "bad.json")).run()
    assert not at.exception and any("not a paired multi-draft result" in i.value for i in at.info)


def test_example_prompts_cover_every_task_type():
    from engine.trace.prompts import EXAMPLE_PROMPTS, MT_BENCH, task_of

    assert len(EXAMPLE_PROMPTS) == 6 and len({p.question_id for p in EXAMPLE_PROMPTS}) == 6
    cats = {p.category for p in EXAMPLE_PROMPTS}
    assert {"writing", "roleplay"} <= MT_BENCH and {"writing", "roleplay"} <= cats
    assert {task_of(c) for c in cats} >= {"mt_bench", "translation", "summarization", "math_reasoning"}
    assert cats & {"qa", "rag"}
    assert all(len(p.text) > 40 for p in EXAMPLE_PROMPTS)
    from app.live import DEV_QUESTIONS

    if DEV_QUESTIONS.is_file():  # written for the project, not copied from Spec-Bench
        bench = DEV_QUESTIONS.read_text()
        assert not any(p.text[:60] in bench for p in EXAMPLE_PROMPTS)


def test_live_works_without_the_spec_bench_file(app, monkeypatch, tmp_path):
    from app.demo_models import text_to_ids
    from engine.trace.prompts import EXAMPLE_PROMPTS
    from engine.trace.format import load_trace

    monkeypatch.setenv("SPECLAB_SPEC_BENCH", str(tmp_path / "missing" / "questions_dev.jsonl"))
    at = goto(app, "live")
    options = at.selectbox(key="live_choice").options
    assert len(options) == 1 + len(EXAMPLE_PROMPTS)
    assert all(p.text[:60] in o for p, o in zip(EXAMPLE_PROMPTS, options[1:]))
    assert at.text_area(key="live_text").value == EXAMPLE_PROMPTS[0].text
    assert any("Spec-Bench questions not found" in c.value for c in at.caption)
    at.selectbox(key="live_choice").set_value(options[3]).run()
    assert at.text_area(key="live_text").value == EXAMPLE_PROMPTS[2].text
    at.number_input(key="live_max").set_value(6).run()
    at.button(key="live_run").click().run()
    assert not at.exception and not at.error
    res = at.session_state["live_result"]
    assert res["state"] == "finished"
    for side in ("A", "B"):
        t = load_trace(res["paths"][side])
        assert t.complete and t.requests[0]["prompt_text"] == EXAMPLE_PROMPTS[2].text
        assert t.requests[0]["prompt_ids"] == text_to_ids(EXAMPLE_PROMPTS[2].text) and t.summary["new_tokens"] == 6


def test_dpace_page_switches_between_bundled_results(app):
    """The D-PACE page offers every bundled results directory; each choice shows that directory's own
    summary (one row per objective, τ offline as in summary.json)."""
    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    at = goto(app, "dpace")
    radio = at.radio(key="dpace_which")
    present = [o for o in radio.options if o != "other directory…"]
    assert present, radio.options
    folders = {"SmolLM2": "dpace-smollm2", "B = 8": "dpace-b8"}
    for option in present:
        at = at.radio(key="dpace_which").set_value(option).run()
        assert not at.exception
        name = next((v for k, v in folders.items() if k in option), "dpace")
        summary = json.loads((results / name / "summary.json").read_text())["summary"]
        table = at.dataframe[0].value
        assert list(table["objective"]) == [r["label"] for r in summary], option
        assert table["τ offline"].round(3).tolist() == [round(r["tau_offline_mean"], 3) for r in summary]
