"""The audit itself: branch enumeration through coin ledgers, deficit diagnostics, the CLI's outputs."""

import csv

import pytest
import torch

from engine.__main__ import main
from engine.bench.audit import audit, branches, constant, run_audit
from engine.verify import LOSSLESS, verify_token
from engine.verify.coins import CoinResult, coin


def test_branches_cover_every_coin_path():
    """A two-coin rule whose second coin is flipped only after the first rejects: three leaves."""

    def rule(u):
        ledger = []
        if coin(u, 0, 0.3, ledger):
            out = 0
        elif coin(u, 1, 0.6, ledger):
            out = 1
        else:
            out = 2
        d = torch.zeros(3, dtype=torch.float64)
        d[out] = 1.0
        return CoinResult(0, (out,), (), (), (), d, False, coins=tuple(ledger))

    leaves = {int(r.tokens[0]): pr for pr, r in branches(rule, 2, 1)}
    assert leaves == pytest.approx({0: 0.3, 1: 0.7 * 0.6, 2: 0.7 * 0.4})


def test_coins_outside_unit_interval_are_clipped():
    def rule(u):
        ledger = []
        out = int(coin(u, 0, 1.7, ledger)) + 2 * int(coin(u, 1, -0.2, ledger))
        d = torch.zeros(4, dtype=torch.float64)
        d[out] = 1.0
        return CoinResult(0, (out,), (), (), (), d, False, coins=tuple(ledger))

    assert [(pr, r.tokens) for pr, r in branches(rule, 2, 1)] == [(1.0, (1,))]


def test_single_draft_verifier_refused_at_k2():
    with pytest.raises(ValueError, match="K = 1"):
        audit(verify_token, constant([0.5, 0.5]), constant([0.5, 0.5]), 2, 1, k=2)


def test_run_audit_flags_exactly_the_lossy_rules():
    rows = run_audit(grid=((2, 2, 1), (2, 2, 2)), cases=("notes-toy-0", "random", "draft zeros"))
    bad = {r.verifier for r in rows if not r.lossless()}
    assert bad == {"spectr-gbv-published", "block-same-row (lossy near-miss)"}
    assert {r.verifier for r in rows} >= LOSSLESS
    gbv2 = {r.case: r for r in rows if r.verifier == "spectr-gbv-published" and r.k == 2}
    assert gbv2["notes-toy-0"].min_deficit < -0.1 and gbv2["notes-toy-0"].first_token_error > 0.1
    assert all(r.lossless_error > 1e-3 for r in gbv2.values())


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
