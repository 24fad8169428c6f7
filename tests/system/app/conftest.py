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


def table_with(at: AppTest, column: str):
    """The first dataframe element on the page with `column`."""
    return next(d for d in at.dataframe if column in d.value.columns)


def assert_linked(element, column: str, rows) -> int:
    """Every figure of `column` in a dataframe element is a LinkColumn cell linking to a row of `rows` (the
    Speedups page's) that prints that figure; returns how many cells link."""
    import json
    import re
    from urllib.parse import parse_qs, urlparse

    from app import reconcile

    config = json.loads(element.proto.columns or "{}").get(column, {}).get("type_config", {})
    assert config.get("type") == "link", f"{column}: not a link column ({config})"
    cells = [c for c in element.value[column] if isinstance(c, str)]
    assert cells, f"{column}: no linked figure"
    for url in cells:
        q = parse_qs(urlparse(url).query)
        hit = rows[(rows["pair"] == q["pair"][0]) & (rows["row"] == q["row"][0])]
        assert urlparse(url).path == reconcile.PAGE and len(hit) == 1, f"{url}: no such row on the Speedups page"
        assert f"{hit['speedup'].iloc[0]:.2f}" == re.search(reconcile.FIGURE_TEXT, url).group(1), url
    return len(cells)
