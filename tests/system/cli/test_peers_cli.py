"""`python -m engine import {vllm,vllm-prom,llamacpp,sglang} FILE -o OUT`, `export T OUT.prom` and
`diagnose T` on the committed peer fixtures: one-line errors, no file written for a bad report."""

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.trace.format import load_trace
from tests.aiperf_runs import ar_of

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "peers"


def test_import_export_diagnose_round_trip(tmp_path, capsys):
    src = FIX / "vllm-draft-k4.jsonl"
    out = tmp_path / "v.jsonl"
    assert main(["import", "vllm", str(src), "-o", str(out)]) == 0
    assert "imported from vllm: lacks" in capsys.readouterr().out
    assert main(["export", str(out), str(tmp_path / "v.prom")]) == 0
    assert main(["import", "vllm-prom", str(tmp_path / "v.prom"), "-o", str(tmp_path / "p.jsonl")]) == 0
    a, b = load_trace(out).summary, load_trace(tmp_path / "p.jsonl").summary
    assert a["accepted_tokens_excl_bonus"] == b["accepted_tokens_excl_bonus"] and a["new_tokens"] == b["new_tokens"]
    capsys.readouterr()
    assert main(["diagnose", str(out)]) == 0
    text = capsys.readouterr().out
    assert "mean acceptance length" in text and "recommends window" in text and "bound" in text
    assert main(["diagnose", str(out), "--json", "--c", "0.3"]) == 0
    assert json.loads(capsys.readouterr().out)["c"] == 0.3


@pytest.mark.parametrize("fmt, body, msg", [
    ("vllm", b'{"request_id": "0", "token_ids": [1], "spec_decode_metrics": {"num_spec_tokens": 2}}\n',
     "spec_decode_metrics.acceptance_histogram"),
    ("sglang", b'{"timings": {"predicted_n": 3}}\n', "this is a llamacpp report, not sglang"),
    ("vllm-prom", b"vllm:spec_decode_num_drafts_total 3.0\nvllm:spec_decode_num_draft_tokens_total 6\n", "missing from"),
    ("vllm-prom", b"vllm:spec_decode_num_drafts_total 3.0\nvllm:spec_decode_num_draft_tokens_total 6", "cut off"),
    ("vllm-prom", b"vllm:spec_decode_num_drafts_total 3.0\nvllm:spec_decode_num_draft_tokens_total{a=\"1\" 6\n", "line 2"),
])
def test_bad_reports_are_one_line_and_write_nothing(tmp_path, capsys, fmt, body, msg):
    src = tmp_path / "bad.txt"
    src.write_bytes(body)
    out = tmp_path / "t.jsonl"
    assert main(["import", fmt, str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: bad.txt") and msg in err and "\n" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("args, msg", [
    (["--speclab", "", "--vllm", "", "--llamacpp", ""], "no engine to run"),
    (["--speclab", "", "--llamacpp", "", "--vllm-python", "/nonexistent/python"], "scripts/peers/install.sh vllm"),
    (["--speclab", "", "--vllm", "", "--gguf-target", "/nonexistent/t.gguf"], "--keep-gguf"),
    (["--speclab", "", "--llamacpp", "", "--vllm", "eagle:2"], "expected ar or draft:K | ngram:K"),
    (["--speclab", "fixed:2@qwen", "--vllm", "", "--llamacpp", ""], "'@' takes a window policy"),
])
def test_peers_refuses_in_one_line_before_any_engine_starts(capsys, args, msg):
    """`python -m engine peers` checks every entry (configs, installs, GGUFs) before it loads anything."""
    assert main(["peers", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and msg in err and "\n" not in err, err


# ------------------------------------------------------------------ the whole run, with stand-in peers

FAKE_VLLM = r'''
import json, sys
a = sys.argv[1:]
if a[:1] == ["-c"]:  # the start's import check (engine.bench.peer_engines.vllm_runs_here): it loads
    sys.exit(0)
method, k = a[a.index("--method") + 1], int(a[a.index("--k") + 1])
print("INFO a line of vLLM's own log", flush=True)
say = lambda d: print("@@speclab " + json.dumps(d), flush=True)
say({"ready": True, "vllm_version": "stand-in"})
for line in sys.stdin:
    n = json.loads(line)["max_tokens"]
    rec = {"token_ids": list(range(100, 100 + n)), "wall_ms": 40.0 * n, "metrics": {}}
    if method != "ar":  # every step accepts one draft of k: two tokens per verify call
        s = n // 2
        rec["wall_ms"] = 50.0 * s
        rec["spec_decode_metrics"] = {"num_spec_steps": s, "num_draft_tokens": s * k, "num_accepted_draft_tokens": s,
                                      "num_spec_tokens": k, "per_step_accepted": [1] * s, "mean_acceptance_length": 2.0}
    say(rec)
'''

FAKE_LLAMA = r'''
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
a = sys.argv[1:]
port, k = int(a[a.index("--port") + 1]), int(a[a.index("--spec-draft-n-max") + 1]) if "-md" in a else 0
open(os.environ["PIDS"] + f"/{os.getpid()}", "w").close()
c = {"steps": 0, "drafted": 0, "accepted": 0, "pos": [0] * k}
class H(BaseHTTPRequestHandler):
    def log_message(self, *x): pass
    def reply(self, body, kind="application/json"):
        self.send_response(200); self.send_header("Content-Type", kind); self.end_headers(); self.wfile.write(body.encode())
    def do_GET(self):
        if self.path == "/health":
            return self.reply("{}")
        text = "".join(f"llamacpp:{n} {c[v]}\n" for n, v in (("spec_decode_num_drafts_total", "steps"),
                       ("spec_decode_num_draft_tokens_total", "drafted"), ("spec_decode_num_accepted_tokens_total", "accepted")))
        text += "".join(f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {p}\n' for i, p in enumerate(c["pos"]))
        self.reply(text, "text/plain")
    def do_POST(self):
        q = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = q["n_predict"]
        t = {"prompt_n": len(q["prompt"]), "prompt_ms": 1.0, "predicted_n": n, "predicted_ms": 5.0 * n}
        if k:  # one prefill token, then calls that accept k - 1 of k drafts
            s = (n - 1) // k
            t.update(draft_n=s * k, draft_n_accepted=s * (k - 1), predicted_ms=8.0 * s)
            c["steps"] += s; c["drafted"] += s * k; c["accepted"] += s * (k - 1)
            c["pos"] = [p + (s if i < k - 1 else 0) for i, p in enumerate(c["pos"])]
        time.sleep(t["predicted_ms"] / 1e3)
        self.reply(json.dumps({"content": "x", "tokens": list(range(7, 7 + n)), "stop_type": "limit", "timings": t}))
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def _wrapper(path, script):
    import sys

    (path.parent / f"{path.name}.py").write_text(script)
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {path.parent / (path.name + ".py")} "$@"\n')
    path.chmod(0o755)
    return path


def test_peers_run_end_to_end_with_stand_in_peers(model_dirs, tmp_path, monkeypatch, capsys):
    """The whole command on the tiny pair with stand-ins that speak vLLM's worker protocol and llama-server's
    HTTP API: two rounds (vLLM's two configs), every speclab and llama.cpp config in both, one row per
    (engine, config) in one schema, the log entry's measured part, and no peer process left behind."""
    import os

    target, draft, prompts = model_dirs
    (tmp_path / "bin").mkdir()
    (tmp_path / "pids").mkdir()
    monkeypatch.setenv("PIDS", str(tmp_path / "pids"))
    py = _wrapper(tmp_path / "bin" / "python", FAKE_VLLM)
    _wrapper(tmp_path / "bin" / "llama-server", FAKE_LLAMA)
    for g in ("t.gguf", "d.gguf"):
        (tmp_path / g).write_bytes(b"")
    out, md = tmp_path / "peers.json", tmp_path / "peers.md"
    assert main(["peers", "--target", str(target), "--draft", str(draft), "--dtype", "fp32", "--threads", "1",
                 "--prompts", str(prompts), "--max-new-tokens", "9", "--warmup-tokens", "3",
                 "--speclab", "ar,fixed:2", "--vllm", "ar,draft:2", "--vllm-python", str(py),
                 "--llamacpp", "ar,draft:3", "--llama-bin", str(tmp_path / "bin"), "--gguf-target", str(tmp_path / "t.gguf"),
                 "--gguf-draft", str(tmp_path / "d.gguf"), "--log-dir", str(tmp_path / "logs"),
                 "--out", str(out), "--markdown", str(md)]) == 0
    r = json.loads(out.read_text())
    rows = {(x["engine"], x["config"]): x for x in r["rows"]}
    assert [x["engine"] for x in r["rows"]] == ["speclab"] * 2 + ["vllm"] * 2 + ["llama.cpp"] * 2  # grouped
    assert set(rows) == {("speclab", "ar"), ("speclab", "fixed:2"), ("vllm", "ar"), ("vllm", "draft:2"),
                         ("llama.cpp", "ar"), ("llama.cpp", "draft:3")} and r["complete"]
    assert len(r["config"]["rounds"]) == 2 and rows[("vllm", "draft:2")]["prompts"] == 2
    assert rows[("speclab", "ar")]["prompts"] == rows[("llama.cpp", "draft:3")]["prompts"] == 4  # both rounds
    v = rows[("vllm", "draft:2")]
    assert v["mean_acceptance_length"] == 2.0 and v["per_position_acceptance"] == [1.0, 0.0]
    assert v["speedup_vs_own_ar"] == pytest.approx((9 / (50e-3 * 4)) / (9 / (40e-3 * 9)))
    ll = rows[("llama.cpp", "draft:3")]
    assert ll["mean_acceptance_length"] == 3.0 and ll["per_position_acceptance"] == [1.0, 1.0, 0.0]
    assert ll["draft_acceptance_rate"] == pytest.approx(2 / 3) and ll["same_output_as_ar"] == "4/4"
    s = rows[("speclab", "fixed:2")]
    assert s["same_output_as_ar"] == "4/4" and s["mean_acceptance_length"] >= 1.0 and s["weights"] == "fp32"
    assert r["target_check"]["vllm"]["peer"] == "vllm draft:2" and r["engines"]["vllm"]["vllm_version"] == "stand-in"
    assert r["engines"]["llama.cpp"]["weights"] == "GGUF ← GGUF"  # empty stand-in files: no file type to read
    text = md.read_text()
    assert "| vllm | fp32 | `draft:2` |" in text and "speclab's best ÷ vllm's best speculative" in text
    assert "speedup vs own AR" in capsys.readouterr().out
    for pid in (int(p.name) for p in (tmp_path / "pids").iterdir()):  # every llama-server stopped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_new_formats_and_times_ar_on_the_command_line(tmp_path, capsys):
    run, ar = FIX / "aiperf-vllm-k3.jsonl", tmp_path / "ar.jsonl"
    ar.write_bytes(ar_of(run.read_bytes(), 3.0))
    out = tmp_path / "a.jsonl"
    assert main(["import", "aiperf", str(run), "-o", str(out), "--ar", str(ar)]) == 0
    text = capsys.readouterr().out
    assert "Acceptance Length (per-request mean)" in text and "Token-Weighted Acceptance Length" in text
    assert "×AR 3.000 against ar.jsonl" in text and "basis:" in text
    assert main(["diagnose", str(out), "--ar", str(ar)]) == 0
    text = capsys.readouterr().out
    assert "why acceptance is low" in text and "first rejection at position" in text and "×AR 3.000" in text
    assert main(["import", "llamacpp-stats", str(FIX / "llamacpp-stats.log"), "-o", str(tmp_path / "s.jsonl")]) == 0
    assert "output length not in the file" in capsys.readouterr().out  # totals, never a measured output length
    capsys.readouterr()
    assert main(["diagnose", str(out), "--ar", str(out)]) != 0  # a run that drafted is no AR baseline
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: a.jsonl: not an autoregressive run") and "\n" not in err


def test_diagnose_sets_an_imported_run_beside_the_lab_s_runs_of_the_pair(tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    assert main(["import", "vllm", str(FIX / "vllm-draft-k2.jsonl"), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["diagnose", str(out)]) == 0  # default folder: the bundled traces/
    text = capsys.readouterr().out
    assert "beside the lab's own runs of qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b" in text
    assert "qwen-fixed-2-t0.jsonl" in text and "task 'summarization'" in text
    assert main(["diagnose", str(out), "--json"]) == 0
    b = json.loads(capsys.readouterr().out)["beside_ours"]
    assert b["imported"]["k"] == 2 and any(p["label"] == "qwen-fixed-2-t0.jsonl" for p in b["ours"])
    assert main(["diagnose", str(out), "--ours", str(tmp_path)]) == 0  # a folder without the pair
    assert "beside the lab's own runs: none — the lab has no run of" in capsys.readouterr().out
    assert main(["diagnose", str(out), "--ours", str(tmp_path / "nope")]) != 0
    err = capsys.readouterr().err.strip()
    assert err.endswith("no such folder") and "\n" not in err


SEGV_LLAMA = "import os, signal\nprint('I cmn init: llama threadpool init, n_threads = 2', flush=True)\n" \
             "os.kill(os.getpid(), signal.SIGSEGV)\n"


def test_a_peer_that_cannot_start_is_one_line_naming_it_and_the_others_results_are_kept(model_dirs, tmp_path, capsys):
    """A llama-server that dies with SIGSEGV at start (the native build on an AMX Xeon): `peers` names llama.cpp
    in one line, runs speclab, and stores both the rows and the failure; with no other engine it is the error."""
    target, draft, prompts = model_dirs
    (tmp_path / "bin").mkdir()
    _wrapper(tmp_path / "bin" / "llama-server", SEGV_LLAMA)
    for g in ("t.gguf", "d.gguf"):
        (tmp_path / g).write_bytes(b"")
    common = ["--target", str(target), "--draft", str(draft), "--dtype", "fp32", "--threads", "1", "--prompts",
              str(prompts), "--max-new-tokens", "4", "--warmup-tokens", "0", "--vllm", "", "--bandwidth-mib", "0",
              "--llamacpp", "ar,draft:2", "--llama-bin", str(tmp_path / "bin"), "--gguf-target", str(tmp_path / "t.gguf"),
              "--gguf-draft", str(tmp_path / "d.gguf"), "--log-dir", str(tmp_path / "logs")]
    out = tmp_path / "peers.json"
    assert main(["peers", *common, "--speclab", "ar", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "llama.cpp build: build not recorded" in text  # which build it is, said before the run
    left = [ln for ln in text.splitlines() if ln.startswith("left out: llama.cpp could not start")]
    assert len(left) == 1 and "SIGSEGV" in left[0] and "llama threadpool init" in left[0]
    r = json.loads(out.read_text())
    assert {x["engine"] for x in r["rows"]} == {"speclab"} and r["rows"][0]["prompts"] >= 1
    assert r["failed"]["llama.cpp"] == left[0].removeprefix("left out: ")
    assert main(["peers", *common, "--speclab", ""]) == 2  # nothing else to run: the failure is the error
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: llama.cpp could not start: RuntimeError: llama-server died with SIGSEGV") \
        and "\n" not in err
