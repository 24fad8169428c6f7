"""What a person meets first, through AppTest: every page opens with a conclusion computed from the data it
shows; Overview's runs table (×AR against the same run's AR, one name per model); uploads kept on disk
across sessions (a reload), removable, and a broken kept file reported in one line and left as it is; the
Replay and Compare views in the URL's query parameters, and a link to something missing noted in one line."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest

from app import persist, runs, site_map, traces
from tests.conftest import MAIN, TIMEOUT
from tests.system.app.conftest import goto

# Every page but Live (its conclusion is a finished run's: test_live_page) and Speedups (it opens on the
# answer sentence of a pair: test_speedups_page).
PAGES = [p.key for p in site_map.PAGES if p.key not in ("live", "speedups")]


def first_info(at: AppTest) -> str:
    assert len(at.info), "no conclusion box"
    return at.info[0].value


@pytest.mark.parametrize("page", PAGES)
def test_every_page_opens_with_a_conclusion(app, page):
    at = goto(app, page)
    assert at.title[0].value == site_map.heading(page)  # the heading the registry gives it
    text = first_info(at)
    assert len(text) > 40 and any(ch.isdigit() for ch in text), text
    assert at.info[0].proto.icon == ":material/lightbulb:"
    # The conclusion comes before the page's detail: the first alert of the page's main block.
    main = list(at.main)
    kinds = [getattr(el, "type", "") for el in main]
    assert kinds.index("info") <= 4, kinds[:6]


def test_overview_conclusion_and_runs_table(app):
    entries = traces.all_traces()
    df = runs.runs_frame(entries)
    shown = first_info(app)  # every "N.NN× AR" links to its row of the Speedups page
    assert re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", shown) == runs.conclusion(df) and "](speedups?" in shown
    table = next(d.value for d in app.dataframe if "×AR" in d.value.columns)
    # speculative runs without an AR run of their own (no ×AR) sit behind a toggle, off by default
    hidden = int((df["speculative"] & df["×AR"].isna()).sum())
    assert list(table.columns) == ["Run", *runs.COLUMNS, "Demo"] and len(table) == len(entries) - hidden
    # ×AR divides by the autoregressive trace of the same run.
    fixed4, ar = entries["demo-tiny-fixed4.jsonl"], entries["demo-tiny-autoregressive.jsonl"]
    row = df[df["label"] == "demo-tiny-fixed4.jsonl"].iloc[0]
    assert row["ar"] == "demo-tiny-autoregressive.jsonl"
    assert row["×AR"] == pytest.approx(fixed4.info["summary"]["tokens_per_s"] / ar.info["summary"]["tokens_per_s"])
    assert row["Dtype"] == "fp32" and row["Drafter"] == "draft model"
    # Navigation: a link to every page, with its line, before the table.
    links = {p.proto.page for p in app.get("page_link")}
    assert {p.url for p in site_map.directory()} <= links  # every other page, from the one list (app/site_map.py)


def test_conclusion_says_why_speculation_is_slower():
    """A synthetic run: speculation slower than AR → the sentence says so, with the draft's cost ratio c."""
    import pandas as pd

    df = pd.DataFrame([{"Pair": "t ← d", "Drafter": "draft model", "Policy": "fixed:4", "Dtype": "bf16",
                        "Prompts": 6, "tasks": "qa", "Emitted / call": 1.3, "×AR": 0.6, "c": 0.42, "v": 1.1,
                        "speculative": True, "demo": False, "label": "x"}])
    text = runs.conclusion(df)
    assert text.startswith("Speculation is slower than autoregressive decoding in every run here")
    assert "c = 0.42" in text and "0.60× AR" in text and "try" in text
    assert "1.10×" in runs.why_slower(df.iloc[0].copy().replace({0.42: 0.01}))


def test_one_name_per_model():
    assert runs.model_name("smollm2-135m-instruct") == runs.model_name("smollm2-135m") == "smollm2-135m"


def test_overview_has_the_per_position_overlay(app):
    import json

    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in app.get("plotly_chart")]
    assert "Per-position acceptance" in titles
    tbl = next(d.value for d in app.dataframe if "mean acceptance length" in d.value.columns)
    assert len(tbl) >= 1 and tbl["acceptance rate"].between(0, 1).all()
    chosen = app.multiselect(key="ov_pos_runs").value
    assert 1 <= len(chosen) <= 5  # a handful of one pair's runs, not every trace


def test_upload_survives_a_new_session_and_can_be_removed(app, trace_dir, uploads_dir):
    raw = (trace_dir / "demo-tiny-fixed2.jsonl").read_bytes()
    at = goto(app, "upload")
    said = first_info(at)  # where uploads are kept, in words: never the server's absolute folder (issue 45)
    assert "SPECLAB_UPLOADS" in said and str(uploads_dir) not in said
    at.file_uploader(key="upload_files").set_value(("kept.jsonl", raw, "application/json")).run()
    assert (uploads_dir / "kept.jsonl").read_bytes() == raw
    fresh = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()  # a reload: a new session, nothing in it
    assert not fresh.exception
    table = next(d.value for d in fresh.dataframe if "×AR" in d.value.columns)
    assert any("kept.jsonl" in str(r) for r in table["Run"]) or "uploaded: kept.jsonl" in traces.all_traces()
    fresh = goto(fresh, "upload")
    assert any("uploaded: kept.jsonl" in m.value for m in fresh.markdown)
    next(b for b in fresh.button if b.key == "rm-uploaded: kept.jsonl").click().run()
    assert not (uploads_dir / "kept.jsonl").exists()
    assert not any("uploaded: kept.jsonl" in m.value for m in fresh.markdown)


def test_a_broken_kept_upload_is_one_line_and_left_alone(app, trace_dir, uploads_dir):
    uploads_dir.mkdir(parents=True, exist_ok=True)
    good = (trace_dir / "demo-tiny-fixed2.jsonl").read_bytes()
    (uploads_dir / "good.jsonl").write_bytes(good)
    broken = good[: len(good) // 3] + b"\n{not json"
    (uploads_dir / "broken.jsonl").write_bytes(broken)
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    assert not at.exception
    lines = [w.value for w in at.warning if "broken.jsonl" in w.value]
    assert len(lines) == 1 and "\n" not in lines[0] and str(persist.folder()) not in lines[0]
    assert (uploads_dir / "broken.jsonl").read_bytes() == broken  # left exactly as it was
    assert "uploaded: good.jsonl" in at.session_state[traces.UPLOADS]  # the rest loads
    for page in ("replay", "compare", "upload"):
        goto(at, page)


def test_replay_view_in_the_url_and_back(app):
    at = goto(app, "replay")
    at.selectbox(key="replay_trace").set_value("demo-tiny-fixed2.jsonl").run()
    at.selectbox(key="replay_req").set_value(1).run()
    at.slider(key="replay_step").set_value(3).run()
    params = {k: v for k, v in dict(at.query_params).items() if k in ("trace", "request", "step")}
    assert params == {"trace": "demo-tiny-fixed2.jsonl", "request": "1", "step": "3"}
    link = AppTest.from_file(MAIN, default_timeout=TIMEOUT)  # someone opens the shared link
    link.query_params = params
    link.run()
    link.switch_page(site_map.file("replay"))
    link.query_params = params
    link.run()
    assert not link.exception
    assert link.selectbox(key="replay_trace").value == "demo-tiny-fixed2.jsonl"
    assert link.selectbox(key="replay_req").value == 1
    assert any(m.value.startswith("**Step 3 of") for m in link.markdown)


def test_a_link_to_a_missing_trace_is_a_note_and_the_default_view(app):
    at = app
    at.switch_page(site_map.file("replay"))
    at.query_params = {"trace": "gone.jsonl", "step": "999"}
    at.run()
    assert not at.exception
    notes = [c.value for c in at.caption if "The link names" in c.value]
    assert len(notes) == 1 and "gone.jsonl" in notes[0] and "\n" not in notes[0]
    assert at.selectbox(key="replay_trace").value == traces.default_label(traces.all_traces(), readable=True)
    assert any(m.value.startswith("**Step 0 of") for m in at.markdown)


def test_compare_pair_in_the_url(app):
    at = goto(app, "compare")
    params = dict(at.query_params)
    assert params["a"] == at.selectbox(key="cmp_a").value and params["b"] == at.selectbox(key="cmp_b").value
    link = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    link.switch_page(site_map.file("compare"))
    link.query_params = {"a": "demo-tiny-fixed8.jsonl", "b": "demo-tiny-fixed2.jsonl"}
    link.run()
    assert link.selectbox(key="cmp_a").value == "demo-tiny-fixed8.jsonl"
    assert link.selectbox(key="cmp_b").value == "demo-tiny-fixed2.jsonl"
    assert "fixed:2" in first_info(link) and "fixed:8" in first_info(link)
