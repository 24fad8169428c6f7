"""The app in a real browser: `streamlit run app/main.py` driven by Playwright through Debian's Chromium.

AppTest (tests/test_app.py) runs page scripts without a browser; this file checks what a person
sees: pages render without an exception box, replay's buttons and Play timer move the step, a
malformed upload shows the loader's one-line error, an upload is visible from other pages of the
same session, and a Live run finishes and opens in Replay. Screenshots land in docs/screenshots/.

Needs `apt-get install -y chromium` and `pip install playwright` (Playwright's own browser download
is not used); skips with the reason when either is missing. The Live page runs the tiny random pair
(SPECLAB_LIVE_MODELS=tiny) so the test does not depend on trained weights or a fast CPU.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
SHOTS = REPO / "docs" / "screenshots"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 90_000  # a 2-core box shared with training: page runs can take tens of seconds

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not found: install it with `apt-get install -y chromium`", allow_module_level=True)
try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    pytest.skip("playwright is not installed: `pip install playwright` (no browser download needed)",
                allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    env = {**os.environ, "SPECLAB_LIVE_MODELS": "tiny"}
    cmd = [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--global.developmentMode", "false"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            out = proc.stdout.read().decode(errors="replace")[-2000:] if proc.stdout else ""
            pytest.fail(f"streamlit did not become healthy:\n{out}")
        time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def page(server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        # Tall viewport: Streamlit scrolls inside its own container, so full_page cannot reach below it.
        pg = browser.new_page(viewport={"width": 1440, "height": 2200})
        pg.set_default_timeout(TIMEOUT_MS)
        pg.goto(server)
        yield pg
        browser.close()


def settle(pg) -> None:
    """Wait until the script run finished and no skeleton is left, then assert there is no exception box.
    (The short pause lets a rerun that a click just requested start before we wait for its end.)"""
    pg.wait_for_timeout(300)
    pg.wait_for_selector("[data-testid='stApp'][data-test-connection-state='CONNECTED']", state="attached")
    pg.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", state="attached")
    expect(pg.get_by_test_id("stSkeleton")).to_have_count(0)
    expect(pg.get_by_test_id("stException")).to_have_count(0)


def nav(pg, title: str) -> None:
    """Click the sidebar link, as a person would: the session (and its uploads) survives."""
    pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title).click()
    pg.wait_for_url(re.compile(title.lower() if title != "Overview" else ".*"))
    settle(pg)


def shot(pg, name: str) -> None:
    pg.mouse.move(0, 0)  # no hover tooltip in the picture
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True, animations="disabled")


def test_overview(page):
    settle(page)
    expect(page.get_by_text(re.compile(r"\d+ traces loaded"))).to_be_visible()
    expect(page.get_by_text("tiny-model demo").first).to_be_visible()
    shot(page, "overview")


def test_replay_buttons_and_play(page):
    nav(page, "Replay")
    expect(page.get_by_text("Step 0 of")).to_be_visible()
    page.get_by_role("button", name="Next").click()
    expect(page.get_by_text("Step 1 of")).to_be_visible()
    page.get_by_role("button", name="Play").click()
    expect(page.get_by_text(re.compile(r"Step ([3-9]|\d\d+) of"))).to_be_visible()  # the timer advanced it
    page.get_by_role("button", name="Pause").click()
    settle(page)
    expect(page.locator(".token-strip .current-step")).to_have_count(1)
    shot(page, "replay")


def test_windows(page):
    nav(page, "Windows")
    expect(page.get_by_text("oracle ÷ best fixed").first).to_be_visible()
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    shot(page, "windows")


def test_compare(page):
    nav(page, "Compare")
    expect(page.get_by_text("shared prompts")).to_be_visible()
    shot(page, "compare")


def test_malformed_upload_shows_one_line_error_and_good_upload_reaches_replay(page):
    nav(page, "Upload")
    lines = (REPO / "traces" / "demo-tiny-fixed4.jsonl").read_bytes().split(b"\n")
    bad = lines.copy()
    i = next(k for k, ln in enumerate(bad) if b'"type": "step"' in ln)
    bad[i] = re.sub(rb'"accepted": \d+', b'"accepted": 99', bad[i], count=1)
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        files=[{"name": "broken.jsonl", "mimeType": "application/json", "buffer": b"\n".join(bad)}])
    err = page.get_by_test_id("stAlertContentError")
    expect(err).to_contain_text(f"broken.jsonl: line {i + 1}: field 'accepted'")
    assert "\n" not in err.first.inner_text().strip()
    settle(page)
    shot(page, "upload-error")
    page.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
        files=[{"name": "mine.jsonl", "mimeType": "application/json", "buffer": b"\n".join(lines)}])
    expect(page.get_by_text("Loaded mine.jsonl")).to_be_visible()
    nav(page, "Overview")
    expect(page.get_by_text("uploaded: mine.jsonl")).to_be_visible()
    nav(page, "Replay")
    page.get_by_test_id("stSelectbox").first.click()
    expect(page.get_by_role("option", name="uploaded: mine.jsonl")).to_be_visible()
    page.keyboard.press("Escape")


def set_max_tokens(pg, n: int) -> None:
    box = pg.get_by_label("Max new tokens")
    box.fill(str(n))
    box.press("Enter")
    settle(pg)


def test_live_stop_keeps_an_interrupted_trace(page):
    nav(page, "Live")
    set_max_tokens(page, 512)
    page.get_by_role("button", name="Decode").click()
    expect(page.get_by_text("· decoding…").first).to_be_visible()
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_text("stopped early")).to_be_visible()
    settle(page)
    expect(page.get_by_text("· stopped").first).to_be_visible()
    expect(page.get_by_test_id("stDownloadButton")).to_have_count(2)
    shot(page, "live-stopped")


def test_live_run_and_open_in_replay(page):
    nav(page, "Live")
    expect(page.get_by_text("tiny random demo models").first).to_be_visible()
    set_max_tokens(page, 24)
    page.get_by_role("button", name="Decode").click()
    expect(page.get_by_role("button", name="Open A in Replay")).to_be_visible()
    settle(page)
    expect(page.get_by_text("· done")).to_have_count(2)
    expect(page.get_by_test_id("stDownloadButton")).to_have_count(2)
    shot(page, "live")
    page.get_by_role("button", name="Open A in Replay").click()
    page.wait_for_url(re.compile("replay"))
    settle(page)
    expect(page.get_by_role("combobox", name="Trace")).to_have_value(re.compile("^live: live-A-"))
