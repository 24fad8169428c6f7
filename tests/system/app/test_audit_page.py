"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import json
from pathlib import Path
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import audit_view, fmt
from tests.conftest import MAIN, REPO, TIMEOUT
from tests.system.app.conftest import goto


def test_audit_page_shows_the_verdicts_of_the_csv(app, tmp_path):
    csv = REPO / "docs" / "results" / "audit.csv"
    at = goto(app, "audit")
    want = audit_view.verdicts(pd.read_csv(csv))
    # the page shows the verdicts with their headers in words (app.fmt)
    pd.testing.assert_frame_equal(at.dataframe[0].value.reset_index(drop=True), fmt.labelled(want), check_dtype=False)
    not_ok = want.loc[want["verdict"] != "lossless", "verifier"].tolist()
    assert {m.label: m.value for m in at.metric}["NOT lossless"] == str(len(not_ok))
    assert len(at.warning) == len(not_ok) and all(any(n in w.value for w in at.warning) for n in not_ok)
    # One lossless row pushed to 1e-3 flips that verifier's verdict on the page.
    df = pd.read_csv(csv)
    i = df.index[df["verifier"] == "token"][0]
    df.loc[i, "lossless_error"] = 1e-3
    df.to_csv(tmp_path / "audit.csv", index=False)
    at.text_input(key="audit_csv").set_value(str(tmp_path / "audit.csv")).run()
    shown = at.dataframe[0].value.set_index(fmt.words("verifier"))
    assert shown.at["token", fmt.words("verdict")] == "NOT lossless"
    assert shown.at["token", fmt.words("worst_case")] == df.at[i, "case"]
    assert not at.exception
    at.text_input(key="audit_csv").set_value(str(tmp_path / "nope.csv")).run()
    assert len(at.error) == 1 and "no such audit file" in at.error[0].value
