"""The Multi-draft page (AppTest): it opens with the paired grid's headline and its wall-clock sentence, K
and L defined, block efficiency beside the modelled wall clock; a file that is not a paired result gets one
line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.system.app.conftest import goto


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


def test_multidraft_page_matches_the_view(app, tmp_path, monkeypatch):
    """The page opens with multidraft_view.headline of the file and its wall-clock sentence, the lossy
    published rule is never the pick, and a file that is not a paired result gets one line instead."""
    from app import multidraft_view, reconcile

    path = synthetic_paired(tmp_path / "paired.json")
    rows, _, _ = multidraft_view.load_paired(path)
    g = multidraft_view.gains(rows).set_index(["temperature", "L"])
    assert g.at[(0.7, 4), "gain"] == pytest.approx(0.2) and g.at[(0.7, 4), "best"] == "RBV (ours), K = 4"
    monkeypatch.setenv("SPECLAB_MULTIDRAFT_JSON", str(path))
    at = goto(app, "multidraft")
    text = at.info[0].value
    assert multidraft_view.headline(rows, 0.7) in text and "+20%" in multidraft_view.headline(rows, 0.7)
    plain = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)  # the sentence without its links
    assert multidraft_view.wall_clock(rows, 0.7) in plain
    links = re.findall(r"\]\((speedups\?[^)]+)\)", text)
    assert links and all(parse_qs(urlparse(u).query)["row"][0].endswith("-t0-7") for u in links)  # T = 0.7's rows
    fig = at.get("plotly_chart")[0].proto.spec
    assert "Block efficiency by drafts per step, T = 0.7" in fig and "L = 4" in fig
    # every cell's modelled ×AR links to its own row on the Speedups page, and prints its figure
    cells = next(d.value for d in at.dataframe if "×AR (modelled)" in d.value.columns)
    shown = rows[rows["temperature"] == 0.7]
    assert len(cells) == len(shown)
    for url, m, k, L, x in zip(cells["×AR (modelled)"], shown["method"], shown["k"], shown["L"], shown["sr_model"]):
        q = parse_qs(urlparse(url).query)
        assert q["row"] == [reconcile.md_cell_id(path.name, m, k, L, 0.7)] and q["pair"] == [reconcile.pair_id("t")]
        assert re.search(reconcile.FIGURE_TEXT, url).group(1) == f"{x:.2f}"
    at.radio(key="md_temp").set_value(0.4).run()
    assert multidraft_view.headline(rows, 0.4) in at.info[0].value
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "sweep", "rows": []}))
    at.text_input(key="md_json").set_value(str(tmp_path / "bad.json")).run()
    assert not at.exception and any("not a paired multi-draft result" in i.value for i in at.info)


def test_multidraft_page_draws_block_efficiency_and_wall_clock(app):
    at = goto(app, "multidraft")
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert any(t.startswith("Block efficiency by drafts per step") for t in titles)
    assert any(t.startswith("Wall clock: modelled speedup over AR") for t in titles)
    assert any("**K** = drafts per step" in c.value and "**L** = block length" in c.value for c in at.caption)
