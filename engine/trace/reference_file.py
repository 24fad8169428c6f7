"""The reference file: format, validation and loading (plain JSON: the app's pages read it without torch).

A reference run (built by engine.offline.reference) is JSONL, validated on load, never pickled:

    {"type": "header", "schema": "speclab.reference", "version": 1, "mode": "greedy", ...}
    {"type": "request", "request_id": 0, "output_ids": [...], "accept_run": [...], ...}
    {"type": "footer", "requests": n}

Per request, one entry per output position j: draft_argmax d_j, q_top = q_j(d_j), q_target =
q_j(y_j), entropy H(q_j); greedy: accept_run A(j) (checked against d vs y, see
engine.hindsight.accept_runs) and one free-running draft tail per mismatch; sampling: β_j.
Every problem is one ReferenceFormatError line naming the line and field.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.trace.fields import number_list
from engine.trace.format import MAX_NEW_TOKENS, TOKEN_MAX, TraceError
from engine.trace.parse import parse_jsonl
from engine.trace.prompts import task_of


def accept_runs(match: list[int]) -> list[int]:
    """A(j) = match_j · (1 + A(j+1)), A(N) = 0."""
    out = [0] * len(match)
    run = 0
    for j in range(len(match) - 1, -1, -1):
        run = run + 1 if match[j] else 0
        out[j] = run
    return out


SCHEMA = "speclab.reference"
VERSION = 1


class ReferenceFormatError(TraceError):
    """A malformed reference file; one line naming the line and field (a TraceError for the app)."""


@dataclass
class Reference:
    header: dict[str, Any]
    requests: list[dict[str, Any]]
    complete: bool = True
    source: str = ""

    @property
    def greedy(self) -> bool:
        return self.header["mode"] == "greedy"

    @property
    def max_new_tokens(self) -> int:
        return self.header["max_new_tokens"]

    @property
    def max_window(self) -> int:
        return self.header["max_window"]


def _fail(where: str, fld: str, msg: str):
    raise ReferenceFormatError(f"{where}: field '{fld}': {msg}")


def _numbers(d: dict, k: str, where: str, n: int, lo: float, hi: float, integer: bool = False) -> None:
    number_list(d, k, where, n, lo, hi, _fail, integer=integer, per="one per output position")


def _check_header(d: dict, where: str) -> None:
    if d.get("type") != "header":
        _fail(where, "type", f"first record must be the header, got {d.get('type')!r}")
    if d.get("schema") != SCHEMA:
        _fail(where, "schema", f"expected {SCHEMA!r}, got {d.get('schema')!r}")
    if d.get("version") != VERSION:
        _fail(where, "version", f"unsupported version {d.get('version')!r} (this build reads {VERSION})")
    if d.get("mode") not in ("greedy", "sampling"):
        _fail(where, "mode", f"expected 'greedy' or 'sampling', got {d.get('mode')!r}")
    for k, lo, hi in (("max_new_tokens", 1, MAX_NEW_TOKENS), ("max_window", 1, 64)):
        v = d.get(k)
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            _fail(where, k, f"expected an integer in [{lo}, {hi}], got {v!r}")
    t = d.get("timings")
    if t is not None:
        if not isinstance(t, dict):
            _fail(where, "timings", "expected an object or null")
        tk = t.get("target_ms_by_tokens")
        if not isinstance(tk, list) or not tk:
            _fail(where, "timings.target_ms_by_tokens", "expected a non-empty list of ms")
        for i, x in enumerate(tk):
            if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or x < 0:
                _fail(where, f"timings.target_ms_by_tokens[{i}]", f"expected a non-negative number, got {x!r}")
        v = t.get("draft_ms_per_token")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            _fail(where, "timings.draft_ms_per_token", f"expected a non-negative number, got {v!r}")


def validate_request(d: dict, where: str, header: dict) -> None:
    rid = d.get("request_id")
    if not isinstance(rid, int) or isinstance(rid, bool) or rid < 0:
        _fail(where, "request_id", f"expected a non-negative integer, got {rid!r}")
    for k in ("prompt_ids", "output_ids", "draft_argmax"):
        v = d.get(k)
        if not isinstance(v, list):
            _fail(where, k, f"expected a list of token ids, got {type(v).__name__}")
        for i, t in enumerate(v):
            if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < TOKEN_MAX:
                _fail(where, f"{k}[{i}]", f"not a token id: {t!r}")
    if not d["prompt_ids"]:
        _fail(where, "prompt_ids", "empty prompt")
    n = len(d["output_ids"])
    if not 1 <= n <= header["max_new_tokens"]:
        _fail(where, "output_ids", f"{n} tokens, expected 1..max_new_tokens={header['max_new_tokens']}")
    if len(d["draft_argmax"]) != n:
        _fail(where, "draft_argmax", f"has {len(d['draft_argmax'])} entries, expected {n} (one per output position)")
    for k, hi in (("q_top", 1.0), ("q_target", 1.0), ("entropy", 1e3)):
        _numbers(d, k, where, n, 0.0, hi)
    if header["mode"] == "sampling":
        _numbers(d, "beta", where, n, 0.0, 1.0)
        return
    _numbers(d, "accept_run", where, n, 0, n, integer=True)
    match = [int(a == b) for a, b in zip(d["draft_argmax"], d["output_ids"])]
    for j, (got, want) in enumerate(zip(d["accept_run"], accept_runs(match))):
        if got != want:
            _fail(where, f"accept_run[{j}]", f"{got} but draft_argmax vs output_ids gives {want}")
    tails = d.get("tails")
    if not isinstance(tails, list):
        _fail(where, "tails", f"expected a list, got {type(tails).__name__}")
    need = {j for j in range(n) if not match[j]}
    for i, t in enumerate(tails):
        f = f"tails[{i}]"
        if not isinstance(t, dict) or not isinstance(t.get("pos"), int) or t["pos"] not in need:
            _fail(where, f + ".pos", "expected the position of a draft/target mismatch")
        need.discard(t["pos"])
        toks = t.get("tokens")
        if not isinstance(toks, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < TOKEN_MAX
                                                 for x in toks):
            _fail(where, f + ".tokens", "expected a list of token ids")
        _numbers(t, "q_top", f"{where}: {f}", len(toks), 0.0, 1.0)
        _numbers(t, "entropy", f"{where}: {f}", len(toks), 0.0, 1e3)
    if need:
        _fail(where, "tails", f"no tail for mismatch position {min(need)}")
    d["tails_by_pos"] = {t["pos"]: t for t in tails}


def load_reference(path: str | os.PathLike) -> Reference:
    """Load and validate a reference file; raises ReferenceFormatError with a one-line message."""
    p = Path(path)
    if not p.is_file():
        raise ReferenceFormatError(f"{p}: no such reference file")
    return _parse(p.read_bytes(), p.name, str(p))


def loads_reference(data: bytes, name: str = "upload.jsonl") -> Reference:
    return _parse(data, name, name)


def _parse(data: bytes, name: str, source: str) -> Reference:
    try:  # the one JSONL reader (engine.trace.parse); a cut-off line is an error here (strict)
        records = parse_jsonl(data, name, [], strict=True)
    except TraceError as e:
        raise ReferenceFormatError(str(e)) from None
    header, reqs, complete = None, [], False
    for where, d in records:
        if not isinstance(d, dict):
            raise ReferenceFormatError(f"{where}: expected a JSON object, got {type(d).__name__}")
        if header is None:
            _check_header(d, where)
            header = d
        elif complete:
            _fail(where, "type", "record after the footer")
        elif d.get("type") == "request":
            validate_request(d, where, header)
            if d["request_id"] != len(reqs):
                _fail(where, "request_id", f"expected {len(reqs)}, got {d['request_id']}")
            d.setdefault("task", task_of(str(d.get("category") or "")))
            reqs.append(d)
        elif d.get("type") == "footer":
            complete = True
        else:
            _fail(where, "type", f"unknown record type {d.get('type')!r}")
    if header is None:
        raise ReferenceFormatError(f"{name}: empty file (no header)")
    return Reference(header, reqs, complete, source)
