"""`python -m engine advise` end to end (subprocess), and costaware's bad input through the CLIs."""

import subprocess
import sys

PY = [sys.executable, "-m", "engine"]


def run(*args):
    return subprocess.run([*PY, *args], capture_output=True, text=True, timeout=300)


def one_error(r) -> str:
    """The single 'error:' line of a refused command (weight-loading progress bars aside), no traceback."""
    errs = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert r.returncode == 2 and len(errs) == 1 and "Traceback" not in r.stderr, r.stderr
    return errs[0]


def test_advise_prints_the_line_and_a_task_table():
    r = run("advise", "traces/ref-qwen-greedy.jsonl")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b: use K = ")
    assert "| task | best K | speedup vs AR |" in out and any(x.startswith("| translation |") for x in out)


def test_advise_against_a_bench_result_prints_the_error(tmp_path):
    """The bundled fp32 Qwen traces advise K = 0: checked against a result whose AR row is 1.00×."""
    import glob
    import json

    res = tmp_path / "r.json"
    res.write_text(json.dumps({"rows": [{"task": "overall", "config": "ar", "temperature": 0.0, "speedup_vs_ar": 1.0}]}))
    traces = [p for p in sorted(glob.glob("traces/qwen-*-t0.jsonl")) if not any(x in p for x in ("lookup", "suffix", "modelfree"))]
    r = run("advise", *traces, "--against", str(res))
    assert r.returncode == 0, r.stderr
    assert f"against {res} (T = 0): predicted 1.00× for ar, measured 1.00×: error +0.0 %" in r.stdout
    res.write_text("{not json")
    r = run("advise", *traces, "--against", str(res))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not a readable bench result" in r.stderr, r.stderr


def test_advise_bad_input_is_one_error_line():
    for args, msg in ((("traces/demo-tiny-fixed2.jsonl", "--c", "0"), "--c must be a positive"),
                      (("traces/demo-tiny-fixed2.jsonl", "--c", "-2"), "--c must be a positive"),
                      (("traces/demo-tiny-fixed2.jsonl", "--max-k", "99"), "--max-k"),
                      (("no/such/trace.jsonl",), "no such file")):
        r = run("advise", *args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and msg in r.stderr, r.stderr


def test_costaware_bad_spec_is_refused_before_loading_anything():
    r = run("bench", "--target", "does-not-exist", "--configs", "ar,costaware:c=0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "positive" in r.stderr, r.stderr


def test_decode_with_costaware_writes_its_fields_and_refuses_a_window_past_the_drafter(model_dirs, tmp_path):
    import json

    t, d, prompts = model_dirs
    out = tmp_path / "ca.jsonl"
    r = run("decode", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--policy", "costaware",
            "--max-new-tokens", "8", "--out", str(out))
    assert r.returncode == 0, r.stderr
    steps = [json.loads(x) for x in out.read_text().splitlines() if '"type": "step"' in x]
    assert steps and all("decision" in s["policy_fields"] and "u" in s["policy_fields"] for s in steps)
    r = run("decode", "--target", str(t), "--draft", "lookup:n=4", "--prompts", str(prompts), "--policy",
            "costaware:max=8", "--max-new-tokens", "8", "--out", str(tmp_path / "x.jsonl"))
    assert "beyond the" in one_error(r) and "limit of 4" in one_error(r)
    assert not (tmp_path / "x.jsonl").exists()  # nothing half-written
    r = run("decode", "--target", str(t), "--draft", str(tmp_path / "no-such-draft"), "--prompts", str(prompts),
            "--policy", "costaware", "--out", str(tmp_path / "y.jsonl"))
    one_error(r)  # an unknown drafter
