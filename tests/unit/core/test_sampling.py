"""engine.core.sampling's fast paths give what the plain torch code gives: argmax_ids (NumPy's argmax on CPU
float rows) and sample_from's one-hot shortcut (the inverse CDF without the cumulative sum)."""

import math

import pytest
import torch

from engine.core.sampling import SamplingConfig, argmax_ids, draw_token, probs_from_logits, sample_from


def _rows() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    tie = torch.zeros(7)
    tie[[2, 5]] = 1.0  # two maxima: the first is taken
    nan = torch.randn(9, generator=g)
    nan[[4, 6]] = float("nan")  # NaN counts as the maximum, the first one
    ninf = torch.full((5,), -math.inf)
    return [torch.randn(49152, generator=g), tie, nan, ninf, torch.randn(3, 11, generator=g),
            torch.randn(4, 6, generator=g, dtype=torch.float64), torch.randn(2, 8, generator=g)[:, ::2]]


@pytest.mark.parametrize("i", range(7))
def test_argmax_ids_matches_torch(i):
    x = _rows()[i]
    got = argmax_ids(x)
    assert got.dtype == torch.long and got.shape == x.shape[:-1] + (1,)
    assert torch.equal(got, x.argmax(-1, keepdim=True))


def test_argmax_ids_other_dtypes_take_torch():
    x = torch.randn(3, 40).bfloat16()
    assert torch.equal(argmax_ids(x), x.argmax(-1, keepdim=True))


def test_greedy_probs_are_one_hot_on_the_first_maximum():
    logits = torch.tensor([[0.0, 3.0, 1.0, 3.0], [5.0, -1.0, 5.0, 0.0]])
    p = probs_from_logits(logits, SamplingConfig())
    assert torch.equal(p, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))


def _plain_inverse_cdf(probs: torch.Tensor, u: float) -> int:
    cdf = probs.double().cumsum(0)
    total = float(cdf[-1])
    idx = int(torch.searchsorted(cdf, torch.tensor([u * total], dtype=cdf.dtype), right=True)[0])
    return idx if idx < probs.shape[0] else int(torch.nonzero(probs > 0)[-1])


@pytest.mark.parametrize("hot", [0, 1, 500, 999])
@pytest.mark.parametrize("u", [0.0, 1e-12, 0.5, 1 - 1e-16, 0.9999999])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_hot_shortcut_is_the_inverse_cdf(hot, u, dtype):
    p = torch.zeros(1000, dtype=dtype)
    p[hot] = 1.0
    assert sample_from(p, u) == _plain_inverse_cdf(p, u) == hot


def test_not_one_hot_takes_the_cumulative_sum():
    g = torch.Generator().manual_seed(0)
    p = torch.rand(300, generator=g)
    p[p < 0.9] = 0.0  # a few entries with mass
    p /= p.sum()
    for u in torch.rand(50, generator=g, dtype=torch.float64).tolist():
        assert sample_from(p, u) == _plain_inverse_cdf(p, u)
    # one entry with mass but not positive, or NaN, is not a distribution: refused as before
    for bad in (-1.0, float("nan")):
        q = torch.zeros(10)
        q[3] = bad
        with pytest.raises(ValueError, match="zero mass"):
            sample_from(q, 0.5)


def test_greedy_draw_takes_the_argmax():
    logits = torch.tensor([0.5, 2.0, 2.0, -1.0])
    d = draw_token(logits, SamplingConfig(), torch.Generator().manual_seed(0))
    assert d.token == 1 and d.q[1] == 1.0 and d.q.sum() == 1.0


def test_negative_zero_and_strided_rows_still_sample_right():
    p = torch.zeros(64)
    p[10] = 1.0
    p[20] = -0.0  # no mass, but its bits are not zero: the cumulative sum decides, the same token
    assert sample_from(p, 0.7) == 10
    q = torch.zeros(2, 64)
    q[1, 33] = 1.0
    assert sample_from(q[:, 33], 0.2) == 1 and sample_from(q.t()[33], 0.9) == 1  # strided views
