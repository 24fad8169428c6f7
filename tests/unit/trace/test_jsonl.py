"""The fast JSONL reader (engine/trace/jsonl.py) and the summary on columns: same answers as the
reference path, on traces long enough to span several chunks."""

from __future__ import annotations

import gc
import json
import random

import numpy as np
import pytest

from engine.trace import jsonl as trace_jsonl
from engine.trace.assemble import Lines, build_trace
from engine.trace.format import TraceError, loads_trace, summarize
from engine.trace.parse import parse_jsonl
from engine.trace.loadbench import synthetic_records
from engine.trace.screen import DictColumns, screen_steps

NAME = "big.jsonl"


def records(n_steps: int = 700) -> list[dict]:
    return list(synthetic_records(n_steps, per_request=150, seed=5))


def encode(recs: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def reference(data: bytes):
    """The record-by-record path: parse_jsonl, then every step checked on its own."""
    w: list[str] = []
    try:
        t = build_trace(parse_jsonl(data, NAME, w), source=NAME, fast=False)
    except TraceError as e:
        return e
    t.warnings[:0] = w
    return t


def test_clean_trace_is_gathered_in_chunks_with_the_dict_screen_s_values():
    data = encode(records())
    recs, steps_at, cols = trace_jsonl.read_jsonl(data, NAME, [])
    assert cols is not None and cols.n == 700  # several chunks of trace_jsonl.CHUNK lines
    assert recs == parse_jsonl(data, NAME, [])
    steps = [recs[i][1] for i in steps_at]
    assert all(s["type"] == "step" for s in steps) and len(steps) == 700
    j1, fast = screen_steps(cols)
    j2, ref = screen_steps(DictColumns(steps))
    assert j1 is None and j2 is None and fast.keys() == ref.keys()
    for k in ref:
        assert np.array_equal(fast[k], ref[k]), k


def test_lazy_records_are_the_reference_pairs():
    """The loader's records make each (location, value) pair on access; they are parse_jsonl's pairs."""
    data = encode(records(300))
    lazy, steps_at, cols = trace_jsonl.read_jsonl(data, NAME, [], lazy=True)
    ref = parse_jsonl(data, NAME, [])
    assert isinstance(lazy, Lines) and cols is not None and len(lazy) == len(ref)
    assert lazy == ref and list(lazy) == ref and lazy[-1] == ref[-1] and lazy[0] == ref[0]
    with pytest.raises(IndexError):
        lazy[len(ref)]
    t = build_trace(lazy, source=NAME, fast=False)  # the reference pass reads them like a list
    assert t.steps == reference(data).steps


def test_loaded_trace_equals_the_reference():
    data = encode(records())
    t, ref = loads_trace(data, NAME), reference(data)
    assert t.steps == ref.steps and t.ends == ref.ends and t.warnings == ref.warnings and t.complete
    assert t.summary == summarize(t.steps, list(t.ends.values()))


@pytest.mark.parametrize("field, value", [("accepted", True), ("window_cap", False), ("context_len", 61.0),
                                          ("bonus", "7"), ("q_draft", [0.5, None, 0.5, 0.5]), ("finished", 0),
                                          ("stop_reason", 5), ("chosen", 1), ("t_verify_ms", None),
                                          ("draft_tokens", [[1], 2, 3, 4]), ("policy_fields", []),
                                          # values that a packed column could mistake for clean ones:
                                          ("draft_tokens", {}), ("draft_tokens", ""), ("q_draft", {}),
                                          ("emitted_tokens", "ab"), ("p_target", "abcd"), ("accept_probs", {"a": 1}),
                                          ("step", 2**63), ("request_id", 2**64), ("t_draft_ms", 10**400),
                                          ("correction", 1.5), ("bonus", 2**63), ("window", 4.0),
                                          ("emitted", None), ("finished", "done"), ("all_drafts", []),
                                          ("decisions", [1, 2, 1, 1]), ("draft_entropy", [0.5, 0.5, "x", 0.5])])
def test_a_bad_step_past_the_first_chunk_gets_the_reference_message(field, value):
    recs = records()
    step = [r for r in recs if r["type"] == "step"][600]
    step[field] = value
    data = encode(recs)
    with pytest.raises(TraceError) as e:
        loads_trace(data, NAME)
    assert str(e.value) == str(reference(data)) and "line" in str(e.value)


def test_a_boolean_on_a_step_line_is_never_read_as_an_integer():
    """array('q') would take True as 1: a step line with `true` must leave the chunked columns."""
    recs = records()
    [r for r in recs if r["type"] == "step"][400]["accepted"] = True
    data = encode(recs)
    assert trace_jsonl.read_jsonl(data, NAME, [])[2] is None
    with pytest.raises(TraceError, match=r"line \d+: field 'accepted': expected an integer, got bool"):
        loads_trace(data, NAME)


def test_a_true_elsewhere_keeps_the_chunked_columns():
    recs = records()
    recs[1]["prompt_text"] = "is it true or false?"
    assert trace_jsonl.read_jsonl(encode(recs), NAME, [])[2] is not None


def test_deep_policy_fields_on_a_chunked_step_is_refused():
    recs = records()
    deep: dict = {}
    for _ in range(70):
        deep = {"a": deep}
    [r for r in recs if r["type"] == "step"][500]["policy_fields"] = deep
    data = encode(recs)
    with pytest.raises(TraceError, match="nested deeper than 64 levels") as e:
        loads_trace(data, NAME)
    assert str(e.value) == str(reference(data))


def test_cut_last_line_blank_lines_and_extra_keys_agree_with_the_reference():
    data = encode(records())
    cut = data[:-40]
    t, ref = loads_trace(cut, NAME), reference(cut)
    assert t.steps == ref.steps and t.warnings == ref.warnings and "cut off" in t.warnings[0]
    blank = data.replace(b"\n", b"\n\n", 3)
    assert loads_trace(blank, NAME).steps == reference(blank).steps
    recs = records()
    for s in recs:
        if s["type"] == "step":
            s["note"] = {"kept": [1, 2]}  # keys the format does not know are kept, as before
    t = loads_trace(encode(recs), NAME)
    assert t.steps == reference(encode(recs)).steps and t.steps[0]["note"] == {"kept": [1, 2]}


def test_a_chunk_parsed_as_one_document_gives_each_line_s_own_value():
    """The reader parses a chunk's lines as one JSON array with a marker between lines; lines that are
    no JSON value alone but would pair up inside the array (an open bracket closed on the next line,
    two values on one line) must not be taken for records."""
    import orjson

    lines = [b'{"type": "request", "a": [1', b'2]}', b'{"x": 1}, {"y": 2}']
    assert orjson.loads(b"[" + b"\n,".join(lines) + b"]") is not None  # plain commas would be fooled
    assert trace_jsonl._joined(b"\n".join(lines), orjson.loads) is None
    good = [b'{"a": [1, 2]}', b'  {"b": null} ', b'[3]', b'"\xc3\xa9"']
    assert trace_jsonl._joined(b"\n".join(good), orjson.loads) == [orjson.loads(x) for x in good]
    # a line could spell the marker with a backslash: such chunks are parsed line by line
    assert trace_jsonl._joined(b'{"a": "\\b"}\n"\\b"', orjson.loads) is None
    recs = records()
    data = encode(recs)
    cut = data.index(b"\n", len(data) // 2) + 1
    for bad in (b"\n".join(lines) + b"\n", b'{"type": "step", "request_id": [0\n0]}\n', b"[1\n2]\n"):
        broken = data[:cut] + bad + data[cut:]
        with pytest.raises(TraceError) as e:
            loads_trace(broken, NAME)
        assert str(e.value) == str(reference(broken)) and "invalid JSON" in str(e.value)


def test_escapes_in_a_chunk_load_as_the_reference():
    recs = records()
    for r in recs:
        if r["type"] == "request":
            r["prompt_text"] = 'line one\nline "two" \b \\ \u00e9'
    data = encode(recs)
    assert b"\\n" in data
    t, ref = loads_trace(data, NAME), reference(data)
    assert t.steps == ref.steps and t.requests == ref.requests and t.ends == ref.ends


def test_older_trace_without_rule_time_loads_the_same():
    recs = records()
    for s in recs:
        s.pop("t_rule_ms", None)
    data = encode(recs)
    assert trace_jsonl.read_jsonl(data, NAME, [])[2] is not None
    assert loads_trace(data, NAME).steps == reference(data).steps


def test_collector_is_back_on_and_nothing_left_frozen():
    assert gc.isenabled()
    loads_trace(encode(records(300)), NAME)
    assert gc.isenabled() and gc.get_freeze_count() == 0


# ---------------------------------------------------------------- summary


def loop_summary(steps: list[dict], ends: list[dict]) -> dict:
    """The summary as a plain loop over the steps (the definition the columns must reproduce)."""
    n = len(steps)
    known = all(s["window"] is not None for s in steps)
    window = sum(s["window"] or 0 for s in steps)
    acc = sum(s["accepted"] for s in steps)
    em = sum(s["emitted"] for s in steps)
    t_ms = sum(s["t_draft_ms"] + s["t_verify_ms"] + s["t_prefill_ms"] for s in steps)
    per: dict[int, list[float]] = {}
    for s in steps:
        a = per.setdefault(s["request_id"], [0.0, 0.0])
        a[0] += s["emitted"]
        a[1] += s["t_draft_ms"] + s["t_verify_ms"] + s["t_prefill_ms"]
    tps = [tok / (ms / 1e3) for tok, ms in per.values() if ms > 0]
    hist: dict[str, int] = {}
    for s in steps:
        hist[str(s["accepted"])] = hist.get(str(s["accepted"]), 0) + 1
    return {"requests": len(per), "requests_finished": len(ends), "target_calls": n, "new_tokens": em,
            "drafted_tokens": window if known else None, "accepted_tokens_excl_bonus": acc,
            "mean_emitted_per_call_incl_bonus": em / n if n else 0.0,
            "mean_accepted_per_call_excl_bonus": acc / n if n else 0.0,
            "draft_acceptance_rate": (acc / window if window else 0.0) if known else None,
            "tokens_per_s": em / (t_ms / 1e3) if t_ms > 0 else 0.0,
            "tokens_per_s_mean_over_requests": sum(tps) / len(tps) if tps else 0.0,
            "decode_ms": t_ms, "draft_ms": sum(s["t_draft_ms"] for s in steps),
            "verify_ms": sum(s["t_verify_ms"] for s in steps),
            "accepted_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0])))}


@pytest.mark.parametrize("seed", range(6))
def test_summary_on_columns_is_the_loop_to_the_last_bit(seed):
    rng = random.Random(seed)
    steps = []
    for _ in range(rng.randint(0, 400)):
        w = rng.randint(0, 8)
        a = rng.randint(0, w)
        steps.append({"request_id": rng.choice([7, 3, 11, 0]), "window": None if seed == 5 else w, "accepted": a,
                      "emitted": a + 1, "t_draft_ms": rng.choice([0, rng.random() * 40, 3]),
                      "t_verify_ms": rng.random() * 60 + rng.choice([0, 1e-9]),
                      "t_prefill_ms": rng.choice([0.0, 0, 250.5])})
    ends = [{}] * rng.randint(0, 3)
    assert summarize(steps, ends) == loop_summary(steps, ends)  # ==: floats equal, not close


def test_summary_is_cached_but_never_shared():
    t = loads_trace(encode(records(300)), NAME)
    s = t.summary
    s["new_tokens"] = -1
    assert t.summary["new_tokens"] == sum(x["emitted"] for x in t.steps)
    t.steps = t.steps[:10]  # another step list: computed afresh
    assert t.summary["target_calls"] == 10


def test_read_jsonl_is_the_one_reader_of_any_jsonl_file(tmp_path):
    """engine.trace.parse.read_jsonl: records of any JSONL file (prompt files, logs) with the trace readers'
    refusals; a cut-off last line is dropped and noted."""
    import pytest

    from engine.trace.check import TraceError
    from engine.trace.parse import read_jsonl

    f = tmp_path / "q.jsonl"
    f.write_text('{"question_id": 1}\n\n{"question_id": 2}\n{"question_')
    notes: list[str] = []
    assert read_jsonl(f, notes) == [{"question_id": 1}, {"question_id": 2}] and "cut off" in notes[0]
    f.write_text('{"a": 1}\n{oops}\n{"b": 2}\n')
    with pytest.raises(TraceError, match="q.jsonl: line 2: invalid JSON"):
        read_jsonl(f)


def test_strict_refuses_a_cut_last_line_where_a_file_is_complete_by_construction(tmp_path):
    """`strict`: prompts, references and training traces (tests/unit/train/dpace/) are never written by a run that can be killed
    mid-line, so a cut-off last line there is an error, not a dropped record; the readers use it."""
    from engine.trace.check import TraceError
    from engine.trace.parse import read_jsonl
    from engine.trace.prompts import load_prompts

    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "a"}\n{"prompt": "b')
    notes: list[str] = []
    assert read_jsonl(f, notes) == [{"prompt": "a"}] and notes
    with pytest.raises(TraceError, match="p.jsonl: line 2: invalid JSON"):
        read_jsonl(f, strict=True)
    with pytest.raises(ValueError, match="p.jsonl: line 2: invalid JSON"):
        load_prompts(f)
    f.write_text('{"prompt": "a"}\n\n{"prompt": "b", "category": "x"}\n')
    assert [(p.text, p.question_id) for p in load_prompts(f)] == [("a", 1), ("b", 3)]  # ids: line numbers
