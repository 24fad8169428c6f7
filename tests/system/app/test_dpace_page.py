"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from app import reconcile
from tests.conftest import MAIN, REPO, TIMEOUT
from tests.system.app.conftest import goto


def test_dpace_page_switches_between_bundled_results(app):
    """The D-PACE page offers every bundled results directory; each choice shows that directory's own
    summary (one row per objective, τ offline as in summary.json)."""
    results = REPO / "docs" / "results"
    at = goto(app, "dpace")
    radio = at.radio(key="dpace_which")
    present = [o for o in radio.options if o != "other directory…"]
    assert present, radio.options
    folders = {"SmolLM2": "dpace-smollm2", "B = 8": "dpace-b8"}
    for option in present:
        at = at.radio(key="dpace_which").set_value(option).run()
        assert not at.exception
        name = next((v for k, v in folders.items() if k in option), "dpace")
        summary = json.loads((results / name / "summary.json").read_text())["summary"]
        table = at.dataframe[0].value
        assert list(table["objective"]) == [r["label"] for r in summary], option
        assert table["τ offline"].round(3).tolist() == [round(r["tau_offline_mean"], 3) for r in summary]
        for cell, r in zip(table["CPU speedup"], summary):  # a timed objective's speedup links to its row
            if r.get("speedup_cpu_mean") is None:
                assert cell is None or cell != cell
            else:
                assert f"row={reconcile.dpace_id(name, r['label'])}" in cell, cell
                assert re.search(reconcile.FIGURE_TEXT, cell).group(1) == f"{r['speedup_cpu_mean']:.2f}"
