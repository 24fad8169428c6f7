"""engine.bench.roofline_report: the results page's Memory roofline section from result files."""

from __future__ import annotations

import json

from engine.bench.roofline_report import section


def write(path, d):
    path.write_text(json.dumps(d))
    return path


def test_no_file_with_a_bandwidth_means_no_section(tmp_path):
    f = write(tmp_path / "bench-x.json", {"rows": [{"config": "ar", "tokens_per_s": 1.0}]})
    assert section([f]) == []


def test_roofline_and_bench_files_each_get_their_table(tmp_path):
    roof = write(tmp_path / "roofline-amd-epyc.json", {
        "kind": "roofline", "machine": "AMD EPYC", "bandwidth_gb_per_s": 25.0, "busy": {"busy": False, "others_cores": 0.1},
        "rows": [{"model": "qwen2.5-coder-1.5b", "path": "bf16", "bytes_per_token": 3.09e9, "roofline_tokens_per_s": 8.09,
                  "decode_tokens_per_s": 7.2, "decode_roofline_fraction": 0.89, "roofline_fraction": 0.85},
                 {"model": "smollm2-135m", "path": "bf16", "bytes_per_token": 2.69e8, "roofline_tokens_per_s": 92.9,
                  "decode_tokens_per_s": 70.0, "decode_roofline_fraction": 0.75, "decode_roofline_fraction_kv": 0.81,
                  "roofline_fraction": 0.62},
                 {"model": "smollm2-135m", "path": "quantized", "build": "qgemm-avx512vnni", "bytes_per_token": 1.5e8,
                  "roofline_tokens_per_s": 166.7, "decode_tokens_per_s": 120.0, "decode_roofline_fraction": 0.72,
                  "roofline_fraction": 0.5}]})
    bench = write(tmp_path / "bench-mixed.json", {
        "bandwidth_gb_per_s": 10.0, "busy": {"busy": True, "others_cores": 0.95},
        "rows": [{"temperature": 0.0, "task": "overall", "config": "ar", "weights": "dense", "tokens_per_s": 2.8,
                  "roofline_fraction": 0.86},
                 {"temperature": 0.0, "task": "overall", "config": "fixed:2", "weights": "dense", "tokens_per_s": 4.4,
                  "roofline_fraction": 1.36},
                 {"temperature": 0.0, "task": "overall", "config": "fixed:4", "weights": "dense", "tokens_per_s": 4.0,
                  "roofline_fraction": 1.24},
                 {"temperature": 0.0, "task": "qa", "config": "ar", "weights": "dense", "tokens_per_s": 9.0,
                  "roofline_fraction": 2.0},
                 {"temperature": 0.7, "task": "overall", "config": "ar", "weights": "dense", "tokens_per_s": 2.0,
                  "roofline_fraction": 0.6}]})
    lines = section([roof, bench], machine=lambda m: f"<{m}>")
    text = "\n".join(lines)
    assert lines[0] == "## Memory roofline"
    assert ("| <AMD EPYC> | qwen2.5-coder-1.5b | bf16 | 3.090 GB | 25.0 GB/s | 8.09 | 7.20 | 0.89 | – | 0.85 | quiet | "
            "[roofline-amd-epyc.json](results/roofline-amd-epyc.json) |") in lines  # no KV figure recorded: –
    assert "| 70.00 | 0.75 | 0.81 | 0.62 | quiet |" in text
    assert "| smollm2-135m | quantized (qgemm-avx512vnni) | 0.150 GB |" in text  # the build, where the file records it
    assert "| [bench-mixed.json](results/bench-mixed.json) | dense | `ar` | 2.80 | 10.0 GB/s | 0.86 | busy (0.95 cores) |" in lines
    assert "`fixed:2` | 4.40" in text and "fixed:4" not in text  # AR and the fastest configuration only
    assert "9.00" not in text and "0.60" not in text  # per-task rows and T > 0 stay in the file


def test_a_file_probed_beside_every_round_shows_the_range_and_the_fraction_against_the_highest(tmp_path):
    roof = write(tmp_path / "roofline-x.json", {
        "kind": "roofline", "machine": "M", "bandwidth_gb_per_s": 28.1, "busy": {"busy": False, "others_cores": 0.0},
        "bandwidth": {"gb_per_s": 24.2}, "bandwidth_after": {"gb_per_s": 57.9},
        "bandwidth_rounds": [{"model": "m", "before_round": 0, "gb_per_s": 28.1},
                             {"model": "m", "before_round": 1, "gb_per_s": 30.0}],
        "rows": [{"model": "m", "path": "bf16", "bytes_per_token": 2.69e8, "roofline_tokens_per_s": 104.5,
                  "decode_tokens_per_s": 80.0, "decode_roofline_fraction": 0.78, "decode_roofline_fraction_best": 0.37,
                  "roofline_fraction": 0.6}]})
    text = "\n".join(section([roof]))
    assert "| 28.1 GB/s (24–58) | 104.50 | 80.00 | 0.78 (0.37 vs highest) | – | 0.60 |" in text
    assert "around it" in text  # the section says how such files compare
