"""engine.measure: the one forward timer (cache left as found, round-robin medians, sync on CUDA only)."""

import pytest

from engine import measure


class CountingLM:
    """A stand-in LM whose forward of k tokens 'costs' k ms of a fake clock."""

    def __init__(self, clock):
        self.clock, self.length, self.fed = clock, 0, []

    def reset(self):
        self.length = 0

    def extend(self, ids):
        self.fed.append(list(ids))
        self.clock[0] += len(ids) / 1e3
        self.length += len(ids)

    def crop(self, n):
        self.length = n


@pytest.fixture
def fake_clock(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    return clock


def test_forward_curve_times_k_tokens_after_the_context(fake_clock):
    lm = CountingLM(fake_clock)
    curve = measure.forward_curve(lm, list(range(10, 30)), ks=(1, 2, 5), repeats=3)
    assert curve == pytest.approx({1: 1.0, 2: 2.0, 5: 5.0})
    assert lm.length == 0  # reset at the end
    timed = [f for f in lm.fed[2:] if len(f) in (1, 2, 5)]
    assert [len(f) for f in timed[:6]] == [1, 2, 5, 1, 2, 5]  # round-robin over k
    assert timed[2] == [10, 11, 12, 13, 14]  # distinct tokens from the context, not one repeated


def test_forward_ms_crops_back(fake_clock):
    lm = CountingLM(fake_clock)
    lm.extend([1, 2, 3])
    assert measure.forward_ms(lm, [4, 5]) == pytest.approx(2.0)
    assert lm.length == 3


def test_median_ms_and_bad_arguments(fake_clock):
    calls = []

    def fn():
        calls.append(1)
        fake_clock[0] += 0.004 if len(calls) % 2 else 0.002

    assert measure.median_ms(fn, repeats=3, warmup=1) in (pytest.approx(2.0), pytest.approx(4.0))
    assert len(calls) == 4
    with pytest.raises(ValueError, match="repeats"):
        measure.median_ms(fn, repeats=0)
    with pytest.raises(ValueError, match="ks"):
        measure.forward_curve(CountingLM(fake_clock), [1, 2], ks=(0,))


def test_sync_waits_only_on_cuda(monkeypatch):
    import torch

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: waited.append(1))
    measure.sync(None)
    measure.sync("cpu")
    measure.sync(torch.device("cpu"))
    assert waited == []
    measure.sync("cuda:0")
    measure.sync(torch.device("cuda", 0))

    class LM:
        device = torch.device("cuda", 0)

    measure.sync(LM())
    assert len(waited) == 3
