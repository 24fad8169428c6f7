"""Imported runs in the app (AppTest): a Spec-Bench answer file uploads, and every page either shows
what the file has or says what it lacks — none fails on the missing fields."""

import pytest
from streamlit.testing.v1 import AppTest

from app import site_map, traces
from tests.conftest import MAIN, TIMEOUT
from tests.specbench_answers import SPS, VANILLA, answer_file


@pytest.fixture()
def at(tmp_path, monkeypatch):
    empty = tmp_path / "traces"
    empty.mkdir()
    monkeypatch.setenv(traces.TRACES_ENV, str(empty))  # only the uploads below are loaded
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    assert not at.exception
    sps = answer_file(tmp_path / "vicuna-sps.jsonl", SPS, "vicuna-sps").read_bytes()
    van = answer_file(tmp_path / "vicuna-vanilla.jsonl", VANILLA, "vicuna-vanilla").read_bytes()
    at.switch_page(site_map.file("upload")).run()
    at.file_uploader(key="upload_files").set_value(
        [("vicuna-sps.jsonl", sps, "application/json"), ("vicuna-vanilla.jsonl", van, "application/json")]).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert sum("vicuna-sps.jsonl" in s.value or "vicuna-vanilla.jsonl" in s.value for s in at.success) == 2
    return at


def goto(at, page):
    at.switch_page(site_map.file(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_overview_marks_imported_and_unknown_acceptance(at):
    goto(at, "overview")
    at.toggle(key="ov_cards").set_value(True).run()  # cards on demand
    assert any("imported: specbench" in m.value for m in at.markdown)
    acceptance = [m for m in at.metric if m.label == "acceptance"]
    assert acceptance and all(m.value == "—" for m in acceptance)


def test_replay_says_what_the_file_lacks(at):
    goto(at, "replay")
    at.selectbox(key="replay_trace").set_value("uploaded: vicuna-sps.jsonl").run()
    assert not at.exception
    assert any("does not record draft tokens, emitted tokens" in i.value for i in at.info)  # fields in words
    table = at.dataframe[0].value
    assert list(table["emitted"]) == [3, 2, 1, 3, 1]  # question 81's accept lengths, both turns


def test_windows_shows_the_accepted_length_bound(at):
    goto(at, "windows")
    # a Spec-Bench file has no draft timings and the lab has not measured its pair: nothing is priced
    # until c is given (no silent default), and then every figure names the c it used
    assert not {m.label for m in at.metric} & {"oracle ÷ best fixed (bound)"}
    assert any("give c" in i.value for i in at.info)
    at.number_input(key="win_imp_c").set_value(0.05).run()
    labels = {m.label for m in at.metric}
    assert {"mean emitted per call", "oracle ÷ best fixed (bound)", "modelled oracle at c = 0.05"} <= labels
    assert any("renewal-reward bound" in c.value for c in at.caption)
    assert any("priced at c = 0.05 (given)" in c.value for c in at.caption)


def test_compare_pairs_imported_runs_by_question(at):
    goto(at, "compare")
    at.selectbox(key="cmp_a").set_value("uploaded: vicuna-sps.jsonl").run()
    if any(t.key == "cmp_only" for t in at.toggle):  # B may be limited to traces "comparable" with A
        at.toggle(key="cmp_only").set_value(False).run()
    at.selectbox(key="cmp_b").set_value("uploaded: vicuna-vanilla.jsonl").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("3 shared prompts" in s.value for s in at.subheader)
    assert any("does not record" in i.value for i in at.info)
