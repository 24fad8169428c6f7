"""Property-based fuzzing of the trace loader (hypothesis): hostile input never gets through.

Random mutations of a valid trace — field deletions, type swaps, out-of-range numbers, duplicated /
reordered / dropped / cut records, raw NaN and Infinity, huge and deeply nested values, flipped
bytes — must each end as one of two things: a refusal with a one-line TraceError naming the file,
or a trace whose invariants hold (checked here from first principles, not with the loader's own
code) and which the app pages render without an exception.

The screened (column-wise) path and the reference (record by record) path must agree exactly: same
message or same steps. Runs are derandomized (a fixed example sequence) and bounded so `make test`
stays fast. A longer search:

    SPECLAB_FUZZ_EXAMPLES=20000 .venv/bin/python -m pytest tests/unit/trace/test_fuzz.py -q
"""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.trace import parquet as trace_parquet
from engine.trace.assemble import build_trace
from engine.trace.format import Trace, TraceError, loads_trace, summarize, to_parquet
from engine.trace.parse import parse_jsonl
from engine.trace.check import MAX_ENTROPY, MAX_MS, TOKEN_MAX
from tests.trace_mutations import OPS, POOL, idx, mutate

EXAMPLES = int(os.environ.get("SPECLAB_FUZZ_EXAMPLES", "300"))
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
NAME = "fuzz.jsonl"


def load(data: bytes, fast: bool = True) -> Trace | TraceError:
    try:
        if fast:
            return loads_trace(data, NAME)
        w: list[str] = []
        t = build_trace(parse_jsonl(data, NAME, w), source=NAME, fast=False)
        t.warnings[:0] = w
        return t
    except TraceError as e:
        return e


def assert_sound(t: Trace) -> None:
    """The invariants every page relies on, recomputed from the primary fields."""
    assert isinstance(t.header, dict)
    per_req: dict[int, list[dict]] = {}
    for s in t.steps:
        per_req.setdefault(s["request_id"], []).append(s)
        d, e = s["draft_tokens"], s["emitted_tokens"]
        assert all(type(x) is int and 0 <= x < TOKEN_MAX for x in d + e)
        assert s["window"] == len(d) and s["emitted"] == len(e) and type(s["accepted"]) is int
        assert 0 <= s["accepted"] <= len(d) and 1 <= len(e) <= s["accepted"] + 1
        assert e[: s["accepted"]] == d[: len(e)][: s["accepted"]]
        assert (s["correction"] is None) != (s["bonus"] is None)
        assert (s["bonus"] is not None) == (s["accepted"] == len(d))
        for k in ("q_draft", "p_target", "accept_probs", "draft_entropy"):
            hi = MAX_ENTROPY if k == "draft_entropy" else 1.0
            assert len(s[k]) == len(d) and all(type(x) in (int, float) and math.isfinite(x) and
                                               -1e-6 <= x <= hi + 1e-6 for x in s[k])
        for k in ("t_draft_ms", "t_verify_ms", "t_prefill_ms"):
            assert type(s[k]) in (int, float) and math.isfinite(s[k]) and 0 <= s[k] <= MAX_MS
        assert isinstance(s.get("policy_fields", {}), dict) and isinstance(s["stop_reason"], str)
    for rid, steps in per_req.items():
        assert rid in t.requests
        assert [s["step"] for s in steps] == list(range(len(steps)))
        assert all(s["finished"] is None for s in steps[:-1])
        ctx = len(t.requests[rid]["prompt_ids"])
        for s in steps:
            assert s["context_len"] == ctx
            ctx += s["emitted"]
        if rid in t.ends:
            assert t.ends[rid]["output_ids"] == [x for s in steps for x in s["emitted_tokens"]]
    if t.footer is not None:
        assert set(t.ends) == set(t.requests)
        mine = summarize(t.steps, list(t.ends.values()))
        for k, v in mine.items():
            if k in t.footer["summary"]:
                assert t.footer["summary"][k] == pytest.approx(v, rel=1e-9, abs=1e-9), k


def check_outcome(data: bytes) -> Trace | None:
    fast, ref = load(data), load(data, fast=False)
    if isinstance(fast, TraceError):
        msg = str(fast)
        assert "\n" not in msg and msg.startswith(f"{NAME}: ") and len(msg) < 400, msg
        assert str(ref) == msg, (msg, ref)
        return None
    assert not isinstance(ref, TraceError), (ref, "accepted by the screened path only")
    assert fast.steps == ref.steps and fast.warnings == ref.warnings
    assert_sound(fast)
    return fast


def test_base_trace_is_valid():
    t = check_outcome(mutate([]))
    assert t is not None and t.complete and len(t.steps) == 12


@SETTINGS
@given(ops=st.lists(OPS, min_size=1, max_size=3))
def test_mutated_jsonl_is_refused_in_one_line_or_sound(ops):
    check_outcome(mutate(ops))


# ---------------------------------------------------------------- Parquet: the Arrow screen vs the generic path


@SETTINGS
@given(ops=st.lists(st.tuples(st.just("set"), idx, idx, st.integers(0, len(POOL) - 1)) |
                st.tuples(st.just("set_elem"), idx, idx, idx, st.integers(0, len(POOL) - 1)) |
                st.tuples(st.just("delete"), idx, idx), min_size=1, max_size=2))
@example(ops=[("delete", 3, 388)])  # a step without "window": null in its Parquet column, counted from its drafts
def test_mutated_parquet_agrees_with_the_generic_path(ops, tmp_path_factory, monkeypatch_module):
    """Steps mutated, then written as Parquet columns without validation: the Arrow-column screen
    and the row-by-row path must give the same answer."""
    recs = [json.loads(x) for x in mutate([op for op in ops]).decode().splitlines()]
    header, *rest = recs
    steps = [r for r in rest if isinstance(r, dict) and r.get("type") == "step"]
    # Keyed by position: to_parquet only lists the values, and a mutated request_id may be unhashable.
    t = Trace(header=header, requests={i: r for i, r in enumerate(rest) if r.get("type") == "request"},
              steps=steps, ends={i: r for i, r in enumerate(rest) if r.get("type") == "request_end"},
              footer=next((r for r in rest if r.get("type") == "footer"), None))
    path = tmp_path_factory.mktemp("pq") / "fuzz.parquet"
    try:
        to_parquet(t, path)
    except Exception:  # noqa: BLE001 - a column Arrow cannot type: nothing to load
        return
    data = path.read_bytes()
    fast = load_parquet(data)
    with monkeypatch_module.context() as m:
        m.setattr(trace_parquet.ArrowColumns, "make", classmethod(lambda cls, table: None))
        ref = load_parquet(data)
    if isinstance(fast, TraceError):
        assert "\n" not in str(fast) and str(fast) == str(ref), (fast, ref)
    else:
        assert not isinstance(ref, TraceError), ref
        assert fast.steps == ref.steps
        assert_sound(fast)


def load_parquet(data: bytes):
    try:
        return loads_trace(data, "fuzz.parquet")
    except TraceError as e:
        return e


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()
