"""Training traces of block-drafter runs (JSONL, versioned like decode traces).

    {"type": "header", "schema": "speclab.dpace_trace", "version": 1, "objective": ..., "block_size": B, ...}
    {"type": "log",  "step": t, "loss": .., "lr": .., "q": [B−1], "weight_share": [B−1], "surrogate": .., "wall_s": ..}
    {"type": "eval", "step": t, "tau_offline": .., "accept_by_pos": [B−1], "hist": [B], "n_anchors": n, "split": ..}
    {"type": "footer", "final": {...}}

Per position i = 1 … B−1 (block position 0 is the anchor):
  q[i]             mean drafter probability of the target's token over the batch's valid positions;
  weight_share[i]  Σ_blocks w_i / Σ_blocks Σ_j w_j with the objective's own (detached) weights;
  surrogate        mean over blocks of S = Σ_k Π_{i≤k} q_i (raw q, i.e. α = 0), the acceptance-length proxy;
  tau_offline      1 + mean accepted drafts per block on held-out target-greedy data (incl. bonus);
  accept_by_pos[i] P(draft i correct | drafts < i correct), the per-position conditional acceptance;
  hist[n]          number of blocks with n accepted drafts (n = 0 … B−1).

The loader parses JSON only and rejects malformed input with one line naming file, line and field.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.trace.check import TraceError
from engine.trace.fields import number_list
from engine.trace.parse import parse_jsonl

SCHEMA = "speclab.dpace_trace"
VERSION = 1
OBJECTIVES = ("uniform", "dflash", "dpace", "dpace-mean", "dpace-cum", "dpace-cont")


class TrainingTraceError(ValueError):
    """A malformed training trace; one line: file, line, field, what."""


@dataclass
class TrainingTrace:
    header: dict[str, Any]
    logs: list[dict[str, Any]] = field(default_factory=list)
    evals: list[dict[str, Any]] = field(default_factory=list)
    footer: dict[str, Any] | None = None
    source: str = ""

    @property
    def complete(self) -> bool:
        return self.footer is not None

    @property
    def block_size(self) -> int:
        return int(self.header["block_size"])


class TrainingTraceWriter:
    """Append-only JSONL writer; each record is one flushed line. `offset` supports resumption."""

    def __init__(self, path: str | os.PathLike, header: dict[str, Any] | None, resume_offset: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_offset is not None and self.path.is_file():
            with open(self.path, "r+b") as f:
                f.truncate(resume_offset)
            self._f = open(self.path, "a", encoding="utf-8")
        else:
            self._f = open(self.path, "w", encoding="utf-8")
            self.write({"type": "header", "schema": SCHEMA, "version": VERSION, **(header or {})})

    def write(self, rec: dict[str, Any]) -> None:
        self._f.write(json.dumps(rec, allow_nan=False) + "\n")
        self._f.flush()

    @property
    def offset(self) -> int:
        self._f.flush()
        return self._f.tell()

    def close(self) -> None:
        self._f.close()


def _fail(where: str, fld: str, msg: str):
    raise TrainingTraceError(f"{where}: field '{fld}': {msg}")


def _num(d, k, where, lo=-math.inf, hi=math.inf, optional=False):
    v = d.get(k)
    if v is None and optional:
        return
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        _fail(where, k, f"expected a number, got {type(v).__name__}")
    if not math.isfinite(v):
        _fail(where, k, f"non-finite value {v}")
    if not lo - 1e-9 <= v <= hi + 1e-9:
        _fail(where, k, f"{v} outside [{lo}, {hi}]")


def _int(d, k, where, lo=0, hi=1 << 62):
    v = d.get(k)
    if not isinstance(v, int) or isinstance(v, bool):
        _fail(where, k, f"expected an integer, got {type(v).__name__}")
    if not lo <= v <= hi:
        _fail(where, k, f"{v} outside [{lo}, {hi}]")


def _vec(d, k, where, n, lo, hi, integer=False):
    number_list(d, k, where, n, lo, hi, _fail, integer=integer)


def validate_header(d: dict, where: str) -> None:
    if d.get("schema") != SCHEMA:
        _fail(where, "schema", f"expected {SCHEMA!r}, got {d.get('schema')!r}")
    if d.get("version") != VERSION:
        _fail(where, "version", f"unsupported version {d.get('version')!r} (this reader knows {VERSION})")
    if d.get("objective") not in OBJECTIVES:
        _fail(where, "objective", f"{d.get('objective')!r} is not one of {', '.join(OBJECTIVES)}")
    _int(d, "block_size", where, lo=2, hi=256)
    _int(d, "seed", where, lo=0)
    _int(d, "steps", where, lo=1)
    _num(d, "alpha", where, 0.0, 1.0, optional=True)
    _num(d, "gamma", where, 0.0, 1e6, optional=True)


def validate_log(d: dict, where: str, B: int) -> None:
    _int(d, "step", where, lo=1)
    _num(d, "loss", where, 0.0)
    _num(d, "lr", where, 0.0, 1.0)
    _vec(d, "q", where, B - 1, 0.0, 1.0)
    _vec(d, "weight_share", where, B - 1, 0.0, 1.0)
    _num(d, "surrogate", where, 0.0, float(B))
    _num(d, "wall_s", where, 0.0)


def validate_eval(d: dict, where: str, B: int) -> None:
    _int(d, "step", where, lo=0)
    _num(d, "tau_offline", where, 1.0, float(B))
    _vec(d, "accept_by_pos", where, B - 1, 0.0, 1.0)
    _vec(d, "hist", where, B, 0, 1 << 40, integer=True)
    _int(d, "n_anchors", where, lo=1)


def load_training_trace(path: str | os.PathLike) -> TrainingTrace:
    p = Path(path)
    if not p.is_file():
        raise TrainingTraceError(f"{p}: no such file")
    trace: TrainingTrace | None = None
    try:  # the one JSONL reader (engine.trace.parse); a cut-off line is an error here (strict)
        records = parse_jsonl(p.read_bytes(), p.name, [], strict=True)
    except TraceError as e:
        raise TrainingTraceError(str(e)) from None
    for where, d in records:
        if not isinstance(d, dict):
            raise TrainingTraceError(f"{where}: expected an object")
        kind = d.get("type")
        if trace is None:
            if kind != "header":
                _fail(where, "type", f"the first record must be the header, got {kind!r}")
            validate_header(d, where)
            trace = TrainingTrace(header=d, source=str(p))
            continue
        if trace.footer is not None:
            _fail(where, "type", "record after the footer")
        B = trace.block_size
        if kind == "log":
            validate_log(d, where, B)
            if trace.logs and d["step"] <= trace.logs[-1]["step"]:
                _fail(where, "step", f"{d['step']} does not increase (previous {trace.logs[-1]['step']})")
            trace.logs.append(d)
        elif kind == "eval":
            validate_eval(d, where, B)
            trace.evals.append(d)
        elif kind == "footer":
            if not isinstance(d.get("final"), dict):
                _fail(where, "final", "expected an object")
            trace.footer = d
        elif kind == "header":
            _fail(where, "type", "a second header")
        else:
            _fail(where, "type", f"unknown record type {kind!r}")
    if trace is None:
        raise TrainingTraceError(f"{p.name}: empty file (no header)")
    return trace
