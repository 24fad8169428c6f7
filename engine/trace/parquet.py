"""Trace v1 as Parquet: one row per step (list columns for per-token fields, `policy_fields` as a
JSON string), the header, requests, request ends and footer as JSON in the file's key-value metadata
(`speclab.header`, …). Written by `python -m engine export run.jsonl run.parquet`; read by
`engine.trace.format.load_trace` / `loads_trace`, which call `load_parquet` here.

Why a fast path: Parquet already fixes each column's type, so the step checks can run straight on
Arrow's buffers (`ArrowColumns` here, fed to engine.trace.screen) with no Python object per value; only the step
dicts the rest of the project reads are built, one column at a time. Any file that is not the
schema `to_parquet` writes takes the generic path: rows → dicts → the same checks as JSONL.
"""

from __future__ import annotations

import gc
import json
import os
from typing import Any

import numpy as np

from engine.trace.assemble import build_trace
from engine.trace.model import Trace
from engine.trace.jsonio import atomic_path
from engine.trace.parse import _first_line, _loads, _refuse_binary
from engine.trace.check import INT_FIELDS, MAX_DEPTH, TIME_FIELDS, TraceError, check_depth
from engine.trace.screen import _MISSING, VALUE_LISTS, DictColumns, fill_counts, screen_steps


class ArrowColumns:
    """Columns of a Parquet step table whose schema is the one `to_parquet` writes."""

    REQUIRED = {**{k: "int" for k in INT_FIELDS}, "draft_tokens": "ilist", "emitted_tokens": "ilist",
                **{k: "flist" for k in VALUE_LISTS}, **{k: "float" for k in TIME_FIELDS},
                "correction": "int?", "bonus": "int?", "stop_reason": "str", "finished": "str?", "type": "str"}
    OPTIONAL = {"window": "int", "emitted": "int", "t_rule_ms": "float?", "policy_fields": "str?",
                "chosen": "int", "all_drafts": "null", "decisions": "null"}

    def __init__(self, table) -> None:
        self.t, self.n = table, table.num_rows

    @classmethod
    def make(cls, table) -> "ArrowColumns | None":
        import pyarrow as pa

        def fits(typ, kind: str) -> bool:
            if typ == pa.null():
                return kind.endswith("?") or kind == "null"
            kind = kind.rstrip("?")
            if kind in ("int", "float"):
                return typ == pa.int64() or (kind == "float" and typ == pa.float64())
            if kind in ("ilist", "flist"):
                return pa.types.is_list(typ) and (typ.value_type == pa.int64() or
                                                  (kind == "flist" and typ.value_type == pa.float64()))
            return typ == pa.string() if kind == "str" else False

        names = set(table.column_names)
        if not set(cls.REQUIRED) <= names or not names <= set(cls.REQUIRED) | set(cls.OPTIONAL):
            return None
        for k in names:
            if not fits(table.schema.field(k).type, {**cls.REQUIRED, **cls.OPTIONAL}[k]):
                return None
        return cls(table)

    def _arr(self, k: str):
        return self.t.column(k).combine_chunks()

    def objects(self, k: str) -> list:
        return self.t.column(k).to_pylist() if k in self.t.column_names else [_MISSING] * self.n

    def number(self, k: str, integer: bool, optional: bool, nullable: bool = True
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not nullable and k in self.t.column_names:  # the column exists: a null in it is a bad value
            a, present, bad = self.number(k, integer, optional)
            return a, np.ones(self.n, bool), bad | ~present
        if k not in self.t.column_names:
            return np.zeros(self.n, np.int64 if integer else np.float64), np.zeros(self.n, bool), \
                np.full(self.n, not optional)
        a = self._arr(k)
        if a.null_count == len(a):  # an all-null (or null-typed) column: absent everywhere
            return np.zeros(self.n, np.int64 if integer else np.float64), np.zeros(self.n, bool), \
                np.full(self.n, not optional)
        present = ~np.asarray(a.is_null().to_numpy(zero_copy_only=False), bool)
        vals = a.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64 if integer else np.float64)
        return vals, present, (~present if not optional else np.zeros(self.n, bool))

    def lists(self, k: str, integer: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        import pyarrow.compute as pc

        a = self._arr(k)
        bad = np.asarray(a.is_null().to_numpy(zero_copy_only=False), bool)
        lens = pc.list_value_length(a).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = a.flatten()
        rows = np.repeat(np.arange(self.n), lens)
        fnull = np.asarray(flat.is_null().to_numpy(zero_copy_only=False), bool)
        vals = flat.fill_null(0).to_numpy(zero_copy_only=False)
        if integer and vals.dtype != np.int64:
            fnull |= vals != np.round(vals)
        bad[rows[fnull]] = True
        return lens, vals.astype(np.int64 if integer else np.float64), rows, bad

    def rare(self) -> np.ndarray:  # make() admits all_drafts / decisions only as all-null columns
        if "chosen" in self.t.column_names:
            v, present, _ = self.number("chosen", True, True)
            return ~present | (v != 0)  # the reference refuses a null chosen too
        return np.zeros(self.n, bool)

    def policy_fields_bad(self) -> np.ndarray:  # a JSON string per row: parsed (and checked) as rows are built
        return np.zeros(self.n, bool)

    def finished(self) -> tuple[np.ndarray, np.ndarray]:
        return DictColumns.finished(self)

    def stop_reason_bad(self) -> np.ndarray:
        return DictColumns.stop_reason_bad(self)


def step_rows(table, policy_fields: list[Any] | None = None) -> list[dict]:
    """Step dicts from a screened Arrow table: one column at a time to Python, then zipped into dicts
    (about 3× faster than Table.to_pylist)."""
    names = table.column_names
    cols = [table.column(k).to_pylist() if k != "policy_fields" or policy_fields is None else policy_fields
            for k in names]
    return [dict(zip(names, vals)) for vals in zip(*cols)]


def to_parquet(trace: Trace, path: str | os.PathLike) -> None:
    """Steps become columns; header/requests/ends/footer ride along as JSON in file metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [dict(s, policy_fields=json.dumps(s.get("policy_fields", {}))) for s in trace.steps]
    table = pa.Table.from_pylist(rows) if rows else pa.table({})
    meta = {
        b"speclab.header": json.dumps(trace.header).encode(),
        b"speclab.requests": json.dumps(list(trace.requests.values())).encode(),
        b"speclab.ends": json.dumps(list(trace.ends.values())).encode(),
        b"speclab.footer": json.dumps(trace.footer).encode(),
    }
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)



def _meta_json(meta: dict, key: bytes, default: bytes, name: str) -> Any:
    raw = meta.get(key, default)
    try:
        v = _loads(raw)
    except RecursionError:
        raise TraceError(f"{name}: metadata {key.decode()}: nested deeper than {MAX_DEPTH} levels") from None
    except Exception as e:  # noqa: BLE001
        raise TraceError(f"{name}: field 'metadata': invalid JSON in {key.decode()} ({_first_line(e)})") from None
    check_depth(raw, v, f"{name}: metadata {key.decode()}")
    return v


def load_parquet(data: bytes, name: str) -> Trace:
    """Parquet: the fast path screens the step columns straight from Arrow (engine.trace.screen) and
    builds the step dicts column by column; anything unexpected (another schema, a flagged row, a
    policy_fields string that does not parse) takes the generic path, which names the first error."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if data[:4] != b"PAR1":
        _refuse_binary(data, name)
        raise TraceError(f"{name}: not a readable Parquet file (no PAR1 magic)")
    try:
        table = pq.read_table(pa.BufferReader(data))
        meta = table.schema.metadata or {}
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for corrupt files
        raise TraceError(f"{name}: not a readable Parquet file ({type(e).__name__})") from None
    if b"speclab.header" not in meta:
        raise TraceError(f"{name}: field 'header': Parquet file has no speclab header metadata")
    header = _meta_json(meta, b"speclab.header", b"null", name)
    requests = _meta_json(meta, b"speclab.requests", b"[]", name)
    ends = _meta_json(meta, b"speclab.ends", b"[]", name)
    footer = _meta_json(meta, b"speclab.footer", b"null", name)
    for k, v in (("requests", requests), ("ends", ends)):
        if type(v) is not list:
            raise TraceError(f"{name}: field 'metadata': speclab.{k} is not a list")
    was = gc.isenabled()
    gc.disable()
    try:
        head = [(f"{name}: header", header)] + [(f"{name}: request {i}", r) for i, r in enumerate(requests)]
        tail = [(f"{name}: request_end {i}", e) for i, e in enumerate(ends)]
        tail += [(f"{name}: footer", footer)] if footer is not None else []
        cols = ArrowColumns.make(table) if type(header) is dict and not header.get("imported") else None
        if cols is not None and table.num_rows and pc.all(pc.equal(table.column("type"), "step")).as_py():
            j, num = screen_steps(cols)
            pf = _policy_fields(table) if j is None else None
            if pf is not None:
                rows = step_rows(table, pf)
                fill_counts(rows, num)  # a missing column, or a null in one (a row that did not state it)
                wheres = [f"{name}: row {i}" for i in range(len(rows))]
                recs = head + list(zip(wheres, rows)) + tail
                return build_trace(recs, source=name, screened=num,
                                   steps_at=list(range(len(head), len(head) + len(rows))))
        try:
            rows = table.to_pylist()
        except Exception as e:  # noqa: BLE001
            raise TraceError(f"{name}: not a readable Parquet file ({type(e).__name__})") from None
        records = list(head)
        for i, row in enumerate(rows):
            where = f"{name}: row {i}"
            pf = row.get("policy_fields")
            if type(pf) is str:
                try:
                    row["policy_fields"] = _loads(pf.encode())
                except Exception:  # noqa: BLE001
                    raise TraceError(f"{where}: field 'policy_fields': invalid JSON") from None
                check_depth(pf, row["policy_fields"], where)
            elif pf is None:
                row["policy_fields"] = {}
            records.append((where, row))
        return build_trace(records + tail, source=name)
    finally:
        if was:
            gc.enable()


def _policy_fields(table) -> list | None:
    """Parsed policy_fields per row, or None when one is not a JSON object within the depth limit."""
    if "policy_fields" not in table.column_names:
        return None
    out = []
    for text in table.column("policy_fields").to_pylist():
        if text is None or text == "{}":
            out.append({})
            continue
        try:
            v = _loads(text.encode())
            check_depth(text, v, "")
        except Exception:  # noqa: BLE001 - the generic path reports it with its row
            return None
        if type(v) is not dict:
            return None
        out.append(v)
    return out
