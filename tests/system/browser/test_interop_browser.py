"""A Spec-Bench answer file uploaded in a real browser (Playwright + Debian's Chromium, as in
test_app_browser.py; the server and browser fixtures are tests/conftest.py's): it imports, is marked as
imported on Overview, and the Windows page shows what its accepted lengths support."""

from __future__ import annotations

import pytest

from tests.conftest import browser_missing, nav, new_session
from tests.specbench_answers import SPS, answer_file

if browser_missing():
    pytest.skip(browser_missing(), allow_module_level=True)
from playwright.sync_api import expect  # noqa: E402


def test_specbench_upload_reaches_overview_and_windows(browser, server, tmp_path):
    pg = new_session(browser, server)
    try:
        nav(pg, "Upload")
        raw = answer_file(tmp_path / "vicuna-sps.jsonl", SPS, "vicuna-sps").read_bytes()
        pg.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
            files=[{"name": "vicuna-sps.jsonl", "mimeType": "application/json", "buffer": raw}])
        expect(pg.get_by_text("Loaded vicuna-sps.jsonl")).to_be_visible()
        expect(pg.get_by_test_id("stAlertContentError")).to_have_count(0)
        nav(pg, "Overview")
        pg.get_by_text("Cards: one per trace").click()  # cards on demand
        expect(pg.get_by_text("imported: specbench").first).to_be_visible()
        nav(pg, "Windows")
        expect(pg.get_by_text("Imported runs: what accepted lengths alone support")).to_be_visible()
        # a file without draft timings of a pair the lab has not measured: no figure until c is given
        expect(pg.get_by_text("none is drawn until it is given", exact=False)).to_be_visible()
    finally:
        pg.context.close()


def test_a_vllm_run_is_set_beside_the_bundled_runs_of_its_pair(browser, server):
    """vLLM's K = 2 run of the Qwen pair, uploaded: the diagnosis sets it beside the bundled qwen-* traces —
    the per-position chart and the first-rejection table, the oracle run named as left out."""
    from pathlib import Path

    raw = (Path(__file__).resolve().parents[2] / "fixtures" / "peers" / "vllm-draft-k2.jsonl").read_bytes()
    pg = new_session(browser, server)
    try:
        nav(pg, "Upload")
        pg.get_by_test_id("stFileUploaderDropzoneInput").set_input_files(
            files=[{"name": "vllm-k2.jsonl", "mimeType": "application/json", "buffer": raw}])
        expect(pg.get_by_text("Loaded vllm-k2.jsonl")).to_be_visible()
        expect(pg.get_by_text("Beside the lab's own runs of the same pair")).to_be_visible()
        expect(pg.get_by_text("Acceptance rate at each draft position", exact=False).first).to_be_visible()
        expect(pg.get_by_text("Left out: qwen-oracle-t0.jsonl", exact=False)).to_be_visible()
        expect(pg.get_by_test_id("stAlertContentError")).to_have_count(0)
    finally:
        pg.context.close()
