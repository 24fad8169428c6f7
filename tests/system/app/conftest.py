"""Shared by the AppTest files of this folder: small tiny-model traces generated once per module by
`app.make_demo_traces` into a temporary folder (SPECLAB_TRACES), the app opened on them with the tiny random
Live pair, and `goto` (switch page, no exception). A file that needs another variant defines its own.
Every test keeps its uploads in its own temporary folder (SPECLAB_UPLOADS), never in ~/.cache."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from app import site_map, traces
from tests.conftest import MAIN, TIMEOUT


@pytest.fixture(autouse=True)
def uploads_dir(tmp_path, monkeypatch):
    from app import persist

    d = tmp_path / "kept-uploads"
    monkeypatch.setenv(persist.ENV, str(d))
    return d


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    from app.make_demo_traces import main

    d = tmp_path_factory.mktemp("traces")
    assert main(["--out", str(d), "--max-new-tokens", "16", "--prompt-bytes", "12"]) == 0
    return d


@pytest.fixture()
def app(trace_dir, monkeypatch):
    monkeypatch.setenv(traces.TRACES_ENV, str(trace_dir))
    monkeypatch.setenv("SPECLAB_LIVE_MODELS", "tiny")
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    assert not at.exception
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(site_map.file(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at
