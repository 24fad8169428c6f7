"""Multi-draft verifiers (RRS, K-SEQ, RBV, SpecTr-GBV as published): exact enumeration, notes regression
values, the optimal-acceptance bound, drafter/tree bookkeeping and χ² of the real decode loop."""

import itertools

import pytest
import torch

from engine.bench.audit import audit, notes_toy, toy_cases
from engine.decode import DecodeConfig
from engine.drafters.multi import MultiDraftConfig, MultiDrafter
from engine.core.lm import TableLM
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig
from engine.core.tree import TreeTarget
from engine.verify import VERIFIERS, verify_block
from engine.verify.multidraft import kseq_rho
from tests.conftest import chi_square_of_loop

LOSSLESS_MULTI = ("rrs", "kseq", "rbv", "kbv")


@pytest.mark.parametrize("name", LOSSLESS_MULTI)
@pytest.mark.parametrize("vocab,gamma,k", [(2, 2, 2), (2, 3, 2), (3, 2, 2), (2, 1, 3), (2, 2, 3)])
def test_lossless_by_enumeration(name, vocab, gamma, k):
    for case, (q_fn, p_fn) in toy_cases(vocab).items():
        row = audit(VERIFIERS[name], q_fn, p_fn, vocab, gamma, name, case, k=k, multi=True)
        assert row.lossless_error <= 1e-12 and row.mass_error <= 1e-12, row
        # A zero-mass residual may only be reached with rounding-level probability (K-SEQ at p = q: ρ* = 1 + ε).
        assert row.first_token_error <= 1e-12 and row.fallback_mass <= 1e-12, row


# The notes' §5.5 table (exact E[accepted], same toys bit for bit): RRS, K-SEQ, RBV at K = 2 and 3.
NOTES_55 = {(0, 2, 2): (1.5350, 1.6112, 1.5687, 1.6540, 1.7458, 1.6806),
            (0, 3, 2): (0.3978, 0.4076, 0.4363, 0.4777, 0.4939, 0.5030),
            (1, 2, 3): (0.9882, 1.0069, 1.0507, 1.2499, 1.2813, 1.3109)}


@pytest.mark.parametrize("toy", list(NOTES_55))
def test_notes_table_values(toy):
    seed, vocab, gamma = toy
    q_fn, p_fn = notes_toy(vocab, seed)
    # Every value of the row, K = 3 included (~10 s for the two larger toys): a value computed and not
    # compared guards nothing.
    got = [audit(VERIFIERS[name], q_fn, p_fn, vocab, gamma, k=k, multi=True).expected_accepted
           for k in (2, 3) for name in ("rrs", "kseq", "rbv")]
    assert len(got) == len(NOTES_55[toy])
    for g, want in zip(got, NOTES_55[toy]):
        assert g == pytest.approx(want, abs=6e-5)


def test_kbv_reduces_to_bv_and_kseq_and_never_trails_kseq():
    """KBV (ours): K = 1 is BV, γ = 1 is K-SEQ, and on every toy its expected accepted length is at
    least K-SEQ's (the walks agree until one draft is left; BV ≥ SD on that draft), exactly."""
    for vocab in (2, 3):
        for case, (q_fn, p_fn) in toy_cases(vocab).items():
            for gamma, k in ((1, 2), (1, 3), (2, 1), (2, 2), (3, 2)) if vocab == 2 else ((1, 2), (2, 1), (2, 2)):
                kbv = audit(VERIFIERS["kbv"], q_fn, p_fn, vocab, gamma, k=k, multi=True)
                assert kbv.lossless_error <= 1e-12, (case, vocab, gamma, k)
                if k == 1:
                    bv = audit(VERIFIERS["block"], q_fn, p_fn, vocab, gamma)
                    assert kbv.expected_accepted == pytest.approx(bv.expected_accepted, abs=1e-12)
                    continue
                kseq = audit(VERIFIERS["kseq"], q_fn, p_fn, vocab, gamma, k=k, multi=True)
                if gamma == 1:
                    assert kbv.expected_accepted == pytest.approx(kseq.expected_accepted, abs=1e-12)
                assert kbv.expected_accepted >= kseq.expected_accepted - 1e-12, (case, vocab, gamma, k)


def test_rbv_reduces_to_bv_and_rrs():
    q_fn, p_fn = notes_toy(2, 1)
    bv = audit(verify_block, q_fn, p_fn, 2, 3)
    rbv1 = audit(VERIFIERS["rbv"], q_fn, p_fn, 2, 3, k=1, multi=True)
    assert rbv1.expected_accepted == pytest.approx(bv.expected_accepted, abs=1e-12)
    for k in (2, 3):
        rrs = audit(VERIFIERS["rrs"], q_fn, p_fn, 2, 1, k=k, multi=True)
        rbv = audit(VERIFIERS["rbv"], q_fn, p_fn, 2, 1, k=k, multi=True)
        assert rbv.expected_accepted == pytest.approx(rrs.expected_accepted, abs=1e-12)


@pytest.mark.parametrize("name", LOSSLESS_MULTI)
def test_monotone_in_k(name):
    q_fn, p_fn = toy_cases(2)["random"]
    e = [audit(VERIFIERS[name], q_fn, p_fn, 2, 2, k=k, multi=True).expected_accepted for k in (1, 2, 3)]
    assert e[0] <= e[1] + 1e-12 <= e[2] + 2e-12


def _alpha_star(q: torch.Tensor, p: torch.Tensor, k: int) -> float:
    """Optimal single-token acceptance of k i.i.d. drafts (notes §4.3): min_T p(T) + 1 − q(T)^k."""
    V = len(q)
    best = 1.0
    for mask in itertools.product((0, 1), repeat=V):
        m = torch.tensor(mask, dtype=torch.float64)
        best = min(best, float((p * m).sum()) + 1 - float((q * m).sum()) ** k)
    return best


@pytest.mark.parametrize("vocab", [2, 3])
def test_single_token_acceptance_below_optimum(vocab):
    for case, (q_fn, p_fn) in toy_cases(vocab).items():
        for k in (2, 3):
            bound = _alpha_star(q_fn(()), p_fn(()), k)
            for name in LOSSLESS_MULTI:
                acc = audit(VERIFIERS[name], q_fn, p_fn, vocab, 1, k=k, multi=True).expected_accepted
                assert acc <= bound + 1e-12, (name, case, k, acc, bound)


def test_kseq_rho_solves_its_equation():
    g = torch.Generator().manual_seed(3)
    for k in (2, 3, 5):
        q = torch.rand(6, generator=g, dtype=torch.float64)
        p = torch.rand(6, generator=g, dtype=torch.float64)
        q, p = q / q.sum(), p / p.sum()
        rho, beta = kseq_rho(q, p, k)
        assert 1.0 <= rho <= k
        assert 1 - (1 - beta) ** k == pytest.approx(rho * beta, abs=1e-9)
        assert (1 - (1 - beta) ** k) / beta <= rho + 1e-12  # the residual is non-negative


@pytest.mark.slow
@pytest.mark.parametrize("verifier", ["rbv", "kbv", "kseq", "rrs"])
def test_chi_square_of_the_real_loop_k2(verifier):
    """Whole sampled continuations of the real torch loop (K = 2 drafts, tree target pass) match the
    target's exact joint: the lossless multi-draft verifiers pass where the published GBV fails below."""
    pval, tv = chi_square_of_loop(verifier, MultiDrafter(TableLM(3, seed=12), MultiDraftConfig(k=2)), 5_000)
    assert pval > 1e-4, (pval, tv)


@pytest.mark.parametrize("verifier", ["rbv", "spectr-gbv-published", "block"])
def test_multi_draft_trace_validates(pair, tmp_path, verifier):
    """Traces carry every draft block, the chosen index and per-position decisions, and load back."""
    from engine.run import Request, run_requests
    from engine.trace.format import load_trace

    target, draft = pair
    k = 1 if verifier == "block" else 3
    drafter = draft if k == 1 else MultiDrafter(draft, MultiDraftConfig(k=k))
    cfg = DecodeConfig(max_new_tokens=16, verifier=verifier, sampling=SamplingConfig(temperature=1.0, seed=2))
    path = tmp_path / "multi.jsonl"
    run_requests(TreeTarget(target), drafter, parse_policy("fixed:3"), cfg, [Request([1, 5, 9, 3])], path,
                 progress=False)
    t = load_trace(path)
    assert t.complete and t.header["verifier"] == verifier
    for s in t.steps:
        assert len(s["decisions"]) == s["window"]
        if k > 1 and s["window"]:
            assert len(s["all_drafts"]) == k and s["all_drafts"][s["chosen"]] == s["draft_tokens"]
