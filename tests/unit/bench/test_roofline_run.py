"""engine.bench.roofline_run: every (model, path) of a tiny model through the real decode loop, with the
bandwidth probe on a tiny size, and the rows' arithmetic checked against their own measurements."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

import pytest
import torch

from engine.bench.bandwidth import BandwidthConfig
from engine.bench.roofline_run import RooflineConfig, check, format_rows, run_roofline, summarize
from engine.core.lm import HFModel
from engine.models.load import LoadedModel
from engine.kernels.quant import quantize_model
from engine.models.tiny import tiny_llama

TINY = RooflineConfig(models=("tiny-a", "tiny-b"), paths=("fp32", "int8"), per_task=1, max_new_tokens=6, threads=1,
                      warmup_tokens=2, bandwidth=BandwidthConfig(nbytes=2**20, threads=1, repeats=3))


@dataclass
class P:
    text: str
    question_id: int


PROMPTS = [P("1 5 9 3", 1), P("7 2", 2), P("4 4 8", 3)]


def tiny_load(calls):
    def load(model, dtype, weights):
        calls.append((model, dtype, weights))
        m = tiny_llama(0 if model == "tiny-a" else 1)
        if weights != "dense":
            quantize_model(m, weights, kernel="torch")
        return LoadedModel(HFModel(m, name=model), None, model, 0.0)
    return load


def encode(tok, text):
    return [int(x) for x in text.split()]


def test_every_model_and_path_is_measured_and_its_fractions_follow_from_its_own_figures():
    calls, said = [], []
    res = run_roofline(TINY, PROMPTS, tiny_load(calls), encode, say=said.append)
    assert calls == [("tiny-a", "fp32", "dense"), ("tiny-a", "auto", "int8"), ("tiny-b", "fp32", "dense"),
                     ("tiny-b", "auto", "int8")]
    every = [res["bandwidth"]["gb_per_s"], res["bandwidth_after"]["gb_per_s"]] + [
        p["gb_per_s"] for p in res["bandwidth_rounds"]]
    assert [(p["model"], p["before_round"]) for p in res["bandwidth_rounds"]] == [
        (m, i) for m in ("tiny-a", "tiny-b") for i in range(4)]  # before each of the 3 rounds and after the last
    bw = res["bandwidth_gb_per_s"]
    assert bw == pytest.approx(statistics.median(every)) and bw > 0 and "before and just after its round" in res["bandwidth_rule"]
    assert [(r["model"], r["path"]) for r in res["rows"]] == [("tiny-a", "fp32"), ("tiny-a", "int8"),
                                                                ("tiny-b", "fp32"), ("tiny-b", "int8")]
    for r in res["rows"]:
        assert r["prompts"] == 3 and r["new_tokens"] == 18 and [x["question_id"] for x in r["runs"]] == [1, 2, 3]
        tps = sum(x["new_tokens"] / x["wall_s"] for x in r["runs"]) / 3
        assert r["tokens_per_s"] == pytest.approx(tps)
        assert r["decode_tokens_per_s"] >= r["tokens_per_s"]  # the prefill is left out of the decode-only speed
        rounds = [p["gb_per_s"] for p in res["bandwidth_rounds"] if p["model"] == r["model"]]
        for i, x in enumerate(r["runs"]):  # each run paired with the probes just before and after its round
            assert x["bandwidth_gb_per_s"] == pytest.approx((rounds[i] + rounds[i + 1]) / 2)
        want = sum(x["new_tokens"] / x["wall_s"] * r["bytes_per_token"] / (x["bandwidth_gb_per_s"] * 1e9)
                   for x in r["runs"]) / 3
        assert r["roofline_fraction"] == pytest.approx(want)
        assert r["roofline_tokens_per_s"] == pytest.approx(bw * 1e9 / r["bytes_per_token"])
        assert r["decode_roofline_fraction_best"] == pytest.approx(
            r["decode_tokens_per_s"] * r["bytes_per_token"] / (max(every) * 1e9))
    fp32, int8 = res["rows"][:2]
    assert int8["bytes_per_token"] < fp32["bytes_per_token"] / 2.5 and fp32["kernel"] == "torch"
    assert "Int8Linear" in int8["kernel"] and fp32["weights"] == "dense" and int8["weights"] == "int8"
    assert fp32["build"] is None and int8["build"] is None  # torch's kernels: no build of ours
    assert res["config"]["question_ids"] == [1, 2, 3] and res["kind"] == "roofline"
    assert any("read bandwidth" in s for s in said) and any("tiny-b [int8] q3" in s for s in said)
    table = format_rows(res["rows"])
    assert table.count("\n") == 5 and "| tiny-a | int8 |" in table


def test_summarize_means_over_prompts_like_the_bench():
    runs = [{"new_tokens": 10, "wall_s": 2.0, "prefill_s": 1.0}, {"new_tokens": 10, "wall_s": 1.0, "prefill_s": 0.0}]
    s = summarize(runs, 10**9, 10.0)
    assert s["tokens_per_s"] == pytest.approx((5 + 10) / 2) and s["decode_tokens_per_s"] == pytest.approx(10.0)
    assert s["roofline_tokens_per_s"] == pytest.approx(10.0) and s["decode_roofline_fraction"] == pytest.approx(1.0)
    assert summarize(runs, 10**9, None)["roofline_fraction"] is None
    assert "decode_roofline_fraction_kv" not in s  # no prompt lengths recorded: no KV figure


def test_the_kv_fraction_adds_the_cache_a_step_reads_at_the_mean_decode_context():
    """Prompt 1,000 tokens, 11 new: decode contexts 1,000 … 1,010, mean 1,005; 100 bytes a context token →
    100,500 bytes a step beside 1 MB of weights."""
    runs = [{"new_tokens": 11, "wall_s": 2.0, "prefill_s": 1.0, "prompt_tokens": 1000},
            {"new_tokens": 11, "wall_s": 1.1, "prefill_s": 0.0, "prompt_tokens": 0}]
    s = summarize(runs, 10**6, 0.011, kv_per_context_token=100)
    assert s["kv_bytes_per_token"] == pytest.approx((100_500 + 500) / 2)
    dec = (11.0, 10.0)  # decode tokens/s of the two runs
    want = (dec[0] * (10**6 + 100_500) + dec[1] * (10**6 + 500)) / 2 / 0.011e9
    assert s["decode_roofline_fraction_kv"] == pytest.approx(want)
    assert s["decode_roofline_fraction_kv"] > s["decode_roofline_fraction"]
    assert "kv_bytes_per_token" not in summarize(runs, 10**6, 0.011)  # a model without KV bytes: none


@pytest.mark.parametrize("cfg, words", [
    (replace(TINY, paths=("bf16", "fp8")), "unknown path 'fp8'"),
    (replace(TINY, paths=("bf16", "bf16")), "once"),
    (replace(TINY, models=()), "at least one model"),
    (replace(TINY, per_task=0), "must be ≥ 1"),
    (replace(TINY, round_repeats=-1), "round-probes ≥ 0"),
    (replace(TINY, bandwidth=BandwidthConfig(nbytes=3)), "multiple of 4")])
def test_bad_configs_are_refused_before_anything_runs(cfg, words):
    with pytest.raises(ValueError, match=words):
        check(cfg)
    with pytest.raises(ValueError, match=words):
        run_roofline(cfg, PROMPTS, lambda *a: pytest.fail("loaded a model"), encode)


def test_without_round_probes_fractions_are_taken_against_the_higher_probe(monkeypatch):
    """A dip in the probe before the runs (a shared host) must not inflate the fractions: the rows use the higher."""
    from engine.bench import roofline_run

    real, seen = roofline_run.bw_probe.measure, []

    def probe(cfg, buf=None):
        got = real(cfg, buf)
        seen.append(replace(got, gb_per_s=[5.0, 20.0][len(seen)]))
        return seen[-1]

    monkeypatch.setattr(roofline_run.bw_probe, "measure", probe)
    res = run_roofline(replace(TINY, models=("tiny-a",), round_repeats=0), PROMPTS[:1], tiny_load([]), encode,
                       say=lambda s: None)
    assert res["bandwidth"]["gb_per_s"] == 5.0 and res["bandwidth_after"]["gb_per_s"] == 20.0
    assert res["bandwidth_gb_per_s"] == 20.0 and res["bandwidth_rounds"] == []
    for r in res["rows"]:
        assert r["roofline_tokens_per_s"] == pytest.approx(20.0e9 / r["bytes_per_token"])
        assert r["decode_roofline_fraction"] == pytest.approx(r["decode_tokens_per_s"] / r["roofline_tokens_per_s"])
        assert "decode_roofline_fraction_best" not in r and "bandwidth_gb_per_s" not in r["runs"][0]
        assert list(r)[-1] == "runs"


def test_each_run_is_compared_with_the_bandwidth_probed_beside_it(monkeypatch):
    """Bandwidth that doubles between two rounds: each run's fraction uses its own round's probes, so a path that
    kept its share of the machine's bandwidth reads the same fraction in both rounds."""
    from engine.bench import roofline_run

    real, seen = roofline_run.bw_probe.measure, []
    values = [30.0, 10.0, 10.0, 30.0, 30.0]  # before; rounds 0, 1 and after the last; after the runs

    def probe(cfg, buf=None):
        got = replace(real(cfg, buf), gb_per_s=values[len(seen)])
        seen.append(got)
        return got

    monkeypatch.setattr(roofline_run.bw_probe, "measure", probe)
    res = run_roofline(replace(TINY, models=("tiny-a",), paths=("fp32",)), PROMPTS[:2], tiny_load([]), encode,
                       say=lambda s: None)
    assert [p["gb_per_s"] for p in res["bandwidth_rounds"]] == [10.0, 10.0, 30.0]
    row = res["rows"][0]
    assert [x["bandwidth_gb_per_s"] for x in row["runs"]] == [10.0, 20.0]
    assert res["bandwidth_gb_per_s"] == 30.0  # the median of 30, 10, 10, 30, 30
    f = [x["new_tokens"] / (x["wall_s"] - x["prefill_s"]) * row["bytes_per_token"] / (x["bandwidth_gb_per_s"] * 1e9)
         for x in row["runs"]]
    assert row["decode_roofline_fraction"] == pytest.approx(sum(f) / 2)


def test_summarize_pairs_each_run_with_its_probe():
    """The docstring's worked example: 60 and 40 tokens/s of 0.25 GB at 30 and 20 GB/s → 0.50; best probe 0.42."""
    runs = [{"new_tokens": 60, "wall_s": 1.0, "prefill_s": 0.0, "bandwidth_gb_per_s": 30.0},
            {"new_tokens": 40, "wall_s": 1.0, "prefill_s": 0.0, "bandwidth_gb_per_s": 20.0}]
    s = summarize(runs, 0.25e9, 25.0, best_gb_per_s=30.0)
    assert s["decode_roofline_fraction"] == pytest.approx(0.5) and s["roofline_fraction"] == pytest.approx(0.5)
    assert s["decode_roofline_fraction_best"] == pytest.approx(50 * 0.25 / 30)
    assert s["roofline_tokens_per_s"] == pytest.approx(100.0)  # R from the run's bandwidth (25 GB/s)
    assert "decode_roofline_fraction_best" not in summarize([dict(runs[0], bandwidth_gb_per_s=None)], 0.25e9, 25.0)
    # with the KV cache a step reads (prompt 1,000 tokens, 60 / 40 new: mean contexts 1,029.5 / 1,019.5, 10⁶ bytes
    # a context token), each run against its own probe too
    kv_runs = [dict(r, prompt_tokens=1000) for r in runs]
    k = summarize(kv_runs, 0.25e9, 25.0, kv_per_context_token=10**6)
    want = (60 * (0.25e9 + 1029.5e6) / 30e9 + 40 * (0.25e9 + 1019.5e6) / 20e9) / 2
    assert k["decode_roofline_fraction_kv"] == pytest.approx(want)


def test_a_row_names_the_build_its_kernels_ran_on(monkeypatch):
    """A path on our kernels records which build ran it (a forced build — another CPU's code on this one — then
    shows in the file and on the results page)."""
    from engine.bench import roofline_run
    from engine.kernels import dense_kernel, qkernel

    class Lm:
        def __init__(self, weights, model):
            self.weights, self.model = weights, model

    monkeypatch.setattr(dense_kernel, "loaded_variant", lambda: "bgemv")
    dense = torch.nn.Linear(4, 4)
    dense.speclab_dense_kernel = True
    assert roofline_run.build_of(Lm("dense", dense)) == "bgemv"
    dense.speclab_dense_kernel = False
    assert roofline_run.build_of(Lm("dense", dense)) is None
    if qkernel.available() is not None:
        pytest.skip(f"qgemm: {qkernel.available()}")
    q = torch.nn.Sequential(qkernel.QGemmLinear(torch.randn(32, 64), None, 4))
    assert roofline_run.build_of(Lm("quantized", q)) == f"qgemm-{qkernel.variant()}"


def test_every_row_records_the_build_of_its_loaded_path(monkeypatch):
    from engine.bench import roofline_run

    monkeypatch.setattr(roofline_run, "build_of", lambda lm: f"build-of-{lm.weights}")
    res = run_roofline(TINY, PROMPTS, tiny_load([]), encode, say=lambda s: None)
    assert [r["build"] for r in res["rows"]] == [f"build-of-{r['weights']}" for r in res["rows"]]
