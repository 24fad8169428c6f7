"""Spec-Bench answer files ⇄ traces (engine.interop.specbench), speed.py's metric (engine.interop.speed)
and the accepted-length bound (engine.interop.bounds)."""

import json
import pytest
from engine.interop import specbench
from engine.trace.format import TraceError, load_trace
from tests.specbench_answers import SPS, answer_file


def test_turn_split_and_cut_at_new_tokens(tmp_path):
    # SpS files carry "idxs" rather than decoding_steps; the split then comes from new_tokens alone.
    rows = [(5, "qa", ["x", "y"], [4, 3], [0.1, 0.1], [2, 2, 3], None)]
    t = specbench.loads_answers(answer_file(tmp_path / "a.jsonl", rows, "m").read_bytes(), "a.jsonl")
    assert [s["policy_fields"]["turn"] for s in t.steps] == [0, 0, 1]
    # accept lengths running past new_tokens (tokens after the stop token) are cut like an EOS cut
    rows = [(6, "qa", ["x"], [4], [0.1], [3, 3, 2], [3])]
    t = specbench.loads_answers(answer_file(tmp_path / "b.jsonl", rows, "m").read_bytes(), "b.jsonl")
    assert [s["emitted"] for s in t.steps] == [3, 1] and [s["accepted"] for s in t.steps] == [2, 2]
    assert any("dropped" in n for n in t.header["imported"]["notes"])


def test_malformed_answer_files_fail_in_one_line(tmp_path):
    for bad, where in ((b'{"question_id": 1, "choices": []}\n', "field 'choices'"),
                       (b'{"question_id": 1, "choices": [{"turns": ["a"], "new_tokens": [1], "wall_time": [0.1]}]}\n',
                        "accept_lengths"),
                       (b'{"question_id": 1, "choices": [{"turns": ["a"], "new_tokens": [1], "wall_time": [NaN], '
                        b'"accept_lengths": [1]}]}\n', "wall_time[0]"),
                       (b'{"question_id": 1, "choices": [{"turns": ["a"], "new_tokens": [1], "wall_time": [0.1], '
                        b'"accept_lengths": [0]}]}\n', "accept_lengths[0]"),
                       (b'{"question_id": 1, "choices": [{"turns": ["a"], "new_tokens": [1], "wall_time": [0.0], '
                        b'"accept_lengths": [1]}]}\n', "sums to 0 s"),
                       (b'{"question_id": [1], "choices": [{"turns": ["a"], "new_tokens": [1], "wall_time": [1.0], '
                        b'"accept_lengths": [1]}]}\n', "question_id"),
                       (b"not json\n", "invalid JSON")):
        with pytest.raises(TraceError) as e:
            specbench.loads_answers(bad, "bad.jsonl")
        assert where in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("bad.jsonl: line 1")
    assert specbench.is_answer_file(answer_file(tmp_path / "ok.jsonl", SPS, "m").read_bytes())
    assert not specbench.is_answer_file(b'{"type": "header", "schema": "speclab.trace"}\n')


def test_nulls_load_only_where_the_header_declares_them_lacking(tmp_path):
    src = answer_file(tmp_path / "a.jsonl", SPS, "m")
    out = tmp_path / "t.jsonl"
    specbench.import_answers(src, out)
    lines = out.read_text().splitlines()
    header = json.loads(lines[0])
    header["imported"]["lacks"].remove("draft_tokens")
    (tmp_path / "bad.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(TraceError, match="draft_tokens"):
        load_trace(tmp_path / "bad.jsonl")
