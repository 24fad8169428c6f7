"""Spec-Bench answer files ⇄ speclab traces.

Spec-Bench (`evaluation/eval.py`) writes one JSON line per question:

    {"question_id": 81, "category": "writing", "answer_id": ..., "model_id": ..., "tstamp": ...,
     "choices": [{"index": 0, "turns": [answer text per turn], "decoding_steps": [per turn],
                  "new_tokens": [per turn], "wall_time": [seconds per turn],
                  "accept_lengths": [one per decoding step, all turns concatenated]}]}

An accept length is `new_cur_len − cur_len`: accepted drafts + 1, i.e. our `emitted` (bonus
included). `speed.py` reads only `choices[0]`, so import does too.

Import (answer → trace): one request per question (Spec-Bench's throughput is per question), one
step per accept length, `accepted = accept_length − 1`, `emitted` = accept length. The file times
turns, not steps, so each step gets an equal share of its turn's wall time in `t_verify_ms`
(a step costs about one target forward whatever it emits); drafting, verification and prefill are
not separated (`t_draft_ms = t_prefill_ms = 0`). Per turn, steps past `new_tokens` are cut as our
engine cuts at EOS/the budget, so Σ emitted = new_tokens and the per-question throughput equals
speed.py's. Draft tokens, probabilities, windows and token ids are not in the file: the header's
`imported.lacks` names them and those step fields are null (engine.trace.format accepts that).

Export (trace → answer): one question per request; `accept_lengths` = emitted per step,
`new_tokens` = Σ emitted, `wall_time` = Σ (prefill + draft + verify) of the request's steps (the
time our summaries divide by), `turns` = the output text. Imported traces keep their turns.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from engine.trace.assemble import build_trace
from engine.trace.format import (LACKABLE, Trace, TraceError, TraceWriter, request_end_record, request_record,
                                 summarize)
from engine.trace.jsonio import atomic_path

FORMAT = "specbench"
# What an answer file never records, per step and per request (trace field names).
LACKS = [*LACKABLE, "prompt_ids", "output_ids", "t_draft_ms", "t_prefill_ms", "sampling"]
TIMING = ("each step's t_verify_ms is an equal share of its turn's wall_time (the file times turns, not steps); "
          "drafting, verification and prefill are not separated")


class SpecBenchError(TraceError):
    """A malformed answer file; one line: file, line, field."""


# ------------------------------------------------------------------ reading


def is_answer_file(head: bytes) -> bool:
    """True when the first JSON line looks like a Spec-Bench answer (question_id + choices), not a trace."""
    try:
        d = json.loads(head.split(b"\n", 1)[0])
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(d, dict) and "choices" in d and "question_id" in d and "schema" not in d


def _fail(where: str, fld: str, msg: str):
    raise SpecBenchError(f"{where}: field '{fld}': {msg}")


def _numbers(c: dict, k: str, where: str, integer: bool, lo: float = 0.0) -> list:
    v = c.get(k)
    if not isinstance(v, list):
        _fail(where, f"choices[0].{k}", f"expected a list, got {type(v).__name__}")
    for i, x in enumerate(v):
        ok = isinstance(x, int) if integer else isinstance(x, (int, float))
        if not ok or isinstance(x, bool) or x != x or x in (float("inf"), float("-inf")) or x < lo:
            _fail(where, f"choices[0].{k}[{i}]", f"expected a {'count' if integer else 'time'} ≥ {lo:g}, got {x!r}")
    return v


def parse_answers(data: bytes, name: str = "answers.jsonl") -> list[dict[str, Any]]:
    """Validated answer lines: question_id, category, model_id, turns, new_tokens, wall_time,
    accept_lengths, decoding_steps (or None). Never executes anything; one-line errors."""
    out = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        where = f"{name}: line {i}"
        try:
            d = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise SpecBenchError(f"{where}: invalid JSON ({getattr(e, 'msg', e)})") from None
        if not isinstance(d, dict) or not isinstance(d.get("choices"), list) or not d["choices"]:
            _fail(where, "choices", "expected a non-empty list (is this a Spec-Bench answer file?)")
        q = d.get("question_id")
        if q is not None and (isinstance(q, bool) or not isinstance(q, (int, str))):
            _fail(where, "question_id", f"expected an integer or a string, got {type(q).__name__}")
        c = d["choices"][0]
        if not isinstance(c, dict):
            _fail(where, "choices[0]", "expected an object")
        turns = c.get("turns")
        if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
            _fail(where, "choices[0].turns", "expected a list of answer texts")
        new_tokens = _numbers(c, "new_tokens", where, integer=True)
        wall = _numbers(c, "wall_time", where, integer=False)
        if "accept_lengths" not in c:
            _fail(where, "choices[0].accept_lengths", "missing: the file has nothing per step to import")
        acc = _numbers(c, "accept_lengths", where, integer=True, lo=1)
        if not len(turns) == len(new_tokens) == len(wall):
            _fail(where, "choices[0].new_tokens", f"{len(turns)} turns, {len(new_tokens)} new_tokens, "
                                                   f"{len(wall)} wall_time entries: expected one per turn")
        if sum(wall) <= 0:
            _fail(where, "choices[0].wall_time", "sums to 0 s: the question has no throughput")
        steps = c.get("decoding_steps")
        steps = _numbers(c, "decoding_steps", where, integer=True) if steps is not None else None
        out.append({"question_id": d.get("question_id"), "category": str(d.get("category") or ""),
                    "model_id": str(d.get("model_id") or ""), "turns": turns, "new_tokens": new_tokens,
                    "wall_time": [float(w) for w in wall], "accept_lengths": acc, "decoding_steps": steps,
                    "line": i})
    if not out:
        raise SpecBenchError(f"{name}: no answers in the file")
    return out


def read_answers(path: str | os.PathLike) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise SpecBenchError(f"{p}: no such answer file")
    return parse_answers(p.read_bytes(), p.name)


def split_turns(accept: list[int], new_tokens: list[int], steps: list[int] | None) -> tuple[list[list[int]], str]:
    """accept_lengths (all turns) → one list per turn, and how the split was found.

    Spec-Bench concatenates the turns' steps. In order of trust: cumulative accept lengths that hit
    each turn's cumulative new_tokens exactly; `decoding_steps` when it sums to the step count;
    else steps are dealt to a turn until its new_tokens are covered (said in the note)."""
    if len(new_tokens) <= 1:
        return [list(accept)], ""
    bounds, cum, k = [], 0, 0
    for t in range(len(new_tokens) - 1):
        target = sum(new_tokens[: t + 1])
        while k < len(accept) and cum < target:
            cum += accept[k]
            k += 1
        bounds.append((k, cum == target))
    if all(exact for _, exact in bounds):
        how = ""
    elif steps is not None and len(steps) == len(new_tokens) and sum(steps) == len(accept):
        bounds = [(sum(steps[: t + 1]), True) for t in range(len(steps) - 1)]
        how = "turns split by decoding_steps"
    else:
        how = "turns split where accept lengths first cover each turn's new_tokens (no exact boundary)"
    cuts = [0] + [b for b, _ in bounds] + [len(accept)]
    return [list(accept[a:b]) for a, b in zip(cuts, cuts[1:])], how


# ------------------------------------------------------------------ import


def answer_records(answers: list[dict[str, Any]], questions: dict | None = None, source: str = "",
                   command: str = "") -> tuple[list[dict[str, Any]], list[str]]:
    """Trace records (header, requests, steps, request ends) for parsed answers, and the notes
    (turn splits, cut steps) that the header also keeps."""
    notes: list[str] = []
    model_ids = sorted({a["model_id"] for a in answers if a["model_id"]})
    name = model_ids[0] if len(model_ids) == 1 else (", ".join(model_ids) or Path(source).stem or "spec-bench run")
    vanilla = all(x == 1 for a in answers for x in a["accept_lengths"])  # autoregressive: 1 token per step
    header = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": {"name": name, "vocab_size": None, "dtype": None, "device": None, "reduced_vocab": None},
        "draft": None if vanilla else {"name": "(not in the answer file)", "vocab_size": None, "dtype": None,
                                    "device": None, "reduced_vocab": None},
        "policy": {"name": FORMAT, "spec": f"specbench:{name}", "params": {}},
        # not in the file: absent keys read as unknown (a null temperature would claim a value)
        "verifier": None, "sampling": {},
        "max_new_tokens": None,
        "prompts": [{"request_id": i, "question_id": a["question_id"], "category": a["category"]}
                    for i, a in enumerate(answers)],
        "software": {}, "command": command, "prompts_file": None,
        "imported": {"format": FORMAT, "source": Path(source).name, "lacks": list(LACKS), "timing": TIMING,
                     "notes": notes},
    }
    records: list[dict[str, Any]] = [{"type": "header", "schema": "speclab.trace", "version": 1, **header}]
    for rid, a in enumerate(answers):
        q = (questions or {}).get(a["question_id"]) or {}
        records.append(request_record(rid, [], "\n\n".join(q.get("turns") or []),
                                      a["category"] or q.get("category", ""), a["question_id"], turns=q.get("turns")))
        per_turn, how = split_turns(a["accept_lengths"], a["new_tokens"], a["decoding_steps"])
        if how:
            notes.append(f"question {a['question_id']}: {how}")
        step = 0
        for t, (lengths, n_new, wall) in enumerate(zip(per_turn, a["new_tokens"], a["wall_time"])):
            emitted, cum = [], 0
            for x in lengths:  # our `emitted` stops at the turn's new_tokens, as the engine stops at EOS
                if cum >= n_new:
                    break
                emitted.append(min(x, n_new - cum))
                cum += emitted[-1]
            if len(emitted) < len(lengths):
                notes.append(f"question {a['question_id']} turn {t}: {len(lengths) - len(emitted)} steps past "
                             f"new_tokens={n_new} dropped")
            if cum < n_new:
                notes.append(f"question {a['question_id']} turn {t}: accept lengths sum to {cum} < new_tokens={n_new}")
            ms = wall * 1e3
            share = round(ms / len(emitted), 6) if emitted else 0.0
            for j, (x, e) in enumerate(zip(lengths, emitted)):
                last = j == len(emitted) - 1
                records.append({
                    "type": "step", "request_id": rid, "step": step, "context_len": None, "window_cap": None,
                    "window": None, "draft_tokens": None, "q_draft": None, "p_target": None, "accept_probs": None,
                    "draft_entropy": None, "accepted": x - 1, "emitted": e, "emitted_tokens": None,
                    "correction": None, "bonus": None, "stop_reason": "unknown", "t_draft_ms": 0.0,
                    # the last step takes the remainder, so a turn's steps sum to its wall time exactly
                    "t_verify_ms": max(0.0, ms - share * j) if last else share, "t_prefill_ms": 0.0,
                    "finished": None, "policy_fields": {"turn": t, "accept_length": x},
                    "all_drafts": None, "chosen": 0, "decisions": None})
                step += 1
        # `new_tokens` would have to count output ids, which the file has none of
        records.append(request_end_record(rid, [], None, round(sum(a["wall_time"]) * 1e3, 6),
                                          "\n\n".join(a["turns"]), new_tokens=None, turns=list(a["turns"]),
                                          specbench_new_tokens=list(a["new_tokens"])))
    return records, notes


def load_questions(path: str | os.PathLike) -> dict:
    """Spec-Bench question file → {question_id: {"category", "turns"}} (prompt text for the trace)."""
    out = {}
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                d = json.loads(line)
            except ValueError:
                raise SpecBenchError(f"{Path(path).name}: line {i}: invalid JSON") from None
            if isinstance(d, dict) and "question_id" in d:
                out[d["question_id"]] = {"category": d.get("category", ""), "turns": d.get("turns") or []}
    return out


def loads_answers(data: bytes, name: str = "answers.jsonl", questions: dict | None = None) -> Trace:
    """An answer file's bytes → a validated Trace (the app's upload path; nothing touches disk)."""
    records, _ = answer_records(parse_answers(data, name), questions, source=name)
    records.append({"type": "footer", "summary": summarize([r for r in records if r["type"] == "step"],
                                                           [r for r in records if r["type"] == "request_end"])})
    return build_trace(((f"{name}: answer record {i}", r) for i, r in enumerate(records)), source=name)


def import_answers(src: str | os.PathLike, out: str | os.PathLike, questions: str | os.PathLike | None = None,
                   command: str = "") -> dict[str, Any]:
    """Write `src` (answer file) as a trace at `out`; returns the trace summary."""
    q = load_questions(questions) if questions else None
    records, _ = answer_records(read_answers(src), q, source=str(src), command=command)
    with TraceWriter(out, {k: v for k, v in records[0].items() if k not in ("type", "schema", "version")}) as w:
        for r in records[1:]:
            w.write(r)
    return w.summary


# ------------------------------------------------------------------ export


def trace_answers(trace: Trace, model_id: str | None = None) -> list[dict[str, Any]]:
    """A trace as Spec-Bench answer lines (one per request with steps), in request order."""
    h = trace.header
    target = (h.get("target") or {}).get("name", "model")
    # an imported run keeps its own model id; ours are named by target and policy
    mid = model_id or (target if h.get("imported") else f"{target}-{(h.get('policy') or {}).get('spec', '')}")
    by_req: dict[int, list[dict]] = {}
    for s in trace.steps:
        by_req.setdefault(s["request_id"], []).append(s)
    out = []
    for rid, steps in sorted(by_req.items()):
        req, end = trace.requests.get(rid, {}), trace.ends.get(rid) or {}
        turns: dict[int, list[dict]] = {}
        for s in steps:  # imported traces remember their turns; our own requests are one turn each
            turns.setdefault(int((s.get("policy_fields") or {}).get("turn", 0)), []).append(s)
        texts = end.get("turns") or [end.get("output_text") or ""]
        groups = [turns[t] for t in sorted(turns)]
        if len(texts) != len(groups):
            texts = ["\n\n".join(texts)] + [""] * (len(groups) - 1)
        out.append({
            "question_id": req.get("question_id") if req.get("question_id") is not None else rid,
            "category": req.get("category") or "", "answer_id": f"speclab-{rid}", "model_id": mid,
            "choices": [{"index": 0, "turns": texts, "decoding_steps": [len(g) for g in groups],
                         "new_tokens": [sum(s["emitted"] for s in g) for g in groups],
                         "wall_time": [sum(s["t_draft_ms"] + s["t_verify_ms"] + s["t_prefill_ms"] for s in g) / 1e3
                                       for g in groups],
                         "accept_lengths": [s["emitted"] for g in groups for s in g]}],
            "tstamp": time.time()})
    return out


def write_answers(answers: Iterable[dict[str, Any]], path: str | os.PathLike) -> Path:
    p = Path(path)
    with atomic_path(p) as tmp:
        tmp.write_text("".join(json.dumps(a, ensure_ascii=False) + "\n" for a in answers), encoding="utf-8")
    return p
