"""Random mutations of a valid trace, shared by the trace-loader fuzz test (test_trace_fuzz.py) and the
hostile-upload app test (test_upload_hostile.py): the base trace, the value pool, the raw texts
json.dumps cannot write, the hypothesis strategy of one mutation, `apply_ops` (the record-level mutations,
also used on imported traces by test_fuzz_imported.py) and `mutate`.

Not a test module (no test_ prefix): pytest does not collect it, and importing it brings in no tests."""

from __future__ import annotations

import json
from typing import Callable

from hypothesis import strategies as st

from engine.trace.loadbench import synthetic_records


def base_records() -> list[dict]:
    recs = list(synthetic_records(12, per_request=4, seed=3))
    step = next(r for r in recs if r["type"] == "step" and r["step"] == 1)
    step["policy_fields"] = {"blocks": [{"block": 1, "scores": [0.5, 0.25], "decision": "continue"}], "stop": "cap"}
    return recs


BASE = base_records()
POOL = [None, True, False, "x", "", "9", -1, 0, 1, 3, 2**31, 2**63, 10**30, -1e308, 1e308, 0.5, 1.5, -0.0, 1e-320,
        [], [1], [-1], ["a"], [0.5, 0.5], {}, {"a": 1}, "é" * 1000, "9" * 100_000, list(range(5000))]
RAW = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "[" * 65 + "]" * 65, "[" * 1500 + "]" * 1500,
       "[" * 100_000 + "]" * 100_000, '{"a":' * 70 + "1" + "}" * 70, '"\\ud800"', "18446744073709551616"]
RAW_MARK = "@@RAW@@"

idx = st.integers(min_value=0, max_value=10_000)
OPS = st.one_of(
    st.tuples(st.just("delete"), idx, idx),
    st.tuples(st.just("set"), idx, idx, st.integers(0, len(POOL) - 1)),
    st.tuples(st.just("set_elem"), idx, idx, idx, st.integers(0, len(POOL) - 1)),
    st.tuples(st.just("raw"), idx, idx, st.integers(0, len(RAW) - 1)),
    st.tuples(st.just("dup"), idx, idx),
    st.tuples(st.just("swap"), idx, idx),
    st.tuples(st.just("drop"), idx),
    st.tuples(st.just("cut"), st.floats(0.0, 1.0)),
    st.tuples(st.just("flip"), st.floats(0.0, 1.0), st.integers(0, 255)),
)


RECORD_OPS = ("delete", "set", "set_elem", "raw", "dup", "swap", "drop")


def apply_ops(recs: list, ops: list[tuple], other: Callable[[list, tuple], None] | None = None,
              raws: list[str] | None = None, keep_one: bool = False) -> list:
    """Apply the record ops (RECORD_OPS) to `recs` in place, in order; an op of another kind goes to
    `other(recs, op)` at its turn (a caller's own ops: byte edits, an import's `lacks` toggle). A "raw" op
    marks the value and appends its text to `raws`; `keep_one`: "drop" never removes the last record."""
    for op in ops:
        kind = op[0]
        if kind not in RECORD_OPS:
            if other is not None:
                other(recs, op)
            continue
        if not recs:
            continue
        i = op[1] % len(recs)
        r = recs[i]
        keys = sorted(r) if isinstance(r, dict) else []
        if kind == "delete" and keys:
            del r[keys[op[2] % len(keys)]]
        elif kind == "set" and keys:
            r[keys[op[2] % len(keys)]] = POOL[op[3]]
        elif kind == "set_elem" and keys:
            lists = [k for k in keys if isinstance(r[k], list) and r[k]]
            if lists:
                v = r[lists[op[2] % len(lists)]]
                v[op[3] % len(v)] = POOL[op[4]]
        elif kind == "raw" and keys and raws is not None:
            r[keys[op[2] % len(keys)]] = RAW_MARK
            raws.append(RAW[op[3]])
        elif kind == "dup":
            recs.insert(op[2] % (len(recs) + 1), json.loads(json.dumps(r)))
        elif kind == "swap":
            j = op[2] % len(recs)
            recs[i], recs[j] = recs[j], recs[i]
        elif kind == "drop" and (len(recs) > 1 or not keep_one):
            del recs[i]
    return recs


def mutate(ops: list[tuple]) -> bytes:
    """Apply the ops to a copy of BASE; structural ops on the records, the rest on the bytes."""
    recs = json.loads(json.dumps(BASE))
    raws: list[str] = []
    byte_ops: list[tuple] = []
    apply_ops(recs, ops, lambda _, op: byte_ops.append(op), raws)
    text = "".join(json.dumps(r) + "\n" for r in recs)
    for raw in raws:  # values json.dumps cannot write (NaN, 100k-deep nesting) go in as text
        text = text.replace(json.dumps(RAW_MARK), raw, 1)
    data = text.encode()
    for op in byte_ops:
        if op[0] == "cut":
            data = data[: int(len(data) * op[1])]
        elif data:
            k = min(len(data) - 1, int(len(data) * op[1]))
            data = data[:k] + bytes([op[2]]) + data[k + 1:]
    return data
