"""`python -m engine import {vllm,vllm-prom,llamacpp,sglang} FILE -o OUT`, `export T OUT.prom` and
`diagnose T` on the committed peer fixtures: one-line errors, no file written for a bad report."""

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.trace.format import load_trace

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
    ("vllm-prom", b"vllm:spec_decode_num_drafts_total 3.0\nvllm:spec_decode_num_draft_tokens_total 6", "missing from"),
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
