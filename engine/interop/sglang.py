"""SGLang `meta_info` records → speclab traces.

SGLang's `/generate` returns, per request, `{"text": …, "meta_info": {…}}`; with speculative decoding
`meta_info` has `spec_verify_ct` (verify forward passes V) beside `completion_tokens` (C),
`prompt_tokens`, `finish_reason` and `e2e_latency` (seconds). SGLang's own accept length is C / V:
it counts every output token against the verify passes, the first token and the bonus included
(scheduler_metrics_mixin: `spec_num_accepted_tokens += accepted + bs` per verify). Import keeps that
definition: V steps whose emitted counts are an even share of C (so emitted per call = C / V, SGLang's
accept length, exactly), accepted = emitted − 1. Windows are unknown (tree drafts: SGLang verifies a
tree of `speculative_num_draft_tokens`), so the acceptance rate is too.

`spec_accept_histogram`, where a build returns it (not every one does), replaces the even split when it
is consistent with the counts: Σ h = V and Σ_j j·h_j = C (index = accept length) or
Σ_j (j + 1)·h_j = C (index = accepted drafts); otherwise the record is refused. Accepted
`spec_accept_length` / `spec_accept_rate`, when present, must equal C / V (1e-6).

Records: one JSON object per line (or one JSON list), each `{"meta_info": {…}, "text": …}` or a bare
`meta_info` object; optional `question_id` / `category` beside them are kept.
"""

from __future__ import annotations

import math
from typing import Any

from engine.interop.peer import (MAX_STEPS, PER_STEP, Budget, PeerError, PeerRequest, PeerStep, check_finished, count,
                                 counts, even_split, fail, first_json, ident, json_lines, label, number,
                                 peer_records, sampling_of)
from engine.trace.check import MAX_REQUEST_MS, MAX_WINDOW

FORMAT = "sglang"
FINISH = {"length": "max_new_tokens", "stop": "eos", "abort": None}
LACKS = ["window", "prompt_ids", "output_ids", "t_draft_ms", "t_prefill_ms"]


def meta_of(d: Any) -> dict | None:
    if isinstance(d, dict) and isinstance(d.get("meta_info"), dict):
        return d["meta_info"]
    return d if isinstance(d, dict) and "spec_verify_ct" in d else None


def is_sglang_record(d: Any) -> bool:
    m = meta_of(d)
    return m is not None and "spec_verify_ct" in m


def is_sglang(head: bytes) -> bool:
    return is_sglang_record(first_json(head))


def _histogram(m: dict, V: int, C: int, where: str) -> list[int] | None:
    """Per-step emitted counts from `spec_accept_histogram`, or None when the record has none."""
    h = counts(m, "spec_accept_histogram", where, hi=MAX_STEPS, prefix="meta_info.", max_len=MAX_WINDOW + 2,
               optional=True)
    if h is None:
        return None
    if sum(h) != V:
        fail(where, "meta_info.spec_accept_histogram", f"counts {sum(h)} steps, but spec_verify_ct is {V}")
    if sum(j * x for j, x in enumerate(h)) == C:
        return [j for j, x in enumerate(h) for _ in range(x)]  # index = accept length (emitted)
    if sum((j + 1) * x for j, x in enumerate(h)) == C:
        return [j + 1 for j, x in enumerate(h) for _ in range(x)]  # index = accepted drafts
    fail(where, "meta_info.spec_accept_histogram", f"agrees with neither reading of completion_tokens = {C}")


def parse_record(d: Any, where: str, left: Budget | None = None) -> tuple[PeerRequest, bool]:
    m = meta_of(d)
    if m is None:
        fail(where, "meta_info", "missing: not an SGLang response")
    if "spec_verify_ct" not in m:
        fail(where, "meta_info.spec_verify_ct", "missing (was speculative decoding on?)")
    V = count(m, "spec_verify_ct", where, lo=0, hi=MAX_STEPS, prefix="meta_info.")
    C = count(m, "completion_tokens", where, lo=0, prefix="meta_info.")
    if C < V:
        fail(where, "meta_info.completion_tokens", f"{C} tokens < spec_verify_ct {V}: every verify emits ≥ 1")
    if C == 0:
        fail(where, "meta_info.completion_tokens", "no output tokens")
    n = V or C  # no verify passes: an autoregressive run, one call per token
    (left or Budget()).take(n, where, "meta_info.spec_verify_ct" if V else "meta_info.completion_tokens")
    emitted = _histogram(m, V, C, where) if V else None
    exact = emitted is not None or V == 0
    emitted = emitted if emitted is not None else even_split(C, n)
    if max(emitted) - 1 > MAX_WINDOW:
        fail(where, "meta_info.completion_tokens", f"{C} tokens over {n} verify passes: more than {MAX_WINDOW} "
                                                   f"accepted per pass")
    for k in ("spec_accept_length",):
        v = number(m, k, where, 0.0, MAX_WINDOW + 1.0, prefix="meta_info.")
        if v is not None and V and not math.isclose(v, C / V, rel_tol=1e-6):
            fail(where, f"meta_info.{k}", f"states {v}, completion_tokens / spec_verify_ct = {C / V}")
    # SGLang's rate (accepted drafts / drafted) needs the tree's size, which the record lacks: range only
    number(m, "spec_accept_rate", where, 0.0, 1.0, prefix="meta_info.")
    lat = number(m, "e2e_latency", where, 0.0, MAX_REQUEST_MS / 1e3, prefix="meta_info.")
    steps = [PeerStep(None, e - 1, e) for e in emitted]
    if lat:
        share = round(lat * 1e3 / n, 6)
        for i, s in enumerate(steps):
            s.t_verify_ms = max(0.0, lat * 1e3 - share * i) if i == n - 1 else share
        if share > 3_600_000.0:
            fail(where, "meta_info.e2e_latency", f"{lat} s makes a step longer than an hour")
    fr = m.get("finish_reason")
    fin = check_finished(fr.get("type") if isinstance(fr, dict) else fr, where, "meta_info.finish_reason", FINISH)
    text = d.get("text") if isinstance(d, dict) and "meta_info" in d else None
    if text is not None and type(text) is not str:
        fail(where, "text", f"expected a string, got {type(text).__name__}")
    qid = ident(d, "question_id", where) if "question_id" in d else ident(m, "id", where, prefix="meta_info.")
    return PeerRequest(steps, output_text=text or "", category=label(d, "category", where), question_id=qid,
                       finished=fin,
                       wall_ms=lat * 1e3 if lat is not None else None, ordered=False,
                       reported={k: m.get(k) for k in ("id", "prompt_tokens", "completion_tokens", "spec_verify_ct",
                                                       "spec_accept_length", "spec_accept_rate",
                                                       "spec_accept_histogram", "e2e_latency") if k in m}), exact


def sglang_records(data: bytes, name: str, command: str = "") -> list[dict[str, Any]]:
    reqs, all_exact, meta, left = [], True, {}, Budget()
    for where, d in json_lines(data, name, "SGLang responses"):
        if isinstance(d, dict) and d.get("type") == "speclab.peer_header":
            meta = d
            continue
        r, exact = parse_record(d, where, left)
        reqs.append(r)
        all_exact = all_exact and exact
    if not reqs:
        raise PeerError(f"{name}: no SGLang responses in the file")
    spec = any(r.reported.get("spec_verify_ct") for r in reqs)
    lacks = LACKS + ([] if all_exact else [PER_STEP]) + ["step order"]
    notes = [] if all_exact else ["no spec_accept_histogram: per-step emitted counts are even shares of "
                                  "completion_tokens over spec_verify_ct (SGLang's accept length C / V is exact)"]
    return peer_records(FORMAT, reqs, engine={"name": "sglang", "version": meta.get("version")},
                        target=str(meta.get("target") or "(sglang model)"),
                        draft=str(meta.get("draft") or "(sglang draft)") if spec else None,
                        spec="sglang" + (f":{meta['algorithm']}" if meta.get("algorithm") else ""), lacks=lacks,
                        timing="e2e_latency split evenly over the verify passes (prefill not separated)",
                        notes=notes, source=name, command=command, sampling=sampling_of(meta),
                        created=meta.get("created"))
