"""Multi-draft verifiers (RRS, K-SEQ, RBV, SpecTr-GBV as published): exact enumeration, notes regression
values, the optimal-acceptance bound, drafter/tree bookkeeping and χ² of the real decode loop."""

import pytest

from engine.bench.audit import audit, notes_toy
from engine.drafters.multi import MultiDraftConfig, MultiDrafter
from engine.core.lm import TableLM
from engine.verify import VERIFIERS
from tests.conftest import chi_square_of_loop


def test_published_spectr_gbv_is_detected_as_lossy():
    """The notes' §5.4 verdict on the authors' code: per-iteration lossy at K = 1 (but W ≥ 0), wrong
    first-token marginal (W < 0) at K ≥ 2 — 0.588 vs the target's 0.466 on toy (0, V=2, L=2, K=2)."""
    gbv = VERIFIERS["spectr-gbv-published"]
    q_fn, p_fn = notes_toy(2, 0)
    k1 = audit(gbv, q_fn, p_fn, 2, 2, k=1, multi=True)
    assert k1.lossless_error == pytest.approx(3.9e-3, rel=0.05) and k1.min_deficit >= -1e-15
    k2 = audit(gbv, q_fn, p_fn, 2, 2, k=2, multi=True)
    assert k2.expected_accepted == pytest.approx(1.472, abs=1e-3)
    assert k2.first_token_error == pytest.approx(0.588 - 0.466, abs=2e-3)
    assert k2.min_deficit < -0.1 and not k2.lossless()


@pytest.mark.slow
def test_chi_square_flags_published_spectr_gbv():
    """The same statistic on the published SpecTr-GBV rule (K = 2): its bias is visible in the real loop."""
    pval, tv = chi_square_of_loop("spectr-gbv-published", MultiDrafter(TableLM(3, seed=12), MultiDraftConfig(k=2)),
                                  1_500)
    assert pval < 1e-4, (pval, tv)
