"""Block verification (Sun et al.): exact enumeration of the real function, regression values, χ² of the loop."""

import pytest
import torch

from engine.bench.audit import audit, constant, notes_toy, toy_cases
from engine.core.lm import TableLM
from engine.verify import verify_block, verify_token
from engine.verify.block import verify_block_same_row
from tests.conftest import chi_square_of_loop

GBV_TOY = (constant([2 / 3, 1 / 3]), constant([1 / 3, 2 / 3]))  # (q, p) of the paper's motivating example


@pytest.mark.parametrize("vocab,gammas", [(2, (1, 2, 3, 4)), (3, (1, 2, 3))])
def test_block_verifier_lossless_by_enumeration(vocab, gammas):
    for case, (q_fn, p_fn) in toy_cases(vocab).items():
        for g in gammas:
            row = audit(verify_block, q_fn, p_fn, vocab, g, "block", case)
            assert row.lossless_error <= 1e-12, row
            assert row.first_token_error <= 1e-12 and row.mass_error <= 1e-12, row
            assert row.fallback_mass == 0.0, row  # no zero-mass residual in float64
            sd = audit(verify_token, q_fn, p_fn, vocab, g)
            assert row.expected_accepted >= sd.expected_accepted - 1e-12, (case, g)  # BV ≥ SD


@pytest.mark.parametrize("gamma,sd,bv", [(1, 2 / 3, 2 / 3), (2, 10 / 9, 11 / 9), (3, 38 / 27, 5 / 3)])
def test_paper_toy_expected_accepted(gamma, sd, bv):
    assert audit(verify_token, *GBV_TOY, 2, gamma).expected_accepted == pytest.approx(sd, abs=1e-12)
    assert audit(verify_block, *GBV_TOY, 2, gamma).expected_accepted == pytest.approx(bv, abs=1e-12)


@pytest.mark.parametrize("seed,vocab,gamma,sd,bv", [(0, 2, 2, 1.37056, 1.41333), (0, 3, 3, 0.37161, 0.50573),
                                                    (1, 2, 4, 0.80198, 0.89207), (2, 2, 3, 0.08481, 0.10626)])
def test_notes_appendix_b_values(seed, vocab, gamma, sd, bv):
    """The notes' reference checker's toys, bit for bit: same E[τ] for SD and BV (Appendix B)."""
    q_fn, p_fn = notes_toy(vocab, seed)
    assert audit(verify_token, q_fn, p_fn, vocab, gamma).expected_accepted == pytest.approx(sd, abs=1e-5)
    assert audit(verify_block, q_fn, p_fn, vocab, gamma).expected_accepted == pytest.approx(bv, abs=1e-5)


def test_same_position_z_is_detected_as_lossy():
    q_fn, p_fn = notes_toy(2, 0)
    row = audit(verify_block_same_row, q_fn, p_fn, 2, 2)
    assert row.lossless_error == pytest.approx(0.24, abs=0.01)  # the notes' 2.4e-1


def test_p_equals_q_accepts_everything():
    q_fn, p_fn = toy_cases(3)["p=q"]
    assert audit(verify_block, q_fn, p_fn, 3, 3).expected_accepted == pytest.approx(3.0, abs=1e-12)


def test_gamma_one_equals_token_verification():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        q = torch.rand(1, 5, generator=g, dtype=torch.float64)
        p = torch.rand(2, 5, generator=g, dtype=torch.float64)
        q, p = q / q.sum(-1, keepdim=True), p / p.sum(-1, keepdim=True)
        x = [int(torch.randint(5, (1,), generator=g))]
        u = torch.rand(2, generator=g, dtype=torch.float64)
        a, b = verify_block(x, q, p, u), verify_token(x, q, p, u)
        assert a.tokens == b.tokens and a.accept_probs[0] == pytest.approx(b.accept_probs[0])


def test_last_success_not_first_failure():
    """τ is the last i with η_i < h_i: a failed coin before a later success does not stop the scan."""
    q = torch.tensor([[2 / 3, 1 / 3], [2 / 3, 1 / 3]], dtype=torch.float64)
    p = torch.tensor([[1 / 3, 2 / 3]] * 3, dtype=torch.float64)
    # X = (0, 1): p_1 = 1/2, Z_1 = 0 → h_1 = 0; p_2 = min(1/2 · 2, 1) = 1 = h_2.
    res = verify_block([0, 1], q, p, torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))
    assert res.accept_probs == pytest.approx((0.0, 1.0))
    assert res.decisions == (0, 1) and res.accepted == 2 and res.bonus


def test_greedy_is_prefix_match():
    one = torch.eye(4, dtype=torch.float64)
    q = one[[1, 2, 3]]
    p = one[[1, 2, 0, 3]]
    res = verify_block([1, 2, 3], q, p, torch.zeros(4, dtype=torch.float64))
    assert res.accepted == 2 and res.tokens == (1, 2, 0)


@pytest.mark.slow
def test_chi_square_of_the_real_loop_block():
    pval, tv = chi_square_of_loop("block", TableLM(3, seed=12), 6_000)
    assert pval > 1e-4, (pval, tv)


@pytest.mark.slow
def test_chi_square_of_the_real_loop_with_trimmed_windows():
    """A window that drops its last drafted token (confidence:t,trim=1) decides from draft-side values
    only, so the sampled continuations of the real loop still follow the target exactly."""
    pval, tv = chi_square_of_loop("token", TableLM(3, seed=12), 6_000, policy="confidence:0.5,trim=1,max=3")
    assert pval > 1e-4, (pval, tv)


def test_uncorrected_trim_is_caught_by_the_same_statistic(monkeypatch):
    """Without the kept-law correction (verify against q instead of q·1[q ≥ t]/Z) the loop is biased:
    the χ² statistic above can see it, so its pass is evidence."""
    from engine.policies.simple import Confidence

    monkeypatch.setattr(Confidence, "kept_proposal", lambda self, q: q)
    pval, tv = chi_square_of_loop("token", TableLM(3, seed=12), 3_000, policy="confidence:0.5,trim=1,max=3")
    assert pval < 1e-4, (pval, tv)


class HiddenTableLM(TableLM):
    """TableLM that also exposes a 'hidden state' (one-hot of the last token, + a bias unit), so the
    PACER policy can run on exactly enumerable models."""

    def extend(self, ids):
        out = super().extend(ids)
        self.last_hidden = torch.nn.functional.one_hot(torch.tensor(self.tokens[-len(ids):]),
                                                        self.vocab_size + 1).double()
        self.last_hidden[:, -1] = 1.0
        return out


def pacer_on_table(threshold=0.45):
    """PACER with b = 1, trim = 1 and a hand-written M_B: s_i = Π_{j≤i} m_j · (0.7 + 0.3·[last token = 0])
    with m_j its confidence input. It reads the hidden state and the confidence, like the trained M_B."""
    from engine.policies.pacer import Pacer, PreVerifier, PreVerifierConfig

    class HandMB(PreVerifier):
        def __init__(self):
            super().__init__(PreVerifierConfig(hidden_size=4, d_model=8, heads=2, ff=8, layers=1))

        def score_step(self, hidden, q, ent):
            return torch.cumprod(q.double(), 0) * (0.7 + 0.3 * hidden[:, 0].double())

    return Pacer(block=1, threshold=threshold, rho=1.0, max_window=3, model=HandMB(), trim=1)


@pytest.mark.slow
def test_chi_square_of_the_real_loop_with_pacer_trim():
    """PACER b = 1, trim = 1 at T = 1: the drop of x_i is decided from states fixed before x_i is drawn,
    so the sampled continuations still follow the target exactly."""
    pval, tv = chi_square_of_loop("token", HiddenTableLM(3, seed=12), 6_000, policy=pacer_on_table())
    assert pval > 1e-4, (pval, tv)


def test_pacer_trim_on_the_sampled_token_is_caught(monkeypatch):
    """The same rule fed the sampled token's own q(x_i) instead of max_x q(x) filters drafts by value:
    the χ² statistic above sees the bias, so its pass is evidence."""
    from engine.policies.base import DraftInfo
    from engine.policies.pacer import Pacer

    real = Pacer.keep_drafting
    monkeypatch.setattr(Pacer, "keep_drafting", lambda self, info: real(self, DraftInfo(
        info.index, info.token, info.q_token, info.entropy, info.hidden, None)))
    pval, tv = chi_square_of_loop("token", HiddenTableLM(3, seed=12), 3_000, policy=pacer_on_table())
    assert pval < 1e-4, (pval, tv)
