"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
from pathlib import Path
import pytest
from streamlit.testing.v1 import AppTest

from app import downloads
from tests.conftest import MAIN, TIMEOUT
from tests.system.app.conftest import goto


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
    from app import live_inputs, live_queue

    before = dict(at.session_state["live_result"])
    panes = [m.value for m in at.markdown if m.value.startswith("**A · ") or m.value.startswith("**B · ")]
    assert len(panes) == 2
    for key, value, field in (("live_temp", 5.0, "Temperature"), ("live_b", "banana", "Policy B"),
                              ("live_b", "fixed:0", "Policy B"), ("live_max", 0, "Max new tokens")):
        widget = at.number_input(key=key) if key != "live_b" else at.text_input(key=key)
        widget.set_value(value)
        at = at.button(key="live_run").click().run()  # the edit and the click arrive in the same rerun
        assert any(e.value.startswith(field) for e in at.error), (key, [e.value for e in at.error])
        assert len(live_queue.model_queue()) == 0  # nobody left waiting in line
        assert at.button(key="live_run").disabled  # and from now on Decode cannot be pressed
        assert at.session_state["live_result"] == before and not at.exception
        assert [m.value for m in at.markdown if m.value.startswith(("**A · ", "**B · "))] == panes
        assert any(":orange-badge[stale]" in m.value for m in at.markdown)  # the inputs no longer match the run
        at = at.number_input(key="live_temp").set_value(0.0).run()
        at = at.text_input(key="live_b").set_value("heuristic").run()
        at = at.number_input(key="live_max").set_value(4).run()
    at.text_input(key="live_a").set_value("banana").run()
    msg = next(e.value for e in at.error if e.value.startswith("Policy A"))
    assert all(name in msg for name in live_inputs.policy_names())  # every policy the engine accepts, by name
    assert {"pacer", "autoregressive", "fixed", "heuristic", "confidence", "cumulative", "entropy"} <= \
        set(live_inputs.policy_names())


def test_live_policy_choice_fills_an_editable_spec(app):
    from app import live_inputs

    at = goto(app, "live")
    assert at.selectbox(key="live_a_kind").options == live_inputs.policy_names()
    at.selectbox(key="live_a_kind").set_value("entropy").run()
    assert at.text_input(key="live_a").value == live_inputs.preset("entropy")
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
    from app import live_inputs, live_run
    from engine.trace.format import load_trace

    at = goto(app, "live")
    box = at.selectbox(key="live_a_draft_kind")
    assert box.value == "model" and box.options[0] == "draft model (tiny-random-llama-draft)"
    at.selectbox(key="live_a_draft_kind").set_value("suffix").run()
    assert at.text_input(key="live_a_draft").value == live_inputs.draft_preset("suffix") == "suffix:n=16"
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
        k, context, src = live_run.last_copy(t.steps, t.requests[0]["prompt_ids"])
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
    from app import live_models

    monkeypatch.setattr(live_models, "qwen_installed", lambda: False)
    at = goto(app, "live")
    assert at.selectbox(key="live_pair").options == [f"{live_models.DEMO_TARGET} ← {live_models.DEMO_DRAFT}"]
    assert any("make models" in c.value for c in at.caption)
    monkeypatch.setattr(live_models, "qwen_installed", lambda: True)  # offered, not loaded (the tests never load it)
    at = goto(at, "live")
    assert at.selectbox(key="live_pair").options[1] == f"{live_models.QWEN_TARGET} ← {live_models.QWEN_DRAFT}"
    assert at.selectbox(key="live_pair").options[2].endswith("quantized weights (CPU fast path)")
    assert not any("make models" in c.value for c in at.caption)


def test_live_run_folders_are_removed(app):
    """Each run writes into a fresh temp folder; the previous one goes at the next run, and the last one
    when the session's state is dropped."""
    import gc

    from app import live_run

    at = goto(app, "live")
    at.number_input(key="live_max").set_value(3).run()
    at.button(key="live_run").click().run()
    first = Path(at.session_state["live_result"]["paths"]["A"]).parent
    assert first.is_dir()
    at.button(key="live_run").click().run()
    second = Path(at.session_state["live_result"]["paths"]["A"]).parent
    assert second.is_dir() and not first.exists()
    d = live_run.RunDir()
    path = d.path
    del d
    gc.collect()
    assert not path.exists()


def test_live_checks_and_queue(tmp_path, monkeypatch):
    """Rules the decoder would refuse mid-run are refused up front; a run waits in line for the shared
    models (their KV caches) and the line is first come, first served."""
    import threading
    import time

    from app import live_inputs, live_models, live_queue, live_run
    from engine.decode import DecodeConfig
    from engine.trace.format import load_trace

    pair = live_models.demo_pair("tiny")
    ids, policies, err = live_inputs.check_inputs(pair, "hello", {"A": "fixed:2", "B": "autoregressive"}, 4)
    assert err is None and policies["B"] is None
    _, _, err = live_inputs.check_inputs(pair, "hello", {"A": "pacer:b=2,trim=1", "B": "fixed:2"}, 4, temperature=0.7)
    assert err.startswith("Policy A:") and "greedy decoding only" in err
    _, _, err = live_inputs.check_inputs(pair, "hello", {"A": "fixed:2", "B": "pacer"}, 4)
    assert err.startswith("Policy B:") and "576-dim" in err  # committed M_Bs: 576 (SmolLM2), 896 (Qwen); tiny: 32

    q = live_queue.ModelQueue()
    holder = q.take()  # another session holds the models
    assert q.wait(holder, 1)
    specs = {"A": "fixed:2", "B": "autoregressive"}
    monkeypatch.setattr(live_run, "LOCK_WAIT_S", 0.05)
    with pytest.raises(TimeoutError, match="another session"):
        live_run.run_pair(pair, ids, "hello", specs, policies, DecodeConfig(max_new_tokens=4), tmp_path,
                      lambda *a: None, queue=q)
    monkeypatch.undo()
    assert len(q) == 1  # the timed-out run left the line

    order, waits = [], {}

    def session(name: str, ticket: int) -> None:
        out = tmp_path / name
        out.mkdir()
        live_run.run_pair(pair, ids, "hello", specs, policies, DecodeConfig(max_new_tokens=4), out,
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

    from app import live_queue

    q = live_queue.ModelQueue()
    t = threading.Thread(target=q.take)
    t.start()
    t.join()
    mine = q.take()
    assert q.wait(mine, 1) and q.position(mine) == 0  # the vanished session does not block the line


def test_example_prompts_cover_every_task_type():
    from engine.trace.prompts import EXAMPLE_PROMPTS, MT_BENCH, task_of

    assert len(EXAMPLE_PROMPTS) == 6 and len({p.question_id for p in EXAMPLE_PROMPTS}) == 6
    cats = {p.category for p in EXAMPLE_PROMPTS}
    assert {"writing", "roleplay"} <= MT_BENCH and {"writing", "roleplay"} <= cats
    assert {task_of(c) for c in cats} >= {"mt_bench", "translation", "summarization", "math_reasoning"}
    assert cats & {"qa", "rag"}
    assert all(len(p.text) > 40 for p in EXAMPLE_PROMPTS)
    from app.live_inputs import DEV_QUESTIONS

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


def test_live_runs_the_draft_model_through_a_context_window(app):
    """A side can draft with the pair's draft model reading only the prompt's first S and last W tokens: greedy
    output equal to the baseline's, the window in the trace header, the pane and the file name; a bad window is
    refused under its field before anything runs."""
    from app import live_inputs
    from engine.trace.format import load_trace

    at = goto(app, "live")
    at.selectbox(key="live_a_draft_kind").set_value(live_inputs.CONTEXT_DRAFT).run()
    assert at.text_input(key="live_a_draft").value == "ctx:192"
    at.text_input(key="live_a_draft").set_value("ctx:3,sink=1").run()
    at.text_area(key="live_text").set_value("the cat sat on the mat; the cat sat on the mat; the cat").run()
    at.number_input(key="live_max").set_value(8).run()
    assert not at.error
    at.button(key="live_run").click().run()
    assert not at.exception and not at.error
    res = at.session_state["live_result"]
    a, b, base = (load_trace(res["paths"][k]) for k in ("A", "B", "baseline"))
    assert a.complete and a.header["draft"]["context"] == {"window": 3, "sink": 1}
    assert "context" not in b.header["draft"]
    assert a.ends[0]["output_ids"] == base.ends[0]["output_ids"]  # greedy: the target's own tokens
    assert Path(res["paths"]["A"]).name.startswith("live-A-ctx")
    heads = [m.value for m in at.markdown if m.value.startswith("**A · ")]
    assert "← tiny-random-llama-draft [ctx:3,sink=1] ·" in heads[0]
    at = at.text_input(key="live_a_draft").set_value("ctx:0").run()
    assert any(e.value.startswith("Draft A") and "a window of 0" in e.value for e in at.error), \
        [e.value for e in at.error]
    assert at.button(key="live_run").disabled
