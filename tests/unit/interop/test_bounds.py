"""Spec-Bench answer files ⇄ traces (engine.interop.specbench), speed.py's metric (engine.interop.speed)
and the accepted-length bound (engine.interop.bounds)."""

import numpy as np
import pytest
from engine.interop import bounds


def test_renewal_bound():
    # constant A: the fixed window γ = A is already the oracle
    b = bounds.renewal_bound([3] * 10, c=0.1)
    assert b["best_gamma"] == 3 and b["bound"] == pytest.approx(1.0)
    # spread A: S_oracle = E[A+1]/(cE[A]+1) against max_γ E[min(A,γ)+1]/(γc+1), by hand at c = 0.1
    a = [0, 0, 4, 4]
    b = bounds.renewal_bound(a, c=0.1, gammas=range(1, 9))
    fixed = {g: (np.minimum(a, g).mean() + 1) / (g * 0.1 + 1) for g in range(1, 9)}
    assert b["s_oracle"] == pytest.approx(3 / 1.2) and b["s_best_fixed"] == pytest.approx(max(fixed.values()))
    assert b["bound"] > 1.0
    # no policy beats the oracle: every window, even one chosen knowing A, emits ≤ A+1 at ≥ Ac+1
    rng = np.random.default_rng(0)
    for _ in range(20):
        w = rng.integers(0, 6, size=len(a))
        s_policy = (np.minimum(a, w) + 1).mean() / (w * 0.1 + 1).mean()
        assert s_policy <= b["s_oracle"] + 1e-12
