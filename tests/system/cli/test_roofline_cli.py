"""`python -m engine roofline`, and the mixed weights paths (`--weights target=dense,draft=int8`) through
decode and bench, end to end on the tiny local pair (tests/conftest.py model_dirs)."""

from __future__ import annotations

import json

import pytest

from engine.__main__ import main

SMALL_PROBE = ["--bandwidth-mib", "1"]


def test_bandwidth_only_prints_one_line(capsys):
    assert main(["roofline", "--bandwidth-only", "--threads", "1", "--repeats", "1", *SMALL_PROBE]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("read bandwidth ") and "GB/s (1 MiB, 1 threads, median of 1" in out[0]


def test_roofline_writes_every_model_and_path_with_the_machine(model_dirs, tmp_path, capsys):
    t, _, prompts = model_dirs
    out = tmp_path / "roofline-test.json"
    rc = main(["roofline", "--models", str(t), "--paths", "fp32,int8", "--prompts", str(prompts), "--per-task", "1",
               "--max-new-tokens", "4", "--threads", "1", "--repeats", "1", "--warmup-tokens", "1", *SMALL_PROBE,
               "--round-probes", "2", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert [(r["path"], r["weights"], r["prompts"]) for r in res["rows"]] == [("fp32", "dense", 2), ("int8", "int8", 2)]
    assert res["bandwidth_gb_per_s"] > 0 and res["command"].startswith("python -m engine")
    assert "python" in res["software"] and "machine" in res and "lscpu" in res and res["created"]
    assert len(res["bandwidth_rounds"]) == 3  # before each of the two prompts' rounds and after the last
    for r in res["rows"]:  # each run against the bandwidth probed around its round
        assert r["roofline_fraction"] == pytest.approx(sum(
            x["new_tokens"] / x["wall_s"] * r["bytes_per_token"] / (x["bandwidth_gb_per_s"] * 1e9) for x in r["runs"]) / 2)
    printed = capsys.readouterr().out
    assert "| model | path | kernel | bytes/token |" in printed and f"wrote {out}" in printed


def test_roofline_refuses_an_unknown_path_before_loading(capsys):
    assert main(["roofline", "--models", "no-such-model", "--paths", "bf16,fp8"]) == 2
    assert "unknown path 'fp8'" in capsys.readouterr().err


def test_decode_runs_a_mixed_pair_and_the_header_names_each_models_path(model_dirs, tmp_path):
    t, d, prompts = model_dirs
    out = tmp_path / "mixed.jsonl"
    rc = main(["decode", "--target", str(t), "--draft", str(d), "--policy", "fixed:2", "--prompts", str(prompts),
               "--max-new-tokens", "8", "--dtype", "fp32", "--threads", "1", "--weights", "target=dense,draft=int8",
               "--out", str(out)])
    assert rc == 0
    header = json.loads(out.read_text().splitlines()[0])
    assert header["target"]["weights"] == "dense" and header["draft"]["weights"] == "int8"


def test_decode_refuses_a_draft_path_without_a_draft_before_loading(model_dirs, tmp_path, capsys):
    _, _, prompts = model_dirs
    rc = main(["decode", "--target", "no-such-model", "--prompts", str(prompts), "--weights", "draft=int8",
               "--out", str(tmp_path / "x.jsonl")])
    assert rc == 2 and "--weights draft=int8: autoregressive decoding has no draft" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_bench_runs_a_plain_and_a_mixed_path_and_records_the_roofline(model_dirs, tmp_path, capsys):
    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n')
    out = tmp_path / "bench.json"
    rc = main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
               "--max-new-tokens", "6", "--configs", "ar,fixed:2", "--temperatures", "0", "--dtype", "fp32",
               "--threads", "1", "--weights", "dense;target=dense,draft=int8", "--warmup", "0", *SMALL_PROBE,
               "--trace-dir", str(tmp_path / "traces"), "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["weights"] == ["dense", "target=dense,draft=int8"] and not res["greedy_mismatches"]
    assert res["bandwidth_gb_per_s"] > 0 and res["busy"] is not None
    mixed = res["costs"]["by_weights"]["target=dense,draft=int8"]
    assert mixed["target_weights"] == "dense" and mixed["draft_weights"] == "int8" and mixed["c"] > 0
    assert res["bytes_per_token"]["target=dense,draft=int8"]["draft"]["bytes_per_token"] < \
        res["bytes_per_token"]["dense"]["draft"]["bytes_per_token"]
    overall = {(r["weights"], r["config"]): r for r in res["rows"] if r["task"] == "overall"}
    assert set(overall) == {("dense", "ar"), ("dense", "fixed:2"), ("target=dense,draft=int8", "ar"),
                            ("target=dense,draft=int8", "fixed:2")}
    assert all(r["roofline_fraction"] > 0 for r in overall.values())
    assert (tmp_path / "traces" / "dense-int8" / "fixed-2-t0.jsonl").is_file()
    assert "read bandwidth" in capsys.readouterr().out


def test_multibench_records_the_bandwidth_and_each_rows_fraction(model_dirs, tmp_path):
    t, d, prompts = model_dirs
    out = tmp_path / "mb.json"
    assert main(["multibench", "--target", str(t), "--draft", str(d), "--dtype", "fp32", "--threads", "1",
                 "--prompts", str(prompts), "--per-task", "1", "--max-new-tokens", "4", "--temperatures", "0.7",
                 "--methods", "token", "--ks", "1", "--ls", "2", *SMALL_PROBE, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["bandwidth_gb_per_s"] > 0 and res["busy"] is not None
    target_bytes = res["bytes_per_token"]["dense"]["target"]["bytes_per_token"]
    for r in res["rows"]:
        assert r["roofline_fraction"] == pytest.approx(r["tokens_per_s"] * target_bytes / (res["bandwidth_gb_per_s"] * 1e9))


def test_the_default_file_is_named_after_the_cpu():
    from engine.kernels.kernel_build import cpu_slug

    assert cpu_slug("AMD EPYC 9R14 96-Core Processor") == "amd-epyc-9r14"
    assert cpu_slug("Intel(R) Xeon(R) Platinum 8488C") == "intel-xeon-platinum-8488c"
    assert cpu_slug("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz") == "intel-core-i7-8700"
    assert cpu_slug("") == "unknown-cpu"
    assert cpu_slug("AMD EPYC", {"avx2", "fma"}) == "amd-epyc-avx2"  # a bare VM name: the vector class tells CPUs apart
    assert cpu_slug("AMD EPYC", {"avx2", "avx512f", "avx512_bf16"}) == "amd-epyc-avx512bf16"
    assert cpu_slug("Intel(R) Xeon(R) Platinum 8488C", {"avx512f", "avx512_bf16", "amx_tile"}) == "intel-xeon-platinum-8488c-amx"
