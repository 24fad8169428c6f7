"""Serving engines' reports → speclab traces: the part every peer importer shares.

vLLM, llama.cpp and SGLang report speculative decoding at different grains: vLLM's detailed
per-request metrics keep every verify step's drafted and accepted counts; its Prometheus counters,
llama.cpp's `timings` and SGLang's `meta_info` keep totals. Each importer (engine.interop.vllm,
.prometheus, .llamacpp, .sglang) turns its records into `PeerRequest`s — one per request, each a list
of `PeerStep`s — and `peer_records` turns those into trace records whose header's `imported.lacks`
names every field the source never had. The loader (engine.trace.format) accepts null only there.

Counting, as everywhere in the project: `accepted` excludes the bonus/correction token, `emitted`
includes it. Every verify call emits exactly one token the draft did not supply (the correction or
the bonus), so for an engine that reports totals only

    target calls = new tokens − accepted                                      (no truncation)

and a prompt's prefill call, which emits the first token and drafts nothing, is step 0 with
window 0 — vLLM and llama.cpp do not count it among their speculative steps, and
`engine.interop.diagnose.peer_metrics` leaves it out the way they do.

When only totals are known, the per-step split is "even": each call gets ⌊A/n⌋ or ⌈A/n⌉ accepted
and ⌊D/n⌋ or ⌈D/n⌉ drafted, larger shares first (so accepted ≤ drafted on every step whenever
A ≤ D). Means, totals and the acceptance rate are exact; the histogram is not, which the header
says by lacking `accepted_per_step`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.trace.assemble import Lines, build_trace
from engine.trace.parse import _orjson
from engine.trace.check import FINISHED, MAX_CONTEXT, MAX_MS, TOKEN_MAX
from engine.trace.format import Trace, summarize
from engine.trace.jsonio import atomic_path
from engine.interop.peer_json import HEADER, PeerError, first_json, json_lines  # noqa: F401  (the importers' API)

# Not a step field: a peer that reports totals only has no per-step accepted counts (the steps'
# `accepted` is then an even split of the total, see the module docstring).
PER_STEP = "accepted_per_step"
ALWAYS_LACKS = ["draft_tokens", "q_draft", "p_target", "accept_probs", "draft_entropy", "window_cap", "correction",
                "bonus", "t_draft_ms", "sampling"]
MAX_STEPS = 1 << 21  # steps one import may expand to (a Prometheus scrape of a long-running server can count more)


def fail(where: str, fld: str, msg: str):
    raise PeerError(f"{where}: field '{fld}': {msg}")


# ------------------------------------------------------------------ field checks


def count(d: dict, k: str, where: str, lo: int = 0, hi: int = MAX_CONTEXT, optional: bool = False,
          prefix: str = "") -> int | None:
    """d[k] as a count in [lo, hi]; floats with an integral value (Prometheus writes 28.0) are taken."""
    v = d.get(k)
    if v is None and optional:
        return None
    return as_count(v, f"{prefix}{k}", where, lo, hi)


def as_count(v: Any, name: str, where: str, lo: int = 0, hi: int = MAX_CONTEXT) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        fail(where, name, f"expected a count, got {_short(v)}")
    if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
        fail(where, name, f"expected a whole count, got {v}")
    if not lo <= v <= hi:
        fail(where, name, f"{_short(v)} outside [{lo}, {hi}]")
    return int(v)


def number(d: dict, k: str, where: str, lo: float = 0.0, hi: float = MAX_MS, optional: bool = True,
           prefix: str = "") -> float | None:
    v = d.get(k)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        fail(where, f"{prefix}{k}", f"expected a finite number in [{lo:g}, {hi:g}], got {_short(v)}")
    return float(v)


def counts(d: dict, k: str, where: str, hi: int = MAX_CONTEXT, prefix: str = "", max_len: int = MAX_STEPS,
           optional: bool = False) -> list[int] | None:
    v = d.get(k)
    if v is None and optional:
        return None
    if type(v) is not list:
        fail(where, f"{prefix}{k}", f"expected a list of counts, got {type(v).__name__}")
    if len(v) > max_len:
        fail(where, f"{prefix}{k}", f"{len(v)} entries exceeds the limit {max_len}")
    if v and set(map(type, v)) == {int} and min(v) >= 0 and max(v) <= hi:
        return v  # the common case at C speed (a long request has thousands of steps)
    return [as_count(x, f"{prefix}{k}[{i}]", where, 0, hi) for i, x in enumerate(v)]


def token_ids(d: dict, k: str, where: str, prefix: str = "") -> list[int] | None:
    v = d.get(k)
    if v is None:
        return None
    if type(v) is not list or len(v) > MAX_CONTEXT:
        fail(where, f"{prefix}{k}", "expected a list of token ids")
    if v and not (set(map(type, v)) == {int} and min(v) >= 0 and max(v) < TOKEN_MAX):
        for i, t in enumerate(v):
            if type(t) is not int or not 0 <= t < TOKEN_MAX:
                fail(where, f"{prefix}{k}[{i}]", f"not a token id: {_short(t)}")
    return v


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def ident(d: dict, k: str, where: str, prefix: str = "") -> int | str | None:
    """A request or question id: an integer (|id| < 2⁶³) or a string of at most 256 characters, or None.
    Anything else is refused rather than dropped, so a garbled id never silently loses its request's label."""
    v = d.get(k)
    if v is None:
        return None
    if type(v) is int and -(1 << 63) < v < (1 << 63) or type(v) is str and len(v) <= 256:
        return v
    fail(where, f"{prefix}{k}", f"expected an integer or a string id, got {_short(v)}")


def label(d: dict, k: str, where: str, prefix: str = "", max_len: int = 256) -> str:
    """A short text label (category, model name): a string or absent; never str() of another type."""
    v = d.get(k)
    if v is None:
        return ""
    if type(v) is not str or len(v) > max_len:
        fail(where, f"{prefix}{k}", f"expected a string of at most {max_len} characters, got {_short(v)}")
    return v


class Budget:
    """Steps one import may still build (MAX_STEPS in all). Importers take a request's steps from it
    as soon as its counts are read and before any step exists, so a 70-byte record claiming 2²⁴
    tokens is refused in microseconds instead of after gigabytes of steps."""

    def __init__(self, limit: int = MAX_STEPS) -> None:
        self.limit, self.left = limit, limit

    def take(self, n: int, where: str, fld: str) -> None:
        if n > self.left:
            fail(where, fld, f"{n} steps would take the import past its limit of {self.limit} steps "
                             f"({self.limit - self.left} already)")
        self.left -= n


# ------------------------------------------------------------------ the trace


@dataclass(slots=True)
class PeerStep:
    """One target call: drafted (None: unknown), accepted (excl. bonus), emitted (incl. it), times.
    Slotted, and no dict unless a step has fields: an import builds one per verify step (650k in
    importbench), and allocation was most of its cost. `fields` becomes the trace step's policy_fields
    as is (each step's own dict, never shared)."""

    window: int | None
    accepted: int
    emitted: int
    t_verify_ms: float = 0.0
    t_prefill_ms: float = 0.0
    fields: dict | None = None
    cut: bool = False  # the output ended inside this step (emitted < accepted + 1): it must finish the request
    record: dict | None = None  # step fields a richer log has (draft_tokens, q_draft, …): kept as is


@dataclass
class PeerRequest:
    steps: list[PeerStep]
    prompt_ids: list[int] | None = None
    output_ids: list[int] | None = None
    prompt_text: str = ""
    output_text: str = ""
    category: str = ""
    question_id: Any = None
    finished: str | None = None
    wall_ms: float | None = None
    reported: dict = field(default_factory=dict)  # what the engine said about this request, as it said it
    ordered: bool = True  # the steps are in the order the engine ran them (else token ids cannot be placed)


def even_split(total: int, n: int) -> list[int]:
    """`total` over n parts as ⌊total/n⌋ or ⌈total/n⌉, larger parts first."""
    if n <= 0:
        return []
    q, r = divmod(total, n)
    return [q + (i < r) for i in range(n)]


def peer_records(fmt: str, reqs: list[PeerRequest], *, engine: dict, target: str, draft: str | None, spec: str,
                 lacks: list[str], timing: str, notes: list[str], source: str, command: str = "",
                 max_new_tokens: int | None = None, sampling: dict | None = None,
                 created: Any = None, has: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Trace records (header … footer) for the requests. Token ids go into the steps only when every
    request has them and its steps are in order; a step's context_len only when every prompt's ids are
    known. `lacks` is completed with what the requests turn out to lack."""
    lacks = list(dict.fromkeys(k for k in [*ALWAYS_LACKS, *lacks] if k not in has))  # `has`: what the steps carry
    with_prompts = all(r.prompt_ids for r in reqs)
    with_tokens = all(r.output_ids is not None and r.ordered and
                      sum(s.emitted for s in r.steps) == len(r.output_ids) for r in reqs)
    if any(s.window is None for r in reqs for s in r.steps):
        lacks.append("window")
    for k, have in (("prompt_ids", with_prompts), ("context_len", with_prompts and all(r.ordered for r in reqs)),
                    ("emitted_tokens", with_tokens), ("output_ids", with_tokens)):
        if not have:
            lacks.append(k)
    lacks = [k for k in dict.fromkeys(lacks) if k not in has]
    # the run's own date (a report's header line says it), never the import's: "unknown" when not said
    run_created = created if type(created) is str and 0 < len(created) <= 64 else "unknown"
    header = {"created": run_created,
              "target": {"name": target, "vocab_size": None, "dtype": None, "device": None, "reduced_vocab": None},
              "draft": None if draft is None else {"name": draft, "vocab_size": None, "dtype": None, "device": None,
                                                   "reduced_vocab": None},
              "policy": {"name": fmt, "spec": spec, "params": {}}, "verifier": None, "sampling": sampling or {},
              "max_new_tokens": max_new_tokens,
              "prompts": [{"request_id": i, "question_id": r.question_id, "category": r.category}
                          for i, r in enumerate(reqs)],
              "software": {"engine": engine}, "command": command, "prompts_file": None,
              "imported": {"format": fmt, "source": Path(source).name, "engine": engine, "lacks": lacks,
                           "imported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "timing": timing, "notes": notes}}
    out: list[dict[str, Any]] = [{"type": "header", "schema": "speclab.trace", "version": 1, **header}]
    for rid, r in enumerate(reqs):
        out.append({"type": "request", "request_id": rid, "prompt_ids": list(r.prompt_ids or []) if with_prompts
                    else [], "prompt_text": r.prompt_text, "category": r.category, "question_id": r.question_id})
        ctx = len(r.prompt_ids) if with_prompts and "context_len" not in lacks else None
        pos, out_ids, n_last = 0, r.output_ids, len(r.steps) - 1
        for j, s in enumerate(r.steps):  # one dict literal a step: this loop ran 650k times in importbench
            e = s.emitted
            step = {"type": "step", "request_id": rid, "step": j, "context_len": ctx, "window_cap": None,
                    "window": s.window, "draft_tokens": None, "q_draft": None, "p_target": None,
                    "accept_probs": None, "draft_entropy": None, "accepted": s.accepted, "emitted": e,
                    "emitted_tokens": out_ids[pos:pos + e] if with_tokens else None, "correction": None,
                    "bonus": None, "stop_reason": "none" if s.window == 0 else "unknown", "t_draft_ms": 0.0,
                    "t_verify_ms": s.t_verify_ms, "t_prefill_ms": s.t_prefill_ms if j == 0 else 0.0,
                    "finished": r.finished if j == n_last else None, "policy_fields": s.fields or {},
                    "all_drafts": None, "chosen": 0, "decisions": None}
            if s.record:
                step.update(s.record)
            out.append(step)
            pos += e
            if ctx is not None:
                ctx += e
        out.append({"type": "request_end", "request_id": rid, "output_ids": list(r.output_ids) if with_tokens else [],
                    "output_text": r.output_text, "finished": r.finished if r.steps else None,
                    "wall_ms": r.wall_ms, "reported": r.reported})
    out.append({"type": "footer", "summary": summarize([x for x in out if x["type"] == "step"],
                                                       [x for x in out if x["type"] == "request_end"])})
    return out


def check_finished(v: Any, where: str, fld: str, mapping: dict[str, str | None]) -> str | None:
    """An engine's finish reason → ours (eos / max_new_tokens / None)."""
    if v is None:
        return None
    if type(v) is not str or v not in mapping:
        fail(where, fld, f"unknown finish reason {_short(v)} (expected one of {', '.join(sorted(mapping))})")
    out = mapping[v]
    assert out in FINISHED
    return out


def cut_finish(stated: str | None, n_out: int, budget: int | None) -> tuple[str, str]:
    """How a request whose last step was cut ended, and a note when the record did not say.

    A cut step is the request's end by construction (an engine stops a request at the budget or a
    stop string inside a step, after counting the step's accepted drafts), so it is always finished:
    the record's own reason when it gives one; else 'max_new_tokens' when the output length equals
    the run's budget (the header's max_tokens, when known), else 'eos' (a stop token or string ended it)."""
    if stated is not None:
        return stated, ""
    if budget is not None and n_out >= budget:
        return "max_new_tokens", f"no finish reason: the output reached max_tokens = {budget}, so 'max_new_tokens'"
    return "eos", ("no finish reason: the output was cut inside its last step short of any known budget, "
                   "so it stopped at a stop token or string ('eos')")


def to_trace(records: list[dict[str, Any]], name: str) -> Trace:
    """Validate importer records with the loader's own rules (the import is refused whole on any error)."""
    if sum(1 for r in records if r["type"] == "step") > MAX_STEPS:
        raise PeerError(f"{name}: more than {MAX_STEPS} steps to import")
    # records are located lazily ("NAME: imported record i" only on the way to an error): 650k f-strings cost
    return build_trace(Lines(name, records, unit="imported record", base=0), source=name)


def write_trace(records: list[dict[str, Any]], out: str | os.PathLike, source: str | None = None) -> Trace:
    """Validate, then write the trace atomically: a bad report leaves no file, a good one a whole one.
    A refusal names `source` (the report read), not the trace that was not written."""
    t = to_trace(records, Path(source).name if source else Path(out).name)
    # line by line into the temporary file: the whole text at once doubled a large import's memory
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        for r in records:
            f.write(_dumps(r))
    return t


_stdlib_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(", ", ": ")).encode


def _dumps(r: dict) -> bytes:
    """One trace line as UTF-8 bytes. orjson is ~6× faster than the standard encoder (a 650k-step import
    spent 12 s here); every value it is given was validated finite and in range by `to_trace`, and what it
    cannot encode (an integer past 64 bits) goes to the standard encoder, which refuses NaN as well."""
    if _orjson is not None:
        try:
            return _orjson.dumps(r, option=_orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            pass
    return (_stdlib_dumps(r) + "\n").encode("utf-8")



def sampling_of(meta: dict) -> dict:
    """The sampling a report's header line states (temperature; top_p / top_k when given and in range),
    else {} — an unknown temperature stays unknown, it is never taken as greedy."""
    out: dict[str, Any] = {}
    t = meta.get("temperature")
    if type(t) in (int, float) and math.isfinite(t) and 0 <= t <= 100:
        out["temperature"] = float(t)
    p = meta.get("top_p")
    if type(p) in (int, float) and 0 < p <= 1:
        out["top_p"] = float(p)
    k = meta.get("top_k")
    if type(k) is int and 0 <= k <= TOKEN_MAX:
        out["top_k"] = k
    return out
