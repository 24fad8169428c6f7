"""Trace format v1: one JSONL file per run (schema in docs/trace-format.md).

    {"type": "header", "schema": "speclab.trace", "version": 1, ...}     run configuration
    {"type": "request", "request_id": 0, "prompt_ids": [...], ...}         one per prompt
    {"type": "step", "request_id": 0, "step": 0, ...}                      one per verify call
    {"type": "request_end", "request_id": 0, "output_ids": [...], ...}     one per finished prompt
    {"type": "footer", "summary": {...}}                                   written on a clean finish

This is the only module that knows the on-disk form of a StepRecord. Records are flushed one line
at a time, so a killed run leaves a loadable file (no footer; the loader says so). The loader only
parses JSON (or Parquet columns) — it never executes or unpickles anything — and rejects malformed
input with one line naming the line number and field.

Counting convention: `accepted` excludes the bonus/correction token, `emitted` includes it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

SCHEMA = "speclab.trace"
VERSION = 1
MAX_WINDOW = 1024  # larger windows are certainly corrupt: no verifier drafts that far
MAX_LINE = 8 << 20  # 8 MiB per record: a real step is a few kB
TOKEN_MAX = 10_000_000  # larger ids than any vocabulary we know of


class TraceError(ValueError):
    """A malformed trace; the message is one line: where and what."""


# ------------------------------------------------------------------ writing


def step_to_dict(rec) -> dict[str, Any]:
    d = asdict(rec)
    d["type"] = "step"
    d["window"] = len(rec.draft_tokens)
    d["emitted"] = len(rec.emitted_tokens)
    for k in ("t_draft_ms", "t_verify_ms", "t_prefill_ms", "t_rule_ms"):
        d[k] = round(d[k], 4)
    for k in ("q_draft", "p_target", "accept_probs", "draft_entropy"):
        d[k] = [round(float(x), 7) for x in d[k]]
    return d


class TraceWriter:
    """Append records to a JSONL trace, flushing each line. Use as a context manager."""

    def __init__(self, path: str | os.PathLike, header: dict[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "w", encoding="utf-8")
        self._steps: list[dict] = []
        self._ends: list[dict] = []
        self.summary: dict[str, Any] | None = None
        self.write({"type": "header", "schema": SCHEMA, "version": VERSION, **header})

    def write(self, record: dict[str, Any]) -> None:
        # One write() per full line keeps a crash from leaving half a record in most cases.
        self._f.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")
        self._f.flush()
        if record["type"] == "step":
            self._steps.append(record)
        elif record["type"] == "request_end":
            self._ends.append(record)

    def step(self, rec) -> dict[str, Any]:
        d = step_to_dict(rec)
        self.write(d)
        return d

    def close(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        summary = summarize(self._steps, self._ends)
        self.write({"type": "footer", "summary": summary, **(extra or {})})
        self.summary = summary
        self._f.close()
        return summary

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            self.close()
        else:  # interrupted: leave the file without a footer, as a killed run would
            self._f.close()


# ------------------------------------------------------------------ summary


def summarize(steps: list[dict], ends: list[dict] | None = None) -> dict[str, Any]:
    """Run summary from step dicts. Every count says whether it includes the bonus token."""
    n = len(steps)
    # Imported runs (engine.interop) may not know how much was drafted: then neither do we.
    drafted_known = all(s["window"] is not None for s in steps)
    window = sum(s["window"] or 0 for s in steps)
    accepted = sum(s["accepted"] for s in steps)
    emitted = sum(s["emitted"] for s in steps)
    t_ms = sum(s["t_draft_ms"] + s["t_verify_ms"] + s["t_prefill_ms"] for s in steps)
    t_draft = sum(s["t_draft_ms"] for s in steps)
    t_verify = sum(s["t_verify_ms"] for s in steps)
    per_req: dict[int, list[float]] = {}
    for s in steps:
        acc = per_req.setdefault(s["request_id"], [0.0, 0.0])
        acc[0] += s["emitted"]
        acc[1] += s["t_draft_ms"] + s["t_verify_ms"] + s["t_prefill_ms"]
    tps = [tok / (ms / 1e3) for tok, ms in per_req.values() if ms > 0]
    hist: dict[str, int] = {}
    for s in steps:
        hist[str(s["accepted"])] = hist.get(str(s["accepted"]), 0) + 1
    return {
        "requests": len(per_req),
        "requests_finished": len(ends or []),
        "target_calls": n,
        "new_tokens": emitted,
        "drafted_tokens": window if drafted_known else None,
        "accepted_tokens_excl_bonus": accepted,
        "mean_emitted_per_call_incl_bonus": emitted / n if n else 0.0,
        "mean_accepted_per_call_excl_bonus": accepted / n if n else 0.0,
        "draft_acceptance_rate": (accepted / window if window else 0.0) if drafted_known else None,
        "tokens_per_s": emitted / (t_ms / 1e3) if t_ms > 0 else 0.0,
        "tokens_per_s_mean_over_requests": sum(tps) / len(tps) if tps else 0.0,
        "decode_ms": t_ms,
        "draft_ms": t_draft,
        "verify_ms": t_verify,
        "accepted_histogram": dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
    }


# ------------------------------------------------------------------ loading


@dataclass
class Trace:
    header: dict[str, Any]
    requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)
    footer: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    source: str = ""

    @property
    def complete(self) -> bool:
        return self.footer is not None

    @property
    def summary(self) -> dict[str, Any]:
        return summarize(self.steps, list(self.ends.values()))


def _fail(where: str, fld: str, msg: str) -> None:
    raise TraceError(f"{where}: field '{fld}': {msg}")


def _int(d: dict, k: str, where: str, lo: int = 0, hi: int = 1 << 62, optional: bool = False) -> None:
    v = d.get(k)
    if v is None and optional:
        return
    if not isinstance(v, int) or isinstance(v, bool):
        _fail(where, k, f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        _fail(where, k, f"{v} outside [{lo}, {hi}]")


def _num_list(d: dict, k: str, where: str, n: int, lo: float, hi: float) -> None:
    v = d.get(k)
    if not isinstance(v, list):
        _fail(where, k, f"expected a list, got {type(v).__name__}")
    if len(v) != n:
        _fail(where, k, f"has {len(v)} entries, expected {n} (one per drafted token)")
    for i, x in enumerate(v):
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            _fail(where, f"{k}[{i}]", f"expected a number, got {type(x).__name__}")
        if not math.isfinite(x):
            _fail(where, f"{k}[{i}]", f"non-finite value {x}")
        if not lo - 1e-6 <= x <= hi + 1e-6:
            _fail(where, f"{k}[{i}]", f"{x} outside [{lo}, {hi}]")


def _tokens(d: dict, k: str, where: str, max_len: int) -> None:
    v = d.get(k)
    if not isinstance(v, list):
        _fail(where, k, f"expected a list of token ids, got {type(v).__name__}")
    if len(v) > max_len:
        _fail(where, k, f"{len(v)} tokens exceeds the limit {max_len}")
    for i, t in enumerate(v):
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < TOKEN_MAX:
            _fail(where, f"{k}[{i}]", f"not a token id: {t!r}")


# Fields an imported run (engine.interop, header `imported.lacks`) may leave null in its steps.
LACKABLE = ("context_len", "window_cap", "window", "draft_tokens", "q_draft", "p_target", "accept_probs",
            "draft_entropy", "emitted_tokens", "correction", "bonus")


def validate_step(d: dict, where: str, lacks: frozenset = frozenset()) -> None:
    """`lacks`: fields the header says this (imported) trace does not have; they may be null, and
    the checks that need them are skipped. Everything present is checked as usual."""
    def gone(k: str) -> bool:
        return k in lacks and d.get(k) is None

    _int(d, "request_id", where)
    _int(d, "step", where)
    if not gone("context_len"):
        _int(d, "context_len", where, lo=1)
    if not gone("window_cap"):
        _int(d, "window_cap", where, hi=MAX_WINDOW)
    w = None
    if not gone("draft_tokens"):
        _tokens(d, "draft_tokens", where, MAX_WINDOW)
        w = len(d["draft_tokens"])
    if d.get("window") is not None or not gone("window"):
        _int(d, "window", where, hi=MAX_WINDOW, optional=w is not None)
        if w is not None and "window" in d and d["window"] != w:
            _fail(where, "window", f"{d['window']} but {w} draft tokens")
        w = d["window"] if w is None else w
    _int(d, "accepted", where)
    if w is not None and d["accepted"] > w:
        _fail(where, "accepted", f"{d['accepted']} accepted > window {w}")
    if gone("emitted_tokens"):
        _int(d, "emitted", where, lo=1, hi=MAX_WINDOW + 1)  # the count is all an imported step may keep
        n_emitted = d["emitted"]
    else:
        _tokens(d, "emitted_tokens", where, MAX_WINDOW + 1)
        n_emitted = len(d["emitted_tokens"])
    if n_emitted > d["accepted"] + 1:
        _fail(where, "emitted_tokens", f"{n_emitted} emitted > accepted + 1")
    if not n_emitted:
        _fail(where, "emitted_tokens", "a verify call emits at least one token")
    for k, hi in (("q_draft", 1.0), ("p_target", 1.0), ("accept_probs", 1.0), ("draft_entropy", 1e3)):
        if not gone(k) and w is not None:
            _num_list(d, k, where, w, 0.0, hi)
        elif not gone(k):
            _fail(where, k, "per-token values without draft_tokens or window")
    for k in ("t_draft_ms", "t_verify_ms", "t_prefill_ms"):
        v = d.get(k)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            _fail(where, k, f"expected a finite non-negative time in ms, got {v!r}")
    if d.get("t_rule_ms") is not None:  # optional (older traces lack it): the rule's share of the verify call
        v = d["t_rule_ms"]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            _fail(where, "t_rule_ms", f"expected a finite non-negative time in ms, got {v!r}")
        if v > d["t_verify_ms"] + 1e-3:
            _fail(where, "t_rule_ms", f"{v} ms in the rule > the whole verify call ({d['t_verify_ms']} ms)")
    for k in ("correction", "bonus"):
        _int(d, k, where, hi=TOKEN_MAX, optional=True)
    if not isinstance(d.get("stop_reason"), str):
        _fail(where, "stop_reason", "expected a string")
    if not isinstance(d.get("policy_fields", {}), dict):
        _fail(where, "policy_fields", "expected an object")
    alt = d.get("all_drafts")
    if alt is not None:
        if not isinstance(alt, list) or not alt:
            _fail(where, "all_drafts", "expected a non-empty list of draft blocks")
        for k in range(len(alt)):
            _tokens({"b": alt[k]}, "b", f"{where}: all_drafts[{k}]", MAX_WINDOW)
        _int(d, "chosen", where, hi=len(alt) - 1)
        if alt[d["chosen"]] != d["draft_tokens"]:
            _fail(where, "chosen", "draft_tokens must equal all_drafts[chosen]")
    dec = d.get("decisions")
    if dec is not None:
        if not isinstance(dec, list) or len(dec) != w or any(x not in (0, 1) for x in dec):
            _fail(where, "decisions", "expected one 0/1 decision per drafted token")
    d.setdefault("window", w)
    d.setdefault("emitted", n_emitted)


def _check_header(d: dict, where: str) -> None:
    if d.get("schema") != SCHEMA:
        _fail(where, "schema", f"expected {SCHEMA!r}, got {d.get('schema')!r}")
    if d.get("version") != VERSION:
        _fail(where, "version", f"unsupported schema version {d.get('version')!r} (this build reads {VERSION})")
    for k in ("target", "policy", "sampling"):
        if k not in d:
            _fail(where, k, "missing")


def _lacks(header: dict, where: str) -> frozenset:
    imp = header.get("imported")
    if imp is None:
        return frozenset()
    lacks = imp.get("lacks") if isinstance(imp, dict) else None
    if not isinstance(lacks, list) or not all(isinstance(k, str) for k in lacks):
        _fail(where, "imported", "expected {'format': ..., 'lacks': [field names]}")
    return frozenset(k for k in lacks if k in LACKABLE)


def build_trace(records: Iterable[tuple[str, dict]], source: str = "") -> Trace:
    """Validate a stream of (location, record) pairs into a Trace."""
    trace: Trace | None = None
    last_step: dict[int, int] = {}
    for where, d in records:
        if not isinstance(d, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(d).__name__}")
        kind = d.get("type")
        if trace is None:
            if kind != "header":
                _fail(where, "type", f"first record must be the header, got {kind!r}")
            _check_header(d, where)
            trace = Trace(header=d, source=source)
            lacks = _lacks(d, where)
            continue
        if trace.footer is not None:
            _fail(where, "type", "record after the footer")
        if kind == "request":
            _int(d, "request_id", where)
            _tokens(d, "prompt_ids", where, 1 << 20)
            if d["request_id"] in trace.requests:
                _fail(where, "request_id", f"duplicate request {d['request_id']}")
            trace.requests[d["request_id"]] = d
        elif kind == "step":
            validate_step(d, where, lacks)
            rid = d["request_id"]
            if rid not in trace.requests:
                _fail(where, "request_id", f"step for unknown request {rid}")
            if d["step"] != last_step.get(rid, -1) + 1:
                _fail(where, "step", f"expected step {last_step.get(rid, -1) + 1} of request {rid}, got {d['step']}")
            last_step[rid] = d["step"]
            trace.steps.append(d)
        elif kind == "request_end":
            _int(d, "request_id", where)
            _tokens(d, "output_ids", where, 1 << 20)
            trace.ends[d["request_id"]] = d
        elif kind == "footer":
            if not isinstance(d.get("summary"), dict):
                _fail(where, "summary", "expected an object")
            trace.footer = d
        else:
            _fail(where, "type", f"unknown record type {kind!r}")
    if trace is None:
        raise TraceError(f"{source or 'trace'}: empty file (no header)")
    if trace.footer is None:
        trace.warnings.append("no footer: the run was interrupted; steps up to the last complete line are kept")
    return trace


def _jsonl_records(path: Path, warnings: list[str]):
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    ends_clean = lines and lines[-1] == b""
    if ends_clean:
        lines = lines[:-1]
    for i, raw in enumerate(lines, start=1):
        where = f"{path.name}: line {i}"
        if len(raw) > MAX_LINE:
            raise TraceError(f"{where}: record of {len(raw)} bytes exceeds the {MAX_LINE}-byte limit")
        if not raw.strip():
            continue
        try:
            d = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            if i == len(lines) and not ends_clean:
                warnings.append(f"line {i} is cut off (the run was killed while writing it); dropped")
                return
            raise TraceError(f"{where}: invalid JSON ({e.msg if hasattr(e, 'msg') else e})") from None
        except ValueError as e:
            raise TraceError(f"{where}: {e}") from None
        yield where, d


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name} is not allowed")


def load_trace(path: str | os.PathLike) -> Trace:
    """Load and validate a JSONL or Parquet trace; raises TraceError with a one-line message."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such trace file")
    if p.suffix == ".parquet":
        return _load_parquet(p)
    warnings: list[str] = []
    trace = build_trace(_jsonl_records(p, warnings), source=str(p))
    trace.warnings[:0] = warnings
    return trace


def loads_trace(data: bytes, name: str = "upload.jsonl") -> Trace:
    """Load from bytes (app uploads) via a temporary file, same validation as `load_trace`."""
    import tempfile

    suffix = ".parquet" if name.endswith(".parquet") else ".jsonl"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d) / (Path(name).stem + suffix)
        tmp.write_bytes(data)
        t = load_trace(tmp)
    t.source = name
    return t


# ------------------------------------------------------------------ Parquet

_LIST_FIELDS = ("draft_tokens", "q_draft", "p_target", "accept_probs", "draft_entropy", "emitted_tokens")


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
    tmp = Path(str(path) + ".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


def _load_parquet(p: Path) -> Trace:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise TraceError(f"{p.name}: not a readable Parquet file ({type(e).__name__})") from None
    meta = table.schema.metadata or {}
    if b"speclab.header" not in meta:
        raise TraceError(f"{p.name}: field 'header': Parquet file has no speclab header metadata")
    try:
        header = json.loads(meta[b"speclab.header"])
        requests = json.loads(meta.get(b"speclab.requests", b"[]"))
        ends = json.loads(meta.get(b"speclab.ends", b"[]"))
        footer = json.loads(meta.get(b"speclab.footer", b"null"))
    except json.JSONDecodeError as e:
        raise TraceError(f"{p.name}: field 'metadata': invalid JSON ({e.msg})") from None

    def records():
        yield "header", header
        for r in requests:
            yield f"request {r.get('request_id')}", r
        for i, row in enumerate(table.to_pylist()):
            try:
                row["policy_fields"] = json.loads(row.get("policy_fields") or "{}")
            except json.JSONDecodeError:
                raise TraceError(f"{p.name}: row {i}: field 'policy_fields': invalid JSON") from None
            yield f"{p.name}: row {i}", row
        for e in ends:
            yield f"request_end {e.get('request_id')}", e
        if footer is not None:
            yield "footer", footer

    return build_trace(records(), source=str(p))
