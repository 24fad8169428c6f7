"""The audit itself: branch enumeration through coin ledgers, deficit diagnostics, the CLI's outputs."""

import pytest
from engine.bench.audit import audit, constant, run_audit
from engine.verify import LOSSLESS, verify_token


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
