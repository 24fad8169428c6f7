"""engine.bench.bandwidth: the read-bandwidth probe's arithmetic and a real probe on a tiny size."""

from __future__ import annotations

import pytest
import torch

from engine.bench import bandwidth
from engine.bench.bandwidth import BandwidthConfig, gb_per_s


def test_gb_per_s_is_bytes_over_seconds_in_decimal_gigabytes():
    assert gb_per_s(10**9, 0.1) == pytest.approx(10.0)
    assert gb_per_s(536_870_912, 0.0537) == pytest.approx(10.0, rel=1e-3)  # the module doc's worked example
    with pytest.raises(ValueError, match="cannot take 0"):
        gb_per_s(10, 0.0)


def test_a_tiny_probe_reports_the_median_pass_and_restores_the_threads(monkeypatch):
    before = torch.get_num_threads()
    r = bandwidth.measure(BandwidthConfig(nbytes=4 * 2**20, threads=1, repeats=3, warmup=1))
    assert torch.get_num_threads() == before
    assert r.nbytes == 4 * 2**20 and r.threads == 1 and r.repeats == 3 and len(r.seconds) == 3
    median = sorted(r.seconds)[1]
    assert r.gb_per_s == pytest.approx(r.nbytes / median / 1e9)
    d = r.to_dict()
    assert d["gb_per_s"] == r.gb_per_s and len(d["seconds"]) == 3 and "median" in d["method"]


def test_the_probe_times_a_reduction_over_the_whole_buffer(monkeypatch):
    """The timed call reads every byte: a sum over nbytes / 4 float32 ones equals their count."""
    seen = []
    real_sum = torch.Tensor.sum

    def spy(x, *a, **k):
        out = real_sum(x, *a, **k)
        seen.append((x.numel(), float(out)))
        return out

    monkeypatch.setattr(torch.Tensor, "sum", spy)
    bandwidth.measure(BandwidthConfig(nbytes=4096, threads=1, repeats=3, warmup=2))
    assert seen == [(1024, 1024.0)] * 5  # two warm-up passes and three timed ones, each over the whole buffer


@pytest.mark.parametrize("cfg, words", [(BandwidthConfig(nbytes=6), "multiple of 4"),
                                        (BandwidthConfig(nbytes=0), "multiple of 4"),
                                        (BandwidthConfig(threads=0), "threads and repeats"),
                                        (BandwidthConfig(repeats=0), "threads and repeats")])
def test_bad_configs_are_refused_in_one_line(cfg, words):
    with pytest.raises(ValueError, match=words):
        bandwidth.measure(cfg)


def test_a_held_buffer_is_read_as_given_and_a_wrong_size_refused(monkeypatch):
    """`buffer` + `measure(cfg, buf)`: a run probing beside every round reads one resident buffer, not a new one."""
    cfg = BandwidthConfig(nbytes=4096, threads=1, repeats=2, warmup=0)
    buf = bandwidth.buffer(cfg)
    assert buf.numel() == 1024 and float(buf.sum()) == 1024.0
    made = []
    monkeypatch.setattr(bandwidth, "buffer", lambda c: made.append(c) or torch.ones(c.nbytes // 4))
    r = bandwidth.measure(cfg, buf)
    assert made == [] and len(r.seconds) == 2 and r.gb_per_s > 0
    bandwidth.measure(cfg)
    assert made == [cfg]  # without one, the probe makes its own
    with pytest.raises(ValueError, match="holds 2048 bytes"):
        bandwidth.measure(cfg, torch.ones(512))


def test_the_faster_of_the_two_reads_is_the_bandwidth_and_both_are_recorded(monkeypatch):
    """A read that keeps more lines in flight (read_probe.h) sets the roofline where it is faster; where it is
    slower, torch's sum does; either way the file holds both."""
    import time

    cfg = BandwidthConfig(nbytes=4 * 2**20, threads=1, repeats=3, warmup=0)
    monkeypatch.setattr(bandwidth, "_runs_read", lambda x, threads: (lambda: time.sleep(0.05)))
    slow = bandwidth.measure(cfg)
    assert set(slow.arms) == {"torch", "runs"} and slow.arms["runs"] < 4 * 2**20 / 0.05 / 1e9 * 1.01
    assert slow.gb_per_s == slow.arms["torch"] > slow.arms["runs"]
    monkeypatch.setattr(bandwidth, "_runs_read", lambda x, threads: (lambda: None))
    fast = bandwidth.measure(cfg)
    assert fast.gb_per_s == fast.arms["runs"] > fast.arms["torch"]
    assert "runs side by side" in fast.to_dict()["method"] and fast.to_dict()["arms"]["runs"] > 0
    monkeypatch.setattr(bandwidth, "_runs_read", lambda x, threads: None)  # no C kernel here: the sum alone
    alone = bandwidth.measure(cfg)
    assert set(alone.arms) == {"torch"} and "x.sum()" in alone.to_dict()["method"]
