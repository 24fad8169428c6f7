"""llama.cpp fork's `--spec-log-file` JSONL → speclab traces: one object per speculation round.

`llama-server … --spec-log-file spec.jsonl` (a llama.cpp fork's speculation logging, documented with
its `scripts/spec_log_analyze.py`) writes one line per round:

    {"ts_ms": 1703001234567, "slot_id": 0, "prompt_pos": 125, "round_id": 42,
     "draft":  {"n": 5, "stop_reason": "p_min" | "n_max" | "complete",
                "tokens": [{"pos": 0, "id": 1234, "p": 0.85, "entropy": 0.45, "top_k": [[1234, 0.85], …]}, …]},
     "verify": {"n_accepted": 3, "rej_pos": 3, "target_id": 7890},
     "timing": {"t_draft_us": 12500, "t_verify_us": 45000}}

`rej_pos` is the first rejected position (−1 when all were accepted), `target_id` the token the target
chose after the accepted prefix (the correction, or the bonus when all were accepted), `p` the draft's
probability of its token, `entropy` that of its top-k distribution, `top_k` up to ten [id, p] pairs.

That is nearly our step record, so a round becomes one verify step with its draft kept: window = n,
draft_tokens = the ids, q_draft = the p's, draft_entropy = the entropies, accepted = n_accepted,
emitted_tokens = the accepted ids + target_id (the correction when n_accepted < n, else the bonus),
t_draft_ms / t_verify_ms from the µs, the draft's stop reason as the step's. Per-step and
per-position acceptance are exact. The target's probabilities are not logged (p_target and
accept_probs lack), nor the prompt, the prefill, or steps where nothing was drafted.

Requests: rounds of one slot in file order belong to one request until that slot's `prompt_pos` goes
back (a new prompt in the slot); a note says requests are inferred. Checks (one line naming the line
and field): n = len(tokens) ≤ 1024 with pos 0 … n−1; 0 ≤ n_accepted ≤ n; rej_pos = n_accepted when
n_accepted < n, else −1; ids are token ids; p and top-k probabilities in [0, 1]; entropies finite in
[0, 32]; times finite in [0, 1 h].
"""

from __future__ import annotations

import math
from typing import Any

from engine.interop.peer import (Budget, PeerError, PeerRequest, PeerStep, as_count, count, fail, first_json,
                                 json_lines, number, peer_records)
from engine.trace.check import MAX_ENTROPY, MAX_WINDOW, TOKEN_MAX

FORMAT = "llamacpp-speclog"
STOPS = ("p_min", "n_max", "complete")
HAS = ("draft_tokens", "q_draft", "draft_entropy", "emitted_tokens", "correction", "bonus", "t_draft_ms")


def is_round(d: Any) -> bool:
    return (isinstance(d, dict) and isinstance(d.get("draft"), dict) and isinstance(d.get("verify"), dict)
            and "n_accepted" in d["verify"])


def is_speclog(head: bytes) -> bool:
    return is_round(first_json(head))


def _obj(d: dict, k: str, where: str) -> dict:
    if not isinstance(d.get(k), dict):
        fail(where, k, f"expected an object, got {type(d.get(k)).__name__}")
    return d[k]


def _prob(v: Any, where: str, fld: str, hi: float = 1.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= hi:
        fail(where, fld, f"expected a finite number in [0, {hi:g}], got {v!r}"[:120])
    return float(v)


def round_step(d: Any, where: str) -> tuple[PeerStep, int, int]:
    """One round → (its step, slot id, prompt position)."""
    if not is_round(d):
        fail(where, "verify.n_accepted", "missing: not a spec-log round (draft, verify, timing)")
    dr, ve = d["draft"], d["verify"]
    tm = d.get("timing") if d.get("timing") is not None else {}
    if not isinstance(tm, dict):
        fail(where, "timing", "expected an object")
    toks = dr.get("tokens")
    if not isinstance(toks, list) or len(toks) > MAX_WINDOW:
        fail(where, "draft.tokens", f"expected a list of at most {MAX_WINDOW} drafted tokens")
    n = count(dr, "n", where, 0, MAX_WINDOW, prefix="draft.")
    if n != len(toks):
        fail(where, "draft.n", f"{n}, but draft.tokens has {len(toks)}")
    ids, ps, ents = [], [], []
    for i, t in enumerate(toks):
        f = f"draft.tokens[{i}]"
        if not isinstance(t, dict):
            fail(where, f, "expected an object")
        if count(t, "pos", where, 0, MAX_WINDOW, prefix=f + ".") != i:
            fail(where, f + ".pos", f"{t['pos']}, expected {i} (positions in order)")
        ids.append(count(t, "id", where, 0, TOKEN_MAX - 1, prefix=f + "."))
        ps.append(_prob(t.get("p"), where, f + ".p"))
        ents.append(_prob(t.get("entropy"), where, f + ".entropy", MAX_ENTROPY))
        tk = t.get("top_k", [])
        if not isinstance(tk, list) or len(tk) > 64:
            fail(where, f + ".top_k", "expected a list of at most 64 [token id, probability] pairs")
        for j, pair in enumerate(tk):
            if not isinstance(pair, list) or len(pair) != 2:
                fail(where, f"{f}.top_k[{j}]", "expected a [token id, probability] pair")
            as_count(pair[0], f"{f}.top_k[{j}][0]", where, 0, TOKEN_MAX - 1)
            _prob(pair[1], where, f"{f}.top_k[{j}][1]")
    stop = dr.get("stop_reason")
    if stop not in STOPS:
        fail(where, "draft.stop_reason", f"expected one of {', '.join(STOPS)}, got {stop!r}"[:120])
    a = count(ve, "n_accepted", where, 0, n, prefix="verify.")
    rej = ve.get("rej_pos")
    if type(rej) is not int or rej != (a if a < n else -1):
        fail(where, "verify.rej_pos", f"{rej!r}, but n_accepted = {a} of {n} gives {a if a < n else -1}")
    target = count(ve, "target_id", where, 0, TOKEN_MAX - 1, prefix="verify.")
    t_draft = number(tm, "t_draft_us", where, hi=3.6e9, prefix="timing.")
    t_verify = number(tm, "t_verify_us", where, hi=3.6e9, prefix="timing.")
    slot = count(d, "slot_id", where, 0, 1 << 16, optional=True) or 0
    pos = count(d, "prompt_pos", where, 0, 1 << 24, optional=True)
    rec = {"draft_tokens": ids, "q_draft": ps, "draft_entropy": ents, "emitted_tokens": ids[:a] + [target],
           "correction": target if a < n else None, "bonus": target if a == n else None,
           "t_draft_ms": (t_draft or 0.0) / 1e3, "stop_reason": stop}
    step = PeerStep(n, a, a + 1, t_verify_ms=(t_verify or 0.0) / 1e3, record=rec,
                    fields={k: d[k] for k in ("round_id", "ts_ms", "prompt_pos") if type(d.get(k)) is int})
    return step, slot, -1 if pos is None else pos


def speclog_records(data: bytes, name: str, command: str = "") -> list[dict[str, Any]]:
    """Trace records of a spec-log file (module docstring)."""
    left, reqs, open_by_slot, last_pos = Budget(), [], {}, {}
    for where, d in json_lines(data, name, "spec-log rounds"):
        step, slot, pos = round_step(d, where)
        left.take(1, where, "round_id")
        r = open_by_slot.get(slot)
        if r is None or (pos >= 0 and pos < last_pos.get(slot, -1)):  # a slot's position going back: a new prompt
            r = PeerRequest([], category="", question_id=None, ordered=True, reported={"slot_id": slot})
            reqs.append(r)
            open_by_slot[slot] = r
        r.steps.append(step)
        last_pos[slot] = pos
    if not reqs:
        raise PeerError(f"{name}: no spec-log rounds in the file")
    for i, r in enumerate(reqs):
        r.question_id = i
    notes = [f"{sum(len(r.steps) for r in reqs)} rounds in {len(reqs)} requests, inferred from slot_id and "
             f"prompt_pos (a slot's position going back starts a new prompt); the prefill and rounds that drafted "
             f"nothing are not logged, so the requests' outputs are incomplete"]
    return peer_records(FORMAT, reqs, engine={"name": "llama.cpp", "kind": "spec-log"}, target="(llama.cpp model)",
                        draft="(llama.cpp draft)", spec="llamacpp-speclog",
                        lacks=["prompt_ids", "output_ids", "context_len", "t_prefill_ms", "request boundaries"],
                        timing="t_draft_ms and t_verify_ms per round from timing.t_draft_us / t_verify_us",
                        notes=notes, source=name, command=command, has=HAS)
