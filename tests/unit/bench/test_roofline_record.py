"""engine.bench.roofline_record: what a bench result records about the machine — bandwidth, bytes per token
of each path's models, each row's roofline fraction, busy cores — and the refusals before any load."""

from __future__ import annotations

import pytest

from engine.bench.bandwidth import Bandwidth
from engine.bench.busy import BusyReport
from engine.bench.roofline import bytes_per_token
from engine.bench.roofline_record import check_pair_paths, peer_fractions, probe, record, summary_line
from engine.models import pair_weights
from engine.core.lm import HFModel
from engine.models.pair_weights import PairWeights
from engine.kernels.quant import quantize_model
from engine.models.tiny import tiny_llama

BW = Bandwidth(gb_per_s=10.0, nbytes=2**29, threads=2, repeats=7, seconds=(0.05,) * 7)


def lm(weights="dense", seed=0):
    m = tiny_llama(seed)
    if weights != "dense":
        quantize_model(m, weights, kernel="torch")
    return HFModel(m)


def test_record_prices_each_row_against_its_paths_target_and_keeps_each_models_bytes():
    dense_t, dense_d = lm(), lm(seed=1)
    mixed_t, mixed_d = lm(), lm("int8", seed=1)
    rows = [{"temperature": 0.0, "task": "overall", "config": "ar", "weights": "dense", "tokens_per_s": 1000.0,
             "decode_tokens_per_s": 1200.0},
            {"temperature": 0.0, "task": "overall", "config": "fixed:2", "weights": "target=dense,draft=int8",
             "tokens_per_s": 3000.0}]
    busy = BusyReport(0.9, 1.0, 10.0, 2, True, 1.0, 2.0)
    out = record({"rows": rows, "complete": True}, [(dense_t, dense_d), (mixed_t, mixed_d)], BW, busy)
    t_bytes = bytes_per_token(dense_t).total
    assert out["bandwidth_gb_per_s"] == 10.0 and out["bandwidth"]["threads"] == 2 and out["busy"]["busy"] is True
    assert list(out["bytes_per_token"]) == ["dense", "target=dense,draft=int8"]
    mixed = out["bytes_per_token"]["target=dense,draft=int8"]
    assert mixed["target"]["bytes_per_token"] == t_bytes
    assert mixed["draft"]["bytes_per_token"] == bytes_per_token(mixed_d).total < t_bytes / 2.5  # the draft's c falls
    assert out["rows"][0]["roofline_fraction"] == pytest.approx(1000.0 * t_bytes / 1e10)
    assert out["rows"][0]["decode_roofline_fraction"] == pytest.approx(1200.0 * t_bytes / 1e10)
    assert out["rows"][1]["roofline_fraction"] == pytest.approx(3000.0 * t_bytes / 1e10)
    assert out["complete"] is True and "roofline_fraction" not in rows[0]
    line = summary_line(out)
    assert line.startswith("read bandwidth 10.0 GB/s; AR at ") and "(dense, T = 0)" in line and "BUSY" in line


def test_one_path_rows_without_a_weights_key_take_the_runs_path_and_no_probe_means_unknown():
    t = lm()
    out = record({"rows": [{"config": "ar", "tokens_per_s": 100.0}]}, [(t, None)], None)
    assert out["bandwidth"] is None and out["rows"][0]["roofline_fraction"] is None
    assert out["bytes_per_token"]["dense"]["draft"] is None and "busy" not in out
    assert summary_line(out) == "bandwidth not measured"
    with_bw = record({"rows": [{"config": "ar", "tokens_per_s": 100.0}]}, [(t, None)], BW)
    assert with_bw["rows"][0]["roofline_fraction"] == pytest.approx(100.0 * bytes_per_token(t).total / 1e10)


def test_probe_is_skipped_at_zero_and_refuses_a_negative_size():
    assert probe(0) is None
    with pytest.raises(ValueError, match="≥ 0"):
        probe(-1)
    r = probe(1, threads=1)
    assert r.nbytes == 2**20 and r.threads == 1 and r.gb_per_s > 0


def test_check_pair_paths_refuses_a_draft_path_without_a_draft_model(monkeypatch):
    monkeypatch.delenv("SPECLAB_QGEMM", raising=False)
    monkeypatch.setattr(pair_weights, "status", lambda *a: None)
    check_pair_paths([PairWeights("dense", "quantized")], "some-draft-model")
    with pytest.raises(ValueError, match="the model-free drafter lookup:n=4 has no weights of its own"):
        check_pair_paths([PairWeights("dense", "dense"), PairWeights("dense", "int8")], "lookup:n=4")
    with pytest.raises(ValueError, match="there is no draft"):
        check_pair_paths([PairWeights("dense", "int8")], None)
    with pytest.raises(ValueError, match="not on cuda"):
        check_pair_paths([PairWeights("dense", "int8")], "d", device="cuda")


def test_peer_rows_use_each_engines_own_bytes():
    rows = [{"engine": "speclab", "tokens_per_s": 5.0}, {"engine": "llama.cpp", "tokens_per_s": 20.0},
            {"engine": "vllm", "tokens_per_s": 4.0}]
    out = peer_fractions(rows, {"speclab": 2e9, "llama.cpp": 0.5e9, "vllm": None}, BW)
    assert [r["roofline_fraction"] for r in out] == [pytest.approx(1.0), pytest.approx(1.0), None]
