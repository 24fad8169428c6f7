"""Spec-Bench answer files ⇄ traces (engine.interop.specbench), speed.py's metric (engine.interop.speed)
and the accepted-length bound (engine.interop.bounds)."""

import json

import numpy as np
import pytest

from engine.__main__ import main
from engine.decode import DecodeConfig
from engine.interop import specbench, speed
from engine.policies.base import parse_policy
from engine.run import Request, run_requests
from engine.trace.format import load_trace, to_parquet
from tests.specbench_answers import PLD, QUESTIONS, SPS, VANILLA, answer_file


def test_hand_written_file_imports_with_what_it_has(tmp_path):
    src = answer_file(tmp_path / "sps.jsonl", SPS, "vicuna-sps")
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps(x) + "\n" for x in QUESTIONS))
    out = tmp_path / "t.jsonl"
    assert main(["import", "specbench", str(src), "--questions", str(q), "--out", str(out)]) == 0
    t = load_trace(out)
    assert t.complete and t.header["imported"]["format"] == "specbench"
    assert {"draft_tokens", "emitted_tokens", "window", "prompt_ids"} <= set(t.header["imported"]["lacks"])
    assert t.requests[0]["prompt_text"].startswith("Write a haiku.")
    for rid, (qid, cat, turns, new, wall, acc, _) in enumerate(SPS):
        steps = [s for s in t.steps if s["request_id"] == rid]
        assert [s["emitted"] for s in steps] == acc  # emitted per step = accept length
        assert [s["accepted"] for s in steps] == [a - 1 for a in acc]
        assert all(s["draft_tokens"] is None and s["window"] is None for s in steps)
        for turn, w in enumerate(wall):  # each turn's steps share its wall time exactly
            assert sum(s["t_verify_ms"] for s in steps if s["policy_fields"]["turn"] == turn) == pytest.approx(w * 1e3)
    s = t.summary
    assert s["drafted_tokens"] is None and s["draft_acceptance_rate"] is None
    assert s["tokens_per_s_mean_over_requests"] == pytest.approx(
        np.mean([sum(r[3]) / sum(r[4]) for r in SPS]), rel=1e-9)
    to_parquet(t, tmp_path / "t.parquet")  # the lacking fields survive Parquet as nulls
    assert load_trace(tmp_path / "t.parquet").summary == s


def test_speedup_cli(tmp_path, capsys):
    m = answer_file(tmp_path / "m.jsonl", SPS, "m")
    b = answer_file(tmp_path / "b.jsonl", VANILLA, "vanilla")
    assert main(["import", "specbench", str(m), "--baseline", str(b)]) == 0
    out = capsys.readouterr()
    assert "| overall | 3 |" in out.out and "not speed.py" in out.out and "--tokenizer" in out.err


def test_round_trip_ours_to_specbench_and_back(pair, tmp_path):
    target, draft = pair
    reqs = [Request([1, 5, 9, 3], "a", "writing", 81), Request([7, 8], "b", "qa", 321),
            Request([4, 4, 2], "c", "translation", 161)]
    ours = tmp_path / "ours.jsonl"
    run_requests(target, draft, parse_policy("heuristic"), DecodeConfig(max_new_tokens=24), reqs, ours,
                 decode_text=lambda ids: " ".join(map(str, ids)), progress=False)
    sb, back = tmp_path / "ours.specbench.jsonl", tmp_path / "back.jsonl"
    assert main(["export", str(ours), str(sb)]) == 0
    assert main(["import", "specbench", str(sb), "--out", str(back)]) == 0
    a, b = load_trace(ours), load_trace(back)
    for rid in a.requests:
        assert [s["emitted"] for s in a.steps if s["request_id"] == rid] == \
               [s["emitted"] for s in b.steps if s["request_id"] == rid]
        assert b.requests[rid]["question_id"] == a.requests[rid]["question_id"]

    def per_question(t):
        return {rid: 1e3 * sum(s["emitted"] for s in t.steps if s["request_id"] == rid)
                / sum(s["t_draft_ms"] + s["t_verify_ms"] + s["t_prefill_ms"] for s in t.steps if s["request_id"] == rid)
                for rid in t.requests}

    pa, pb = per_question(a), per_question(b)
    assert pb == pytest.approx(pa, rel=1e-9)
    assert b.summary["tokens_per_s_mean_over_requests"] == pytest.approx(
        a.summary["tokens_per_s_mean_over_requests"], rel=1e-9)
    # and speed.py reads the exported file with the same per-question throughput
    lines = [json.loads(x) for x in sb.read_text().splitlines()]
    assert speed.per_question(lines) == pytest.approx(list(pa.values()), rel=1e-9)
    assert main(["export", str(back), str(tmp_path / "again.specbench.jsonl")]) == 0  # imported re-exports


def test_baseline_recount_with_a_local_tokenizer(tmp_path, capsys):
    """--tokenizer DIR: speed.py's recount, len(tokenizer(turn).input_ids) − 1, with an offline tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", *"abcdefghijklmnopqrstuvwxyz"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(tmp_path / "tok")
    m = answer_file(tmp_path / "m.jsonl", PLD, "m")
    b = answer_file(tmp_path / "b.jsonl", VANILLA, "vanilla")
    hf = AutoTokenizer.from_pretrained(tmp_path / "tok")
    speeds = [sum(r[3]) / sum(r[4]) for r in PLD]
    speeds0 = [sum(len(hf(t).input_ids) - 1 for t in r[2]) / sum(r[4]) for r in VANILLA]
    want = np.array(speeds).mean() / np.array(speeds0).mean()
    rows = speed.speed_table(specbench.read_answers(m), specbench.read_answers(b),
                             speed.hf_token_counter(str(tmp_path / "tok")))
    assert rows[-1]["task"] == "overall" and rows[-1]["speedup"] == pytest.approx(want, rel=1e-12)
    assert main(["import", "specbench", str(m), "--baseline", str(b), "--tokenizer", str(tmp_path / "tok")]) == 0
    out = capsys.readouterr().out
    assert f"{want:.3f}×" in out and "recounted from text" in out


def test_analyze_cli_reads_an_imported_trace(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    specbench.import_answers(answer_file(tmp_path / "a.jsonl", SPS, "m"), out)
    assert main(["analyze", str(out)]) == 0
    assert "specbench:m" in capsys.readouterr().out
