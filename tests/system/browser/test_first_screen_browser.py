"""The app as a person first meets it, in Chromium at 1400×900 (Playwright; the server and browser fixtures
are tests/conftest.py's): every page's first screen holds its conclusion and the navigation, no page is
taller than three screens, no raw None / nan / 'T ?' is shown, an upload survives a reload, and a shared
URL restores its view (a link to a missing trace: one note, the default view).

Timings: each page's first load in a fresh session and its warm switch (second visit, same session) are
measured from the click (or navigation) until the script run finished with the conclusion drawn. They are
written to $SPECLAB_TIMINGS (JSON) when set — docs/log/2026-12-04-app-first-screen.md records a run — and
asserted against the targets with a margin (MARGIN) for a shared, loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

from app import site_map
from tests.conftest import REPO, browser_missing, new_session, settle

if browser_missing():
    pytest.skip(browser_missing(), allow_module_level=True)
from playwright.sync_api import expect  # noqa: E402

SCREEN = {"width": 1400, "height": 900}
# sidebar title -> (url path, the page's h1)
PAGES = {p.title: (p.url, p.heading) for p in site_map.PAGES}
TARGET_WARM_S, TARGET_FIRST_S = 1.5, 3.5
MARGIN = 2.5  # asserted: target × MARGIN (the 2-core box is shared); the log records the measured figures
RAW = re.compile(r"\bNone\b|\bnan\b|\bNaN\b|T \?")
TIMES: dict[str, dict[str, float]] = {"first": {}, "warm": {}}


def drawn(pg, h1: str) -> None:
    """The run finished and the page's title and conclusion are on screen."""
    pg.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", state="attached")
    expect(pg.get_by_role("heading", name=h1, exact=True).first).to_be_visible()
    expect(pg.get_by_test_id("stAlertContentInfo").first).to_be_visible()


def page_height(pg) -> int:
    return pg.evaluate("document.querySelector('[data-testid=\"stMain\"]').scrollHeight")


@pytest.fixture(scope="module", autouse=True)
def warm_server(browser, server):
    """Every page once, so the server's caches (traces, the Live pair) are filled: a first load below is
    a new visitor's, not the server's own start."""
    pg = new_session(browser, server, SCREEN)
    try:
        for path, h1 in PAGES.values():
            pg.goto(f"{server}/{path}")
            drawn(pg, h1)
    finally:
        pg.context.close()


@pytest.fixture(scope="module")
def screen(browser, server):
    pg = new_session(browser, server, SCREEN)
    settle(pg)
    yield pg
    pg.context.close()


@pytest.mark.parametrize("title", list(PAGES))
def test_first_screen_holds_the_conclusion_and_the_navigation(browser, server, title):
    path, h1 = PAGES[title]
    ctx = browser.new_context(viewport=SCREEN)  # a fresh session per page, timed
    pg = ctx.new_page()
    try:
        t0 = time.monotonic()
        pg.goto(f"{server}/{path}")
        drawn(pg, h1)
        TIMES["first"][title] = round(time.monotonic() - t0, 2)
        settle(pg)
        box = pg.get_by_test_id("stAlertContentInfo").first.bounding_box()
        assert box and box["y"] + box["height"] <= SCREEN["height"], (title, box)  # the conclusion, unscrolled
        links = pg.get_by_test_id("stSidebarNav").get_by_role("link")
        expect(links).to_have_count(len(PAGES))
        for i in range(len(PAGES)):
            lb = links.nth(i).bounding_box()
            assert lb and lb["y"] + lb["height"] <= SCREEN["height"], (title, i)
        height = page_height(pg)
        assert height <= 3 * SCREEN["height"], f"{title}: {height} px tall by default"
        text = pg.get_by_test_id("stMain").inner_text()
        assert not RAW.search(text), (title, RAW.search(text).group(0), text[max(0, RAW.search(text).start() - 80):][:160])
    finally:
        ctx.close()
    assert TIMES["first"][title] <= TARGET_FIRST_S * MARGIN, TIMES["first"]


def test_warm_page_switches(screen):
    """Every page once (cold for this session), then each again: the second visit is the warm switch."""
    for rnd in ("cold", "warm"):
        for title, (path, h1) in PAGES.items():
            t0 = time.monotonic()
            screen.get_by_test_id("stSidebarNav").get_by_role("link", name=title).click()
            screen.wait_for_url(re.compile(f"/{path}(\\?.*)?$" if path else r"/(\?.*)?$"))  # pages keep their view in the URL
            drawn(screen, h1)
            if rnd == "warm":
                TIMES["warm"][title] = round(time.monotonic() - t0, 2)
            settle(screen)
    out = os.environ.get("SPECLAB_TIMINGS")
    if out:
        with open(out, "w") as f:
            json.dump(TIMES, f, indent=1)
    slow = {k: v for k, v in TIMES["warm"].items() if v > TARGET_WARM_S * MARGIN}
    assert not slow, TIMES


def test_an_upload_survives_a_reload(browser, server):
    pg = new_session(browser, f"{server}/upload", SCREEN)
    try:
        settle(pg)
        raw = (REPO / "traces" / "demo-tiny-fixed2.jsonl").read_bytes()
        pg.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
            files=[{"name": "kept-run.jsonl", "mimeType": "application/json", "buffer": raw}])
        expect(pg.get_by_text("Loaded kept-run.jsonl")).to_be_visible()
        settle(pg)
        pg.reload()  # a new session: the uploader is empty, the kept copy comes back
        settle(pg)
        expect(pg.get_by_text("uploaded: kept-run.jsonl")).to_be_visible()
        pg.get_by_role("button", name="Remove").first.click()
        settle(pg)
        expect(pg.get_by_text("uploaded: kept-run.jsonl")).to_have_count(0)
        pg.reload()
        settle(pg)
        expect(pg.get_by_text("uploaded: kept-run.jsonl")).to_have_count(0)  # removed for good
    finally:
        pg.context.close()


def test_a_shared_url_restores_the_view(browser, server):
    pg = new_session(browser, f"{server}/replay", SCREEN)
    try:
        settle(pg)
        trace = pg.get_by_role("combobox", name="Trace").input_value()
        for _ in range(2):
            pg.get_by_role("button", name="Next").click()
            settle(pg)
        expect(pg.get_by_text("Step 2 of")).to_be_visible()
        url = pg.url
        assert "step=2" in url and "trace=" in url
    finally:
        pg.context.close()
    other = new_session(browser, url, SCREEN)  # someone else opens the link
    try:
        settle(other)
        expect(other.get_by_text("Step 2 of")).to_be_visible()
        assert other.get_by_role("combobox", name="Trace").input_value() == trace
    finally:
        other.context.close()
    gone = new_session(browser, f"{server}/replay?trace=nope.jsonl&step=5", SCREEN)
    try:
        settle(gone)
        expect(gone.get_by_text(re.compile("The link names trace nope.jsonl"))).to_be_visible()
        expect(gone.get_by_text("Step 0 of")).to_be_visible()
    finally:
        gone.context.close()
