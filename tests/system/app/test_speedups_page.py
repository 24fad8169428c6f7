"""The Speedups page through AppTest: one sentence per pair answers how fast speculation is, and a link
from another page (?pair=…&row=…) lands on its row, marked first and kept in the URL."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from app import reconcile, reconcile_sources, site_map
from tests.conftest import MAIN, TIMEOUT


def test_a_link_lands_on_its_row(app):
    df = reconcile_sources.rows()
    row = df[df["kind"] == "oracle"].iloc[0]
    link = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    link.switch_page(site_map.file("speedups"))
    link.query_params = {"pair": row["pair"], "row": row["row"]}
    link.run()
    assert not link.exception, [e.value for e in link.exception]
    assert link.selectbox(key="sp_pair").value == row["pair"]
    assert "speculation runs at" in link.info[0].value or "no timed run" in link.info[0].value
    followed = [m.value for m in link.markdown if m.value.startswith("**The figure you followed:**")]
    assert len(followed) == 1 and f"{row['speedup']:.2f}× AR" in followed[0]
    table = next(d.value for d in link.dataframe if "×AR" in d.value.columns)
    assert table.iloc[0]["row id"] == row["row"] and table.iloc[0]["↗"] == "▶ linked"
    assert dict(link.query_params)["row"] == row["row"]


def test_a_link_to_an_unknown_row_says_so(app):
    df = reconcile_sources.rows()
    pair = df["pair"].iloc[0]
    link = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    link.switch_page(site_map.file("speedups"))
    link.query_params = {"pair": pair, "row": "gone"}
    link.run()
    assert not link.exception
    assert any("`gone` is not loaded" in c.value for c in link.caption)
    assert reconcile.answer_sentence(df, pair, "x")  # every pair has its sentence


def test_the_page_opens_on_a_sweep_whose_summary_names_no_draft_model(app, tmp_path_factory, monkeypatch):
    """The browser suite's sweep (tests/conftest.tiny_sweep) has no `draft` column: the page labelled its pairs
    by grouping on one and crashed with a KeyError."""
    from tests.conftest import tiny_sweep

    monkeypatch.setenv("SPECLAB_SWEEP_DIR", str(tiny_sweep(tmp_path_factory)))
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    at.switch_page(site_map.file("speedups"))
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    labels = reconcile_sources.pair_labels(reconcile_sources.rows())
    assert any(v.startswith("sweep pair") for v in labels.values()), labels
