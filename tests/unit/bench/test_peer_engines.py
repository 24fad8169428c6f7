"""The engines of `python -m engine peers` (engine.bench.peer_engines): speclab's entry on a tiny pair, and
the parts of the vLLM and llama.cpp entries that need no peer installed (their configs, counters, refusals)."""

import pytest

from engine.bench.peer_engines import (LlamaCppEngine, LlamaServer, SpeclabEngine, VllmEngine, parse_config,
                                       parse_llama_metrics, per_position)
from engine.bench.peers import PeerPrompt, check_run

# llama-server's /metrics text (tools/server/server-task.cpp's format), the speculative part
METRICS = """# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 19
llamacpp:spec_decode_num_draft_tokens_total 38
llamacpp:spec_decode_num_accepted_tokens_total 29
llamacpp:prompt_tokens_seconds 68.2
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 13
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 16
"""


def test_configs_parse_or_are_refused_in_one_line():
    assert parse_config("ar", ("draft",)) == ("ar", 0)
    assert parse_config("draft:4", ("draft", "ngram")) == ("draft", 4)
    for bad in ("ngram:4", "draft", "draft:0", "draft:x", "ar:2"):
        with pytest.raises(ValueError, match="expected ar or draft:K"):
            parse_config(bad, ("draft",))


def test_per_position_counts_steps_that_reached_each_position():
    assert per_position([2, 0, 1, 2], 2) == [3, 2]
    assert sum(per_position([4, 1, 0, 3], 4)) == 8  # they add up to the accepted tokens
    assert per_position([], 3) == [0, 0, 0]


def test_llama_metrics_parse_with_positions_in_order():
    m = parse_llama_metrics(METRICS)
    assert m["spec_decode_num_drafts_total"] == 19 and m["spec_decode_num_accepted_tokens_total"] == 29
    assert m["per_pos"] == [16, 13] and m["prompt_tokens_seconds"] == 68.2
    assert parse_llama_metrics("")["per_pos"] == []


def test_missing_peers_are_one_line_naming_the_install(tmp_path):
    with pytest.raises(ValueError, match="install.sh vllm"):
        VllmEngine(str(tmp_path / "nope" / "python"), tmp_path, tmp_path, ("ar",))
    with pytest.raises(ValueError, match="install.sh llamacpp"):
        LlamaServer(tmp_path, tmp_path / "t.gguf")
    with pytest.raises(ValueError, match="--keep-gguf"):
        LlamaCppEngine(tmp_path, tmp_path / "t.gguf", tmp_path / "d.gguf", ("ar",))
    with pytest.raises(ValueError, match="expected ar or draft:K"):
        VllmEngine(str(tmp_path / "python"), tmp_path, tmp_path, ("eagle:2",))


def test_llama_server_command_sets_the_draft_length_and_threads(tmp_path):
    (tmp_path / "llama-server").write_text("")
    s = LlamaServer(tmp_path, tmp_path / "t.gguf", tmp_path / "d.gguf", k=4, threads=2)
    c = s.cmd
    assert c[c.index("--spec-draft-n-max") + 1] == "4" and c[c.index("-t") + 1] == "2" and "--metrics" in c
    assert "-md" not in LlamaServer(tmp_path, tmp_path / "t.gguf").cmd


def test_speclab_entry_counts_like_the_bench(model_dirs):
    target, draft, _ = model_dirs
    e = SpeclabEngine(str(target), str(draft), ("ar", "fixed:2"), dtype="fp32", threads=1)
    info = e.start()
    assert info["draft"] == str(draft) and "torch" in info["versions"]
    p = PeerPrompt(1, "qa", "", (1, 2, 3, 4))
    ar, spec = (check_run(e.run(c, p, 12)) for c in ("ar", "fixed:2"))
    e.stop()
    assert ar.spec_steps == 0 and ar.accepted_per_pos is None and ar.new_tokens == len(ar.output)
    assert spec.output == ar.output  # greedy: the same tokens
    assert spec.drafted <= 2 * spec.spec_steps and sum(spec.accepted_per_pos) == spec.accepted
    assert spec.accepted_per_pos[0] >= spec.accepted_per_pos[1]
    calls = spec.reported["target_calls"]
    assert spec.new_tokens == calls + spec.accepted  # every target call emits its accepted drafts + 1


def test_peers_run_with_their_own_openmp_defaults(monkeypatch):
    from engine.bench.peer_engines import peer_env

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "20000")
    env = peer_env({"X": "1"})
    assert "OMP_WAIT_POLICY" not in env and "GOMP_SPINCOUNT" not in env and env["X"] == "1"


def test_a_llama_server_that_dies_at_start_is_one_line_with_its_log_and_build(tmp_path):
    """As the native build did on an AMX Xeon: SIGSEGV at "llama threadpool init". The line names the signal,
    the log's last line and the build the install kept (engine.bench.llama_build's record)."""
    import json
    import sys

    from engine.bench.llama_build import RECORD

    (tmp_path / "segv.py").write_text("import os, signal\nprint('I cmn init: llama threadpool init, n_threads = 2', "
                                      "flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    exe = tmp_path / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "segv.py"} "$@"\n')
    exe.chmod(0o755)
    (tmp_path / RECORD).write_text(json.dumps({"kept": "native", "cmake_args": ["-DGGML_NATIVE=ON"], "verified": False,
                                               "tried": [{"name": "native", "outcome": "not checked: no GGUF"}]}))
    for g in ("t.gguf", "d.gguf"):
        (tmp_path / g).write_bytes(b"")
    eng = LlamaCppEngine(tmp_path, tmp_path / "t.gguf", tmp_path / "d.gguf", ("ar",), log_dir=tmp_path / "logs")
    assert eng.build["kept"] == "native"
    with pytest.raises(RuntimeError) as e:
        eng.start()
    eng.stop()
    line = str(e.value)
    assert line.startswith("llama-server died with SIGSEGV (signal 11) before /health answered") and "\n" not in line
    assert "llama threadpool init" in line and "build: native build (native (-march=native)), unverified" in line


def _python(path, body):
    import sys

    path.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{body}'\n")
    path.chmod(0o755)
    return str(path)


def test_a_vllm_whose_compiled_ops_die_is_refused_at_start_in_one_line(tmp_path):
    """vLLM's CPU wheels need AVX-512: on an AVX2 CPU `import vllm._C` dies with SIGILL; the start says so
    before an engine start of a minute (the peers driver then leaves vLLM out, naming it)."""
    from engine.bench.peer_engines import vllm_runs_here

    sigill = _python(tmp_path / "python", "import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    why = vllm_runs_here(sigill)
    assert why.startswith("vLLM's CPU build does not run on this CPU (") and "SIGILL (signal 4)" in why
    assert "\n" not in why
    e = VllmEngine(sigill, tmp_path, tmp_path, ("ar",), log_dir=tmp_path / "logs")
    with pytest.raises(RuntimeError, match="importing vllm._C ended with SIGILL"):
        e.start()
    assert vllm_runs_here(_python(tmp_path / "ok", "pass")) is None
