"""A view in the URL (app.share) for Windows, Overview and Multi-draft: change the view, take the URL it
left, open it in a new session — the same view. (The browser test does the same in a new browser context.)"""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import MAIN, TIMEOUT
from tests.system.app.conftest import goto


def reopen(page: str, params: dict) -> AppTest:
    link = AppTest.from_file(MAIN, default_timeout=TIMEOUT)
    if page == "overview":  # the landing page: the link's parameters are there on the very first run
        link.query_params = params
        link.run()
    else:
        link.run()
        link.switch_page(f"pages/{page}.py")
        link.query_params = params
        link.run()
    assert not link.exception, [e.value for e in link.exception]
    return link


def test_windows_view_in_the_url(app):
    at = goto(app, "windows")
    sections = at.segmented_control(key="win_section").options
    at.segmented_control(key="win_section").set_value(sections[1]).run()
    at.radio(key="win_mode").set_value("flat ratio c").run()
    at.slider(key="win_c").set_value(0.25).run()
    params = dict(at.query_params)
    assert params["section"] == sections[1] and params["cost"] == "flat ratio c" and params["c"] == "0.25"
    link = reopen("windows", params)
    assert link.segmented_control(key="win_section").value == sections[1]
    assert link.radio(key="win_mode").value == "flat ratio c" and link.slider(key="win_c").value == 0.25
    assert link.multiselect(key="win_refs").value == at.multiselect(key="win_refs").value


def test_overview_view_in_the_url(app):
    at = app
    runs_now = at.multiselect(key="ov_pos_runs").value
    pick = runs_now[:1]
    at.multiselect(key="ov_pos_runs").set_value(pick).run()
    at.toggle(key="ov_cards").set_value(True).run()
    params = dict(at.query_params)
    assert params["cards"] == "1" and params["runs"] == ",".join(pick)
    link = reopen("overview", params)
    assert link.toggle(key="ov_cards").value is True and link.multiselect(key="ov_pos_runs").value == pick
    assert any(m.label == "tokens/s" for m in link.metric)  # the cards are open


def test_a_link_naming_an_unloaded_run_is_one_note(app):
    link = reopen("overview", {"runs": "gone.jsonl"})
    assert any("gone.jsonl" in c.value and "not loaded" in c.value for c in link.caption)


def test_multidraft_temperature_in_the_url(app):
    at = goto(app, "multidraft")
    temps = at.radio(key="md_temp").options
    if len(temps) < 2:
        pytest.skip("the multi-draft result has one temperature: no view to restore")
    at.radio(key="md_temp").set_value(float(temps[0].removeprefix("T = "))).run()
    params = dict(at.query_params)
    assert params["t"] == temps[0].removeprefix("T = ")
    link = reopen("multidraft", params)
    assert link.radio(key="md_temp").value == float(temps[0].removeprefix("T = "))
