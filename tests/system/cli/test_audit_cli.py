"""The audit itself: branch enumeration through coin ledgers, deficit diagnostics, the CLI's outputs."""

import csv

from engine.__main__ import main


def test_audit_command_writes_markdown_and_csv(tmp_path, capsys):
    md, out = tmp_path / "audit.md", tmp_path / "audit.csv"
    rc = main(["audit", "--quick", "--verifiers", "token,block,rbv,spectr-gbv-published",
               "--markdown", str(md), "--csv", str(out)])
    assert rc == 0  # only a lossless rule failing makes the command fail
    text = md.read_text()
    assert "python -m engine audit --quick" in text and "| spectr-gbv-published |" in text
    assert "**NOT lossless**" in text.split("| spectr-gbv-published |")[1].splitlines()[0]
    rows = list(csv.DictReader(open(out)))
    assert {"verifier", "case", "k", "lossless_error", "min_deficit", "expected_accepted"} <= set(rows[0])
    assert {r["verifier"] for r in rows} == {"token", "block", "rbv", "spectr-gbv-published"}
