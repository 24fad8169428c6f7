"""`make gpu-check` runs the same code on CPU (--device cpu), at cut shapes so it stays fast."""

import json

from engine.__main__ import main
from engine.bench import gpu_check


def test_gpu_check_runs_on_cpu(tmp_path):
    out = tmp_path / "g.json"
    rc = main(["gpu-check", "--device", "cpu", "--dtype", "fp32", "--layers", "1", "--vocab", "512",
               "--reps", "1", "--context", "16", "--out", str(out)])
    res = json.loads(out.read_text())
    assert rc == 0 and res["exactness_fp32"]["all_equal"]
    runs = res["exactness_fp32"]["runs"].values()
    assert any(0 < r["accepted"] < r["drafted"] for r in runs)  # drafts both accepted and rejected
    c = res["costs"]
    assert set(c["v"]) == {"1", "2", "3", "4", "5", "8", "16"} and c["v"]["1"] == 1.0
    assert c["c"] > 0 and all(v > 0 for v in c["t_target_ms"].values())


def test_shapes_match_the_pair():
    t = gpu_check.build("target", __import__("torch").float32, "cpu", layers=1, vocab=64)
    assert (t.config.hidden_size, t.config.intermediate_size, t.config.num_key_value_heads) == (1536, 8960, 2)
