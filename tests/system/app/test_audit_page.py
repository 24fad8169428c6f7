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

from app import audit_view, data
from tests.conftest import MAIN, REPO, TIMEOUT
from tests.system.app.conftest import goto


def test_audit_page_shows_the_verdicts_of_the_csv(app, tmp_path):
    csv = REPO / "docs" / "results" / "audit.csv"
    at = goto(app, "audit")
    want = audit_view.verdicts(pd.read_csv(csv))
    pd.testing.assert_frame_equal(at.dataframe[0].value.reset_index(drop=True), want, check_dtype=False)
    not_ok = want.loc[want["verdict"] != "lossless", "verifier"].tolist()
    assert {m.label: m.value for m in at.metric}["NOT lossless"] == str(len(not_ok))
    assert len(at.warning) == len(not_ok) and all(any(n in w.value for w in at.warning) for n in not_ok)
    # One lossless row pushed to 1e-3 flips that verifier's verdict on the page.
    df = pd.read_csv(csv)
    i = df.index[df["verifier"] == "token"][0]
    df.loc[i, "lossless_error"] = 1e-3
    df.to_csv(tmp_path / "audit.csv", index=False)
    at.text_input(key="audit_csv").set_value(str(tmp_path / "audit.csv")).run()
    shown = at.dataframe[0].value.set_index("verifier")
    assert shown.at["token", "verdict"] == "NOT lossless" and shown.at["token", "worst_case"] == df.at[i, "case"]
    assert not at.exception
    at.text_input(key="audit_csv").set_value(str(tmp_path / "nope.csv")).run()
    assert len(at.error) == 1 and "no such audit file" in at.error[0].value


def synthetic_paired(path: Path) -> Path:
    """A paired multi-draft result with hand-set BE: at T = 0.7, L = 4 RBV K = 4 beats SD by 20 %."""
    rows = []
    for t in (0.4, 0.7):
        for L in (2, 4):
            sd = 2.0 + L / 4
            rows.append({"temperature": t, "L": L, "method": "token", "k": 1, "be": sd, "sr_model": 1.0})
            rows.append({"temperature": t, "L": L, "method": "block", "k": 1, "be": sd * 1.05, "sr_model": 1.0})
            for k in (2, 3, 4):
                rows.append({"temperature": t, "L": L, "method": "rbv", "k": k,
                             "be": sd * (1 + (0.2 if (t, L) == (0.7, 4) else 0.1) * k / 4), "sr_model": 1.1})
                rows.append({"temperature": t, "L": L, "method": "spectr-gbv-published", "k": k, "be": sd * 1.5,
                             "sr_model": 1.2})
    path.write_text(json.dumps({"kind": "paired", "rows": rows, "real_rows": [], "prompts": [{}] * 6,
                                "target": "t", "draft": "d", "dtype": "bfloat16"}))
    return path


def test_audit_page_multidraft_section_matches_the_view(app, tmp_path, monkeypatch):
    """The headline is multidraft_view.headline of the file, the lossy published rule is never the pick,
    and a file that is not a paired result gets one line instead of the section."""
    from app import multidraft_view

    path = synthetic_paired(tmp_path / "paired.json")
    rows, _, _ = multidraft_view.load_paired(path)
    g = multidraft_view.gains(rows).set_index(["temperature", "L"])
    assert g.at[(0.7, 4), "gain"] == pytest.approx(0.2) and g.at[(0.7, 4), "best"] == "RBV (ours), K = 4"
    monkeypatch.setenv("SPECLAB_MULTIDRAFT_JSON", str(path))
    at = goto(app, "audit")
    text = [m.value for m in at.markdown]
    assert multidraft_view.headline(rows, 0.7) in text and "+20%" in multidraft_view.headline(rows, 0.7)
    fig = at.get("plotly_chart")[-1].proto.spec
    assert "Block efficiency by drafts per step, T = 0.7" in fig and "L = 4" in fig
    at.radio(key="md_temp").set_value(0.4).run()
    assert multidraft_view.headline(rows, 0.4) in [m.value for m in at.markdown]
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "sweep", "rows": []}))
    at.text_input(key="md_json").set_value(str(tmp_path / "bad.json")).run()
    assert not at.exception and any("not a paired multi-draft result" in i.value for i in at.info)
