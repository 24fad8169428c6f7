"""The app in a real browser: `streamlit run app/main.py` driven by Playwright through Debian's Chromium.

AppTest (tests/system/app/) runs page scripts without a browser; this file checks what a person
sees: pages render without an exception box, replay's buttons and Play timer move the step, a
malformed upload shows the loader's one-line error, an upload is visible from other pages of the
same session, a Live run finishes and opens in Replay, downloaded files (trace Parquet, Perfetto
step timings, table CSV) read back, the Audit page shows its verdicts, and four browser sessions
decoding at once each get their own, exact result; Live refuses invalid inputs without touching its
panes, and a second session waits, visibly, behind the first. Screenshots of every page are written to
$SPECLAB_SCREENSHOTS, or a pytest temp folder when unset, never into the repository: `make screenshots`
runs this file with that variable set and copies them into docs/screenshots/ (each re-encoded as a palette
PNG and kept under MAX_SHOT_BYTES).

Needs `apt-get install -y chromium` and `pip install playwright` (Playwright's own browser download
is not used); skips with the reason when either is missing. The Live page runs the tiny random pair
(SPECLAB_LIVE_MODELS=tiny) so the test does not depend on trained weights or a fast CPU.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest

from tests.conftest import REPO, TIMEOUT_MS, browser_missing, nav, new_session, settle
SHOTS_ENV = "SPECLAB_SCREENSHOTS"  # where screenshots go; unset: a pytest temp folder (the tree stays clean)
SHOTS = Path()  # set by the `_shots` fixture
MAX_SHOT_BYTES = 200_000

if browser_missing():
    pytest.skip(browser_missing(), allow_module_level=True)
from playwright.sync_api import expect  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _shots(tmp_path_factory):
    """Screenshots go to $SPECLAB_SCREENSHOTS or a temp folder: a test run never rewrites tracked files."""
    global SHOTS
    SHOTS = Path(os.environ.get(SHOTS_ENV) or tmp_path_factory.mktemp("screenshots"))
    if SHOTS.resolve().is_relative_to(REPO.resolve()):  # e.g. docs/screenshots: tracked files
        pytest.fail(f"${SHOTS_ENV}={SHOTS} is inside the repository: a test run must not rewrite tracked "
                    f"files (`make screenshots` takes a temp folder and copies)")
    SHOTS.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="module")
def page(browser, server):
    # Streamlit scrolls inside its own container, so full_page cannot reach below the viewport.
    pg = new_session(browser, server)
    yield pg
    pg.context.close()


def small_png(img, path: Path) -> None:
    """Save as a 256-colour palette PNG (UI screenshots have few colours: ~4× smaller, same look)."""
    img.convert("RGB").quantize(colors=256, method=2).save(path, optimize=True)
    assert path.stat().st_size <= MAX_SHOT_BYTES, f"{path.name}: {path.stat().st_size} bytes"


def shot(pg, name: str) -> None:
    from PIL import Image

    pg.mouse.move(0, 0)  # no hover tooltip in the picture
    raw = pg.screenshot(full_page=True, animations="disabled")
    small_png(Image.open(io.BytesIO(raw)), SHOTS / f"{name}.png")


def download(pg, button, suffix: str, tmp_path: Path) -> Path:
    """Click a download button and return the saved file (named with `suffix`, which the loaders read)."""
    with pg.expect_download() as info:
        button.click()
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{info.value.suggested_filename or 'download'}"
    if not path.name.endswith(suffix):
        path = path.with_name(path.name + suffix)
    info.value.save_as(path)
    return path


def download_button(pg, label: str, nth: int = 0):
    return pg.get_by_test_id("stDownloadButton").filter(has_text=label).nth(nth)


def test_overview(page):
    settle(page)
    expect(page.get_by_text(re.compile(r"\d+ traces loaded"))).to_be_visible()
    expect(page.get_by_test_id("stAlertContentInfo").first).to_contain_text("× AR")
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


def test_replay_downloads_read_back(page, tmp_path):
    """The selected trace as Parquet (loads with the engine, same steps as the file on disk) and as
    Perfetto step timings (JSON with one draft and one verify event per step)."""
    from engine.trace.format import load_trace

    label = page.get_by_role("combobox", name="Trace").input_value().rsplit(" · ", 1)[-1]  # "title · file"
    want = load_trace(REPO / "traces" / label)
    pq = download(page, download_button(page, "Trace (Parquet)"), ".parquet", tmp_path)
    got = load_trace(pq)
    assert got.steps == want.steps and got.requests == want.requests and got.header == want.header
    pf = download(page, download_button(page, "Step timings (Perfetto)"), ".json", tmp_path)
    assert pf.name.endswith(".perfetto.json")
    events = [e for e in json.loads(pf.read_text())["traceEvents"] if e["ph"] == "X"]
    for phase in ("draft", "verify"):
        assert sorted((e["pid"], e["args"]["step"]) for e in events if e["name"] == phase) == sorted(
            (s["request_id"], s["step"]) for s in want.steps)
    settle(page)


def test_windows(page):
    nav(page, "Windows")
    expect(page.get_by_test_id("stMetricLabel").filter(has_text="oracle ÷ best fixed")).to_be_visible()
    expect(page.locator(".js-plotly-plot >> visible=true").first).to_be_visible()
    shot(page, "windows")


def test_speedups(page):
    nav(page, "Speedups")
    expect(page.get_by_test_id("stAlertContentInfo").first).to_contain_text("speculation runs at")
    shot(page, "speedups")


def test_compare(page):
    nav(page, "Compare")
    expect(page.get_by_test_id("stAlertContentInfo").first).to_contain_text("shared prompts")
    page.get_by_role("tab", name="Per prompt").click()
    expect(page.get_by_text("shared prompts").last).to_be_visible()
    shot(page, "compare")


def test_sweeps_and_dpace(page):
    nav(page, "Sweeps")
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    shot(page, "sweeps")
    nav(page, "D-PACE")
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    shot(page, "dpace")


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
    page.get_by_text("Cards: one per trace").click()  # cards on demand
    settle(page)
    expect(page.get_by_text("uploaded: mine.jsonl", exact=True)).to_be_visible()  # the card's caption
    nav(page, "Replay")
    page.get_by_test_id("stSelectbox").first.click()
    page.keyboard.type("mine.jsonl")  # the list is virtualised: with many bundled traces, filter to reach it
    expect(page.get_by_role("option", name="uploaded: mine.jsonl")).to_be_visible()
    page.keyboard.press("Escape")


def set_max_tokens(pg, n: int) -> None:
    box = pg.get_by_role("spinbutton", name="Max new tokens")
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
    expect(page.get_by_test_id("stDownloadButton")).to_have_count(6)  # JSONL, Parquet, Perfetto per side
    shot(page, "live-stopped")


def test_live_run_and_open_in_replay(page):
    nav(page, "Live")
    expect(page.get_by_text("tiny random demo models").first).to_be_visible()
    set_max_tokens(page, 24)
    page.get_by_role("button", name="Decode").click()
    expect(page.get_by_role("button", name="Open A in Replay")).to_be_visible()
    settle(page)
    expect(page.get_by_text("· done")).to_have_count(3)  # A, B and the autoregressive baseline
    expect(page.get_by_test_id("stDownloadButton")).to_have_count(6)
    expect(page.get_by_text("speedup").first).to_be_visible()
    shot(page, "live")
    page.get_by_role("button", name="Open A in Replay").click()
    page.wait_for_url(re.compile("replay"))
    settle(page)
    expect(page.get_by_role("combobox", name="Trace")).to_have_value(re.compile("live: live-A-"))


def pane_texts(pg) -> list[str]:
    """What the Live result panes show: their headings and token strips."""
    return (pg.get_by_text(re.compile(r"^[AB] · ")).all_inner_texts()
            + pg.locator(".token-strip").all_inner_texts())


def test_live_invalid_inputs_run_nothing(page):
    """Temperature 5 and policy `banana`: Decode is disabled, the message names the field, and the panes
    keep the last run exactly as it was. A click that arrives together with the bad edit runs nothing."""
    nav(page, "Live")
    set_max_tokens(page, 12)
    page.get_by_role("button", name="Decode").click()
    expect(page.get_by_role("button", name="Open A in Replay")).to_be_visible()
    settle(page)
    before = pane_texts(page)
    assert len(before) >= 4, before  # two headings, two token strips
    decode = page.get_by_role("button", name="Decode")

    temp = page.get_by_role("spinbutton", name="Temperature")
    temp.fill("5")
    temp.press("Enter")
    settle(page)
    expect(page.get_by_test_id("stAlertContentError").filter(has_text="Temperature must be between 0")).to_be_visible()
    expect(decode).to_be_disabled()
    expect(page.get_by_text("stale").first).to_be_visible()
    assert pane_texts(page) == before
    shot(page, "live-invalid")
    temp.fill("0")
    temp.press("Enter")
    settle(page)
    expect(decode).to_be_enabled()

    spec = page.get_by_role("textbox", name="Policy A spec")
    spec.fill("banana")
    decode.click()  # the edit commits on blur, in the same moment as the click
    settle(page)
    err = page.get_by_test_id("stAlertContentError").filter(has_text="Policy A: unknown policy 'banana'").first
    expect(err).to_be_visible()
    for name in ("pacer", "autoregressive", "fixed", "heuristic"):
        expect(err).to_contain_text(name)
    expect(decode).to_be_disabled()
    expect(page.get_by_text("decoding…")).to_have_count(0)
    assert pane_texts(page) == before
    spec.fill("fixed:4")
    spec.press("Enter")
    settle(page)


def test_live_second_session_waits_its_turn(browser, server, tmp_path):
    """Two sessions: the second one clicked shows that it waits for the models, and the first one clicked
    decodes first (the traces record when each run queued and started)."""
    first, second = (new_session(browser, f"{server}/live") for _ in range(2))
    try:
        for pg, n in ((first, 96), (second, 8)):  # long enough for the second click to find it busy
            settle(pg)
            set_max_tokens(pg, n)
        first.get_by_role("button", name="Decode").click()
        expect(first.get_by_text("decoding…").first).to_be_visible()
        second.get_by_role("button", name="Decode").click()
        expect(second.get_by_text("Waiting for the models (another session is decoding)")).to_be_visible()
        expect(first.get_by_text("Waiting for the models")).to_have_count(0)
        shot(second, "live-waiting")
        for pg in (first, second):
            expect(pg.get_by_role("button", name="Open A in Replay")).to_be_visible(timeout=4 * TIMEOUT_MS)
            settle(pg)
        expect(second.get_by_text("Waiting for the models")).to_have_count(0)
        runs = [json.loads(download(pg, download_button(pg, "Trace (JSONL)"), ".jsonl", tmp_path / name)
                           .read_text().split("\n", 1)[0])["live"] for pg, name in ((first, "1"), (second, "2"))]
        assert runs[0]["queued_at"] < runs[1]["queued_at"]
        assert runs[0]["started_at"] < runs[1]["started_at"]
        assert runs[1]["started_at"] > runs[1]["queued_at"]  # it waited in line
    finally:
        for pg in (first, second):
            pg.context.close()


def test_audit_page_and_its_csv(page, tmp_path):
    import pandas as pd

    from app import audit_view

    nav(page, "Audit")
    want = audit_view.verdicts(audit_view.load_audit(REPO / "docs" / "results" / "audit.csv"))
    for name in want.loc[want["verdict"] != "lossless", "verifier"]:
        expect(page.get_by_test_id("stAlertContentWarning").filter(has_text=f"{name} is NOT lossless")).to_be_visible()
    expect(page.get_by_test_id("stDataFrame").first).to_be_visible()
    expect(page.get_by_test_id("stException")).to_have_count(0)
    shot(page, "audit")
    csv = download(page, download_button(page, "CSV"), ".csv", tmp_path)
    from app import fmt

    # the CSV is the table as shown: its headers in words
    pd.testing.assert_frame_equal(pd.read_csv(csv), fmt.labelled(want), check_dtype=False)


# ---------------------------------------------------------------- load: four sessions decode at once

LOAD_PROMPTS = ["Name three rivers that flow through Europe.", "Write a haiku about a quiet harbour at dawn.",
                "Translate 'see you tomorrow' into Spanish.", "What is 12 squared, minus 20?"]
LOAD_TOKENS = 16


def greedy_output(prompt: str, n: int) -> list[int]:
    """The tiny target's own greedy continuation (no draft), computed here, outside the app."""
    import torch

    from app.demo_models import text_to_ids, tiny_pair
    from engine.decode import DecodeConfig, decode

    torch.set_num_threads(1)
    target, _ = tiny_pair()
    return [t for rec in decode(target, None, text_to_ids(prompt), None, DecodeConfig(max_new_tokens=n))
            for t in rec.emitted_tokens]


def test_four_sessions_decode_at_once(browser, server, tmp_path):
    """Four browser sessions press Decode together: the shared demo pair serves them one at a time
    (its lock), none shows an error, and every session's Parquet trace holds its own prompt and
    exactly the target's greedy output (fp32 speculative greedy decoding is exact)."""
    from PIL import Image

    from engine.trace.format import load_trace

    pages = [new_session(browser, f"{server}/live", {"width": 1280, "height": 1250}) for _ in LOAD_PROMPTS]
    try:
        for pg, prompt in zip(pages, LOAD_PROMPTS):
            settle(pg)
            box = pg.get_by_label("Prompt text")
            box.fill(prompt)
            box.press("Control+Enter")
            settle(pg)
            set_max_tokens(pg, LOAD_TOKENS)
        for pg in pages:  # all four at once
            pg.get_by_role("button", name="Decode").click()
        for pg in pages:
            expect(pg.get_by_role("button", name="Open A in Replay")).to_be_visible(timeout=4 * TIMEOUT_MS)
            settle(pg)
            expect(pg.get_by_text("· done")).to_have_count(3)
            expect(pg.get_by_test_id("stAlertContentError")).to_have_count(0)
            expect(pg.get_by_test_id("stException")).to_have_count(0)
        for pg, prompt in zip(pages, LOAD_PROMPTS):
            want = greedy_output(prompt, LOAD_TOKENS)
            for i, side in enumerate("AB"):
                path = download(pg, download_button(pg, "Trace (Parquet)", i), ".parquet", tmp_path / f"{id(pg)}{side}")
                t = load_trace(path)
                assert t.complete and [r["prompt_text"] for r in t.requests.values()] == [prompt], side
                assert t.ends[0]["output_ids"] == want, (prompt, side)
        grid = [Image.open(io.BytesIO(pg.screenshot(animations="disabled"))) for pg in pages]
        w, h = grid[0].size
        sheet = Image.new("RGB", (2 * w, 2 * h), "white")
        for i, img in enumerate(grid):
            sheet.paste(img, ((i % 2) * w, (i // 2) * h))
        small_png(sheet.resize((w, h)), SHOTS / "live-load-4-sessions.png")
    finally:
        for pg in pages:
            pg.context.close()
