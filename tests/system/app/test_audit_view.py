"""The Audit page's verdicts (app.audit_view) from docs/results/audit.csv: pure pandas, no torch.

The verdicts are checked against docs/audit.md, which `python -m engine audit` writes from the same
rows with the engine's own rule (engine.bench.audit.AuditRow.lossless), and against a perturbed copy."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from app import audit_view
from tests.conftest import REPO

CSV = REPO / "docs" / "results" / "audit.csv"


def audit_md_verdicts() -> dict[str, tuple[int, float, str]]:
    """verifier -> (rows, max lossless error, verdict) from docs/audit.md's worst-case table."""
    out = {}
    for line in (REPO / "docs" / "audit.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[1].isdigit():
            out[cells[0]] = (int(cells[1]), float(cells[2]), cells[6].replace("*", ""))
    return out


def test_verdicts_match_the_engines_own_table():
    table = audit_view.verdicts(audit_view.load_audit(CSV)).set_index("verifier")
    md = audit_md_verdicts()
    assert md and set(md) == set(table.index)
    for name, (rows, err, verdict) in md.items():
        assert table.at[name, "verdict"] == verdict, name
        assert table.at[name, "rows"] == rows
        assert table.at[name, "max_lossless_error"] == pytest.approx(err, rel=0.06)  # md rounds to 2 digits
    # The finding the audit exists for (computed above from the CSV, not written into the app).
    assert table.at["spectr-gbv-published", "verdict"] == "NOT lossless"
    assert all(table.at[n, "verdict"] == "lossless" for n in ("token", "block", "rrs", "kseq", "rbv"))


def test_worst_row_names_the_toy():
    rows = audit_view.load_audit(CSV)
    table = audit_view.verdicts(rows).set_index("verifier")
    g = rows[rows["verifier"] == "spectr-gbv-published"]
    worst = g.loc[g["lossless_error"].idxmax()]
    got = table.loc["spectr-gbv-published"]
    assert (got["worst_case"], got["worst_vocab"], got["worst_gamma"], got["worst_k"]) == (
        worst["case"], worst["vocab"], worst["gamma"], worst["k"])
    assert got["max_lossless_error"] == worst["lossless_error"] > 1e-3


def test_one_bad_row_flips_a_verdict(tmp_path):
    df = pd.read_csv(CSV)
    before = audit_view.verdicts(df).set_index("verifier")["verdict"]
    i = df.index[(df["verifier"] == "rbv") & (df["case"] == "p=q")][0]
    df.loc[i, "lossless_error"] = 1e-3
    path = tmp_path / "audit.csv"
    df.to_csv(path, index=False)
    after = audit_view.verdicts(audit_view.load_audit(path)).set_index("verifier")
    assert before["rbv"] == "lossless" and after.at["rbv", "verdict"] == "NOT lossless"
    assert after.at["rbv", "worst_case"] == "p=q" and after.at["rbv", "max_lossless_error"] == 1e-3
    others = [n for n in before.index if n != "rbv"]
    assert after.loc[others, "verdict"].tolist() == before[others].tolist()
    # Exactly at the tolerance is still lossless; just above is not.
    df.loc[i, "lossless_error"] = audit_view.TOL
    assert audit_view.verdicts(df).set_index("verifier").at["rbv", "verdict"] == "lossless"
    df.loc[i, "lossless_error"] = 2 * audit_view.TOL
    assert audit_view.verdicts(df).set_index("verifier").at["rbv", "verdict"] == "NOT lossless"


def test_bad_audit_files_give_one_line_errors(tmp_path):
    df = pd.read_csv(CSV)
    cases = {
        "missing.csv": None,
        "nocol.csv": df.drop(columns=["lossless_error"]),
        "text.csv": df.assign(mass_error=df["mass_error"].astype(object).where(df.index != 3, "oops")),
    }
    msgs = {}
    for name, frame in cases.items():
        p = tmp_path / name
        if frame is not None:
            frame.to_csv(p, index=False)
        with pytest.raises(ValueError) as e:
            audit_view.load_audit(p)
        msgs[name] = str(e.value)
        assert "\n" not in msgs[name]
    assert "no such audit file" in msgs["missing.csv"]
    assert re.search(r"missing column\(s\) lossless_error", msgs["nocol.csv"])
    assert msgs["text.csv"] == "text.csv: row 4: field 'mass_error': expected a finite number, got 'oops'"
