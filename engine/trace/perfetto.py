"""A decode trace's step timings as a Chrome / Perfetto trace-event file (open it in ui.perfetto.dev
or chrome://tracing).

Format (the JSON "traceEvents" array of the Chrome trace-event spec): one complete event
(`"ph": "X"`) per timed phase, with `ts` and `dur` in microseconds,

    {"name": "draft",  "ph": "X", "ts": t,      "dur": 1000·t_draft_ms,  "pid": request_id, "tid": 1, "args": {...}}
    {"name": "verify", "ph": "X", "ts": t + dur, "dur": 1000·t_verify_ms, "pid": request_id, "tid": 2, ...}

so every prompt (request) is a process with one track (thread) for drafting and one for verification;
step 0's prompt prefill, when recorded, is a third track that ends where step 0 begins. `args`
carries the step index and the step's window / accepted / emitted counts. Metadata events
(`"ph": "M"`) name the processes and tracks.

Placement: the trace records durations, not wall-clock start times, so each request's phases are
laid end to end in the order the engine ran them — prefill, then draft → verify per step — and the
requests follow one another in request order, as `engine.run.run_requests` decodes them. Gaps the
engine did not time (tokenizer, trace writing) are therefore left out; per track, events never
overlap and their start times only increase.

Pure: trace in, dict out (`json.dumps` it). No torch.
"""

from __future__ import annotations

from typing import Any

US_PER_MS = 1000.0
TRACKS = {"prefill": 0, "draft": 1, "verify": 2}  # tid per phase; draft and verify are the two per-step tracks


def _meta(name: str, pid: int, tid: int | None, value: str, sort: int | None = None) -> list[dict[str, Any]]:
    ev = {"name": name, "ph": "M", "pid": pid, "args": {"name": value}}
    if tid is not None:
        ev["tid"] = tid
    out = [ev]
    if sort is not None:
        out.append({"name": name.replace("_name", "_sort_index"), "ph": "M", "pid": pid,
                    **({"tid": tid} if tid is not None else {}), "args": {"sort_index": sort}})
    return out


def to_perfetto(trace) -> dict[str, Any]:
    """`engine.trace.format.Trace` → {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.

    Durations are exactly the trace's `t_draft_ms` / `t_verify_ms` / `t_prefill_ms` × 1000 (µs);
    start times are running sums of them (see the module docstring)."""
    by_req: dict[int, list[dict[str, Any]]] = {}
    for s in trace.steps:
        by_req.setdefault(s["request_id"], []).append(s)
    events: list[dict[str, Any]] = []
    clock = 0.0  # µs since the first request started, summing only timed phases
    for rid in sorted(set(trace.requests) | set(by_req)):
        req = trace.requests.get(rid, {})
        label = f"request {rid}" + (f" · {req['category']}" if req.get("category") else "")
        events += _meta("process_name", rid, None, label, sort=rid)
        steps = sorted(by_req.get(rid, []), key=lambda s: s["step"])
        has_prefill = any(s.get("t_prefill_ms") for s in steps)
        for phase, tid in TRACKS.items():
            if phase != "prefill" or has_prefill:
                events += _meta("thread_name", rid, tid, phase, sort=tid)
        for s in steps:
            common = {"step": s["step"], "window": s["window"], "accepted": s["accepted"], "emitted": s["emitted"],
                      "context_len": s["context_len"]}
            if s.get("t_prefill_ms"):
                dur = s["t_prefill_ms"] * US_PER_MS
                events.append({"name": "prefill", "cat": "prefill", "ph": "X", "ts": clock, "dur": dur, "pid": rid,
                               "tid": TRACKS["prefill"],
                               "args": {"step": s["step"], "prompt_tokens": s["context_len"]}})
                clock += dur
            dur = s["t_draft_ms"] * US_PER_MS
            events.append({"name": "draft", "cat": "draft", "ph": "X", "ts": clock, "dur": dur, "pid": rid,
                           "tid": TRACKS["draft"], "args": {**common, "stop_reason": s["stop_reason"]}})
            clock += dur
            dur = s["t_verify_ms"] * US_PER_MS
            events.append({"name": "verify", "cat": "verify", "ph": "X", "ts": clock, "dur": dur, "pid": rid,
                           "tid": TRACKS["verify"], "args": common})
            clock += dur
    h = trace.header
    other = {"schema": h.get("schema"), "target": (h.get("target") or {}).get("name"),
             "draft": (h.get("draft") or {}).get("name"), "policy": (h.get("policy") or {}).get("spec"),
             "verifier": h.get("verifier"), "source": trace.source,
             "placement": "phases laid end to end per request, requests in order (durations are measured)"}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}
