"""The browser tests' Streamlit server keeps its uploads in a temporary folder (SPECLAB_UPLOADS), never in
~/.cache: set before tests/conftest.py's `server` fixture copies the environment."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _kept_uploads(tmp_path_factory):
    from app import persist

    old = os.environ.get(persist.ENV)
    os.environ[persist.ENV] = str(tmp_path_factory.mktemp("kept-uploads"))
    yield os.environ[persist.ENV]
    if old is None:
        os.environ.pop(persist.ENV, None)
    else:
        os.environ[persist.ENV] = old
