"""The audit itself: branch enumeration through coin ledgers, deficit diagnostics, the CLI's outputs."""

import pytest
import torch
from engine.bench.audit import branches
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
