"""Trace v1: writer/loader round trips, Parquet, interrupted runs and every malformed-input case."""

import json

import pytest

from engine.decode import DecodeConfig
from engine.policies.base import parse_policy
from engine.run import Request, run_requests
from engine.trace.format import TraceError, load_trace, loads_trace, summarize, to_parquet


@pytest.fixture()
def trace_file(pair, tmp_path):
    target, draft = pair
    reqs = [Request([1, 5, 9, 3], "a", "writing", 81), Request([7, 8], "b", "qa", 321)]
    path = tmp_path / "run.jsonl"
    summary = run_requests(target, draft, parse_policy("heuristic"), DecodeConfig(max_new_tokens=20), reqs, path,
                           progress=False)
    return path, summary


def test_round_trip_and_summary(trace_file):
    path, summary = trace_file
    t = load_trace(path)
    assert t.complete and not t.warnings
    assert len(t.requests) == 2 and len(t.ends) == 2
    assert t.summary == t.footer["summary"] == summary
    assert summary["new_tokens"] == 40
    assert summary["mean_emitted_per_call_incl_bonus"] == pytest.approx(40 / summary["target_calls"])
    assert summary["mean_emitted_per_call_incl_bonus"] == pytest.approx(
        1 + summary["accepted_tokens_excl_bonus"] / summary["target_calls"])
    for rid, end in t.ends.items():
        assert end["output_ids"] == [x for s in t.steps if s["request_id"] == rid for x in s["emitted_tokens"]]
    h = t.header
    assert h["policy"]["spec"] == "heuristic:start=5,max=16" and h["sampling"]["temperature"] == 0.0
    assert {"torch", "transformers", "python"} <= set(h["software"])


def test_rule_time_is_part_of_the_verify_call(trace_file):
    steps = load_trace(trace_file[0]).steps
    assert all(0 < s["t_rule_ms"] <= s["t_verify_ms"] for s in steps)


def test_parquet_round_trip(trace_file, tmp_path):
    path, _ = trace_file
    t = load_trace(path)
    pq = tmp_path / "run.parquet"
    to_parquet(t, pq)
    back = load_trace(pq)
    assert back.header == t.header and back.footer == t.footer
    assert back.requests == t.requests and back.ends == t.ends
    assert len(back.steps) == len(t.steps)
    for a, b in zip(t.steps, back.steps):
        assert a == b


def test_killed_run_leaves_loadable_trace(trace_file, tmp_path):
    path, _ = trace_file
    lines = path.read_text().splitlines(keepends=True)
    cut = tmp_path / "killed.jsonl"
    # Everything up to the 8th record, then half of the next line, as a kill mid-write leaves it.
    cut.write_text("".join(lines[:8]) + lines[8][: len(lines[8]) // 2])
    t = load_trace(cut)
    assert not t.complete and len(t.steps) == sum(1 for ln in lines[:8] if '"type": "step"' in ln)
    assert any("no footer" in w for w in t.warnings) and any("cut off" in w for w in t.warnings)


def test_interrupted_writer_has_no_footer(pair, tmp_path):
    target, draft = pair
    path = tmp_path / "int.jsonl"
    calls = []

    def boom(rec):
        calls.append(rec)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_requests(target, draft, parse_policy("fixed:2"), DecodeConfig(max_new_tokens=30), [Request([1, 2, 3])],
                     path, progress=False, on_step=boom)
    t = load_trace(path)
    assert not t.complete and len(t.steps) == 3


def _mutate(path, tmp_path, fn, name="bad.jsonl"):
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    step_i = next(i for i, r in enumerate(recs) if r["type"] == "step" and r["window"] >= 2)
    text = fn(recs, step_i)
    out = tmp_path / name
    out.write_text(text if isinstance(text, str) else "\n".join(json.dumps(r) for r in text) + "\n")
    return out, step_i + 1


def _set(field, value):
    def fn(recs, i):
        recs[i][field] = value
        return recs
    return fn


BAD = {
    "accepted > window": (_set("accepted", 99), "field 'accepted'", "accepted > window"),
    "negative count": (_set("accepted", -1), "field 'accepted'", "outside"),
    "wrong type": (_set("context_len", "12"), "field 'context_len'", "expected an integer"),
    "nan prob": (lambda r, i: "\n".join(json.dumps(x) for x in r[:i]) + "\n"
                 + json.dumps(r[i]).replace('"q_draft": [', '"q_draft": [NaN, ', 1) + "\n", "line", "non-finite"),
    "inf prob": (lambda r, i: "\n".join(json.dumps(x) for x in r[:i]) + "\n"
                 + json.dumps(r[i]).replace('"p_target": [', '"p_target": [Infinity, ', 1) + "\n", "line", "non-finite"),
    "prob > 1": (lambda r, i: (r[i]["q_draft"].__setitem__(0, 1.5), r)[1], "field 'q_draft[0]'", "outside"),
    "list length": (lambda r, i: (r[i]["q_draft"].pop(), r)[1], "field 'q_draft'", "expected"),
    "absurd window": (_set("draft_tokens", list(range(2000))), "field 'draft_tokens'", "exceeds"),
    "bad token id": (lambda r, i: (r[i]["draft_tokens"].__setitem__(0, -3), r)[1], "field 'draft_tokens[0]'", "not a token id"),
    "step gap": (lambda r, i: (r[i].update(step=42, t_prefill_ms=0.0), r)[1], "field 'step'", "expected step"),
    "unknown type": (_set("type", "mystery"), "field 'type'", "unknown record type"),
    "rule time > verify": (lambda r, i: (r[i].__setitem__("t_rule_ms", r[i]["t_verify_ms"] + 5), r)[1],
                           "field 't_rule_ms'", "> the whole verify call"),
    "negative rule time": (_set("t_rule_ms", -1.0), "field 't_rule_ms'", "expected a finite time"),
    # Derived fields are recomputed, not trusted (each of these loaded before, some crashing a page later).
    "stated emitted 1e308": (_set("emitted", 1e308), "field 'emitted'", "expected an integer, got float"),
    "stated emitted -1": (_set("emitted", -1), "field 'emitted'", "outside"),
    "stated emitted x": (_set("emitted", "x"), "field 'emitted'", "expected an integer, got str"),
    "stated emitted off by one": (lambda r, i: (r[i].update(emitted=r[i]["emitted"] + 1), r)[1],
                                  "field 'emitted'", "emitted tokens"),
    "neither correction nor bonus": (lambda r, i: (r[i].update(correction=None, bonus=None), r)[1],
                                     "field 'bonus'", "exactly one of correction / bonus"),
    "both correction and bonus": (lambda r, i: (r[i].update(correction=5, bonus=5), r)[1],
                                  "field 'bonus'", "exactly one of correction / bonus"),
    "implausible time": (_set("t_verify_ms", 1e308), "field 't_verify_ms'", "finite time in [0, 3.6e+06] ms"),
    "context does not grow": (lambda r, i: (r[i + 1].__setitem__("context_len", r[i]["context_len"]), r)[1]
                              if r[i + 1]["type"] == "step" else r, "field 'context_len'", "earlier steps give"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_step_rejected_with_line_and_field(trace_file, tmp_path, case):
    path, _ = trace_file
    fn, field, msg = BAD[case]
    bad, line = _mutate(path, tmp_path, fn)
    with pytest.raises(TraceError) as e:
        load_trace(bad)
    text = str(e.value)
    assert "\n" not in text and field in text and msg in text, text
    if field.startswith("field") and case != "context does not grow":
        assert f"line {line}" in text, text


def test_truncated_json_in_the_middle(trace_file, tmp_path):
    path, _ = trace_file
    lines = path.read_text().splitlines()
    lines[3] = lines[3][:20]
    bad = tmp_path / "trunc.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=r"line 4: invalid JSON"):
        load_trace(bad)


@pytest.mark.parametrize("change,msg", [({"version": 2}, "unsupported schema version 2"),
                                         ({"version": "1"}, "unsupported schema version"),
                                         ({"schema": "other"}, "field 'schema'")])
def test_header_checks(trace_file, tmp_path, change, msg):
    path, _ = trace_file
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    recs[0].update(change)
    bad = tmp_path / "h.jsonl"
    bad.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    with pytest.raises(TraceError, match=msg):
        load_trace(bad)


def test_garbage_and_empty_inputs(tmp_path):
    with pytest.raises(TraceError, match="empty file"):
        loads_trace(b"", "empty.jsonl")
    with pytest.raises(TraceError, match=r"^bin.jsonl: not a JSONL or Parquet trace \(binary data\)$"):
        loads_trace(b"\x80\x81 not json\n", "bin.jsonl")
    with pytest.raises(TraceError, match="line 1: invalid JSON"):
        loads_trace(b"not json\n", "text.jsonl")
    with pytest.raises(TraceError, match="first record must be the header"):
        loads_trace(b'{"type": "step"}\n', "s.jsonl")
    with pytest.raises(TraceError, match="not a readable Parquet"):
        loads_trace(b"PAR1 nonsense", "x.parquet")
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "missing.jsonl")


def test_summary_conventions():
    steps = [dict(request_id=0, window=4, accepted=4, emitted=5, t_draft_ms=1.0, t_verify_ms=4.0, t_prefill_ms=5.0),
             dict(request_id=0, window=4, accepted=1, emitted=2, t_draft_ms=1.0, t_verify_ms=4.0, t_prefill_ms=0.0)]
    s = summarize(steps)
    assert s["mean_emitted_per_call_incl_bonus"] == 3.5
    assert s["mean_accepted_per_call_excl_bonus"] == 2.5
    assert s["draft_acceptance_rate"] == 5 / 8
    assert s["tokens_per_s"] == pytest.approx(7 / 0.015)
    assert s["accepted_histogram"] == {"1": 1, "4": 1}


def _records(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write(tmp_path, recs, name="x.jsonl"):
    out = tmp_path / name
    out.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return out


def test_footer_summary_and_request_output_are_recomputed(trace_file, tmp_path):
    path, _ = trace_file
    recs = _records(path)
    recs[-1]["summary"]["new_tokens"] += 1
    with pytest.raises(TraceError, match=r"line \d+: field 'summary.new_tokens': states 41, the steps give 40$"):
        load_trace(_write(tmp_path, recs))
    recs = _records(path)
    end = next(r for r in recs if r["type"] == "request_end")
    end["output_ids"] = end["output_ids"][:-1]
    end["new_tokens"] -= 1
    with pytest.raises(TraceError, match="field 'output_ids': 19 ids differ from the 20 tokens its steps emitted"):
        load_trace(_write(tmp_path, recs))


def test_deep_nesting_is_a_one_line_error_never_a_recursion_error(trace_file, tmp_path):
    path, _ = trace_file
    head = path.read_bytes().split(b"\n")[0]
    for depth in (100, 100_000):  # 100 parses but is refused; 100k used to raise RecursionError
        deep = head + b"\n" + b"[" * depth + b"]" * depth + b"\n"
        with pytest.raises(TraceError) as e:
            loads_trace(deep, "deep.jsonl")
        assert str(e.value).startswith("deep.jsonl: line 2: ") and "nested deeper than 64 levels" in str(e.value)
