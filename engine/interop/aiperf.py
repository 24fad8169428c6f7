"""AIPerf per-request records (`profile_export.jsonl`, `aiperf profile --export-level records`) → speclab traces.

AIPerf (NVIDIA's benchmarking client) writes one JSON object per request:

    metadata                  x_request_id, conversation_id, turn_index, request_start_ns, request_end_ns,
                              benchmark_phase ("warmup" | "profiling"), was_cancelled, …
    metrics                   {tag: {"value": v, "unit": u}}: time_to_first_token (ms), request_latency (ms),
                              output_sequence_length (tokens), input_sequence_length, usage_completion_tokens, …
                              and, when the server reported acceptance, spec_decode_acceptance_length (the
                              request's mean acceptance length), spec_decode_draft_acceptance_rate, …
    error                     null, or what failed
    spec_decode_acceptance    AIPerf's engine-neutral record (absent when the server reported none):
        engine                            vllm | sglang | tensorrt_llm
        mean_acceptance_length            1 + num_accepted_draft_tokens / num_spec_steps
        draft_acceptance_rate             num_accepted_draft_tokens / num_draft_tokens
        acceptance_histogram              sparse {accepted drafts: steps}, keys as JSON strings, bonus excluded
        num_accepted_draft_tokens, num_draft_tokens, num_spec_steps
        num_spec_tokens                   K, or null for variable-length drafting
        completion_tokens                 the response's usage count, or null
        per_step_accepted / per_step_drafted   ordered, one per verify step (vLLM `detailed` only), or null

AIPerf reports acceptance length two ways, and so does speclab for every import (engine.interop.diagnose
`acceptance_lengths`): **Acceptance Length** (`spec_decode_acceptance_length`, each request's mean, then
averaged over requests) and **Token-Weighted Acceptance Length**
(`spec_decode_token_weighted_acceptance_length`, 1 + Σ accepted ÷ Σ verify steps over the run).

The acceptance record is vLLM's `spec_decode_metrics` with a sparse histogram, so it is checked by the
vLLM importer's rules (engine.interop.vllm `spec_metrics`: counts in range, histogram = per-step counts,
stated mean and rate equal to the counts'), and its steps are built the same way (`_steps`): a prefill
step, the verify steps (in order when per-step arrays are there, else from the histogram), the steps that
drafted nothing appended, a cut at the budget on the last step. The output length is the server's
(`completion_tokens`, else the `usage_completion_tokens` metric); the client-tokenized
`output_sequence_length` is used only when neither is there, and then only if it agrees with the verify
steps (a different tokenizer may count differently: the note says it was set aside).

Left out, each counted in a note: warmup records, cancelled requests and requests that failed (`error`).
A file in which no request carries `spec_decode_acceptance` is a run without speculation: every step
drafts nothing (an AR baseline, engine.interop.baseline). Times: time_to_first_token → step 0's prefill;
request_latency − TTFT split evenly over the later steps; the run's date is its first request's start.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from engine.interop import vllm
from engine.interop.peer import (MAX_STEPS, Budget, PeerError, PeerRequest, as_count, fail, ident, json_lines, label,
                                 peer_records)
from engine.trace.check import MAX_CONTEXT, MAX_MS, MAX_REQUEST_MS, MAX_WINDOW

FORMAT = "aiperf"
UNIT_MS = {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "ns": 1e-6}
PHASES = ("profiling", "warmup")


def is_record(d: Any) -> bool:
    """An AIPerf profile_export.jsonl record: a `metadata` object beside a `metrics` object of {value, unit}."""
    return (isinstance(d, dict) and isinstance(d.get("metadata"), dict) and isinstance(d.get("metrics"), dict)
            and "choices" not in d and "spec_decode_metrics" not in d)


def _metric(metrics: dict, tag: str, where: str, hi: float, unit_kind: str) -> float | None:
    """metrics[tag]["value"] in ms (unit_kind "time") or as stated (tokens, ratio); None when absent."""
    m = metrics.get(tag)
    if m is None:
        return None
    if not isinstance(m, dict) or "value" not in m:
        fail(where, f"metrics.{tag}", f"expected {{\"value\": …, \"unit\": …}}, got {type(m).__name__}")
    v, unit = m["value"], m.get("unit")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        fail(where, f"metrics.{tag}.value", f"expected a finite number ≥ 0, got {str(v)[:40]!r}")
    if unit_kind == "time":
        if unit is not None and unit not in UNIT_MS:
            fail(where, f"metrics.{tag}.unit", f"unknown time unit {str(unit)[:20]!r} (one of {', '.join(UNIT_MS)})")
        v = v * UNIT_MS.get(unit or "ms", 1.0)
    if v > hi:
        fail(where, f"metrics.{tag}.value", f"{v:g} exceeds {hi:g}")
    return float(v)


def acceptance(a: Any, where: str) -> dict[str, Any]:
    """AIPerf's spec_decode_acceptance → vLLM's spec_decode_metrics shape, checked by vllm.spec_metrics.
    Returns the validated metrics plus "fixed_k": whether num_spec_tokens was stated."""
    p = "spec_decode_acceptance."
    if not isinstance(a, dict):
        fail(where, p.rstrip("."), f"expected an object, got {type(a).__name__}")
    h = a.get("acceptance_histogram")
    if not isinstance(h, dict):
        fail(where, p + "acceptance_histogram", f"expected an object {{accepted: steps}}, got {type(h).__name__}")
    if len(h) > MAX_WINDOW + 1:
        fail(where, p + "acceptance_histogram", f"{len(h)} buckets exceeds the limit {MAX_WINDOW + 1}")
    hist: dict[int, int] = {}
    for k, v in h.items():
        if not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) <= 5 and int(k) <= MAX_WINDOW):
            fail(where, f"{p}acceptance_histogram.{str(k)[:20]}", "expected a key that is an accepted count 0 … "
                                                                  f"{MAX_WINDOW}")
        if int(k) in hist:
            fail(where, f"{p}acceptance_histogram.{k}", "the same accepted count twice")
        hist[int(k)] = as_count(v, f"{p}acceptance_histogram.{k}", where, 0, MAX_STEPS)
    K = a.get("num_spec_tokens")
    fixed = K is not None
    drafted = a.get("per_step_drafted")
    if not fixed:  # variable-length drafting: the largest draft the record shows bounds K
        n = as_count(a.get("num_spec_steps"), p + "num_spec_steps", where, 0, MAX_STEPS)
        D = as_count(a.get("num_draft_tokens"), p + "num_draft_tokens", where, 0, MAX_CONTEXT)
        top = max([*hist, 0])
        if type(drafted) is list and drafted and all(type(x) is int for x in drafted):
            top = max(top, max(drafted))
        K = min(MAX_WINDOW, max(top, -(-D // n) if n else 0))
    elif not (type(K) is int and 0 <= K <= MAX_WINDOW):
        fail(where, p + "num_spec_tokens", f"expected a count in [0, {MAX_WINDOW}] or null, got {str(K)[:40]!r}")
    if any(j > K for j in hist):
        fail(where, p + "acceptance_histogram", f"an accepted count above num_spec_tokens = {K}")
    m = {k: a.get(k) for k in vllm.SPEC_KEYS if k != "acceptance_histogram"}
    m.update(num_spec_tokens=K, acceptance_histogram=[hist.get(j, 0) for j in range(K + 1)],
             per_step_accepted=a.get("per_step_accepted"), per_step_drafted=drafted)
    s = vllm.spec_metrics(m, where, p)
    s["raw"] = dict(a)
    s["fixed_k"] = fixed
    return s


def _request(d: dict, where: str, budget: Budget, any_spec: bool, notes: list[str]) -> PeerRequest:
    metrics, meta = d["metrics"], d["metadata"]
    a = d.get("spec_decode_acceptance")
    s = acceptance(a, where) if a is not None else dict(vllm.AUTOREGRESSIVE, fixed_k=True)
    if a is None and any_spec:
        notes.append(f"{where.split(': ', 1)[-1]}: no spec_decode_acceptance (no verify steps reported): "
                     "every step drafted nothing")
    n_out, fld = None, ""
    if a is not None and a.get("completion_tokens") is not None:
        n_out = as_count(a["completion_tokens"], "spec_decode_acceptance.completion_tokens", where, 0, MAX_CONTEXT)
        fld = "spec_decode_acceptance.completion_tokens"
    else:
        u = _metric(metrics, "usage_completion_tokens", where, MAX_CONTEXT, "count")
        if u is not None:
            n_out, fld = as_count(u, "metrics.usage_completion_tokens.value", where, 0, MAX_CONTEXT), \
                "metrics.usage_completion_tokens"
    if n_out is None:
        osl = _metric(metrics, "output_sequence_length", where, MAX_CONTEXT, "count")
        if osl is not None:
            n_out = as_count(osl, "metrics.output_sequence_length.value", where, 0, MAX_CONTEXT)
            fld = "metrics.output_sequence_length"
            if n_out < 1 + s["A"] + s["n"] - (s["acc"][-1] if s["acc"] else max(
                    [j for j, x in enumerate(s["hist"]) if x] or [0])):
                notes.append(f"{where.split(': ', 1)[-1]}: output_sequence_length {n_out} (client-tokenized) is "
                             "shorter than the verify steps allow: set aside, no undrafted steps added")
                n_out = None
    if n_out is None and not any_spec:
        fail(where, "metrics.output_sequence_length", "missing: a run without speculation needs its output length")
    planned = 1 + s["n"] + (max(0, n_out - 1 - s["A"] - s["n"]) if n_out is not None else 0)
    budget.take(planned, where, fld or "spec_decode_acceptance.num_spec_steps")
    if not s["fixed_k"] and s["acc"] is None:
        s = dict(s, D=-1)  # no fixed K and no per-step arrays: windows unknown (vllm._steps: fixed iff D = n·K)
    steps, ordered, note = vllm._steps(s, n_out, where, fld)
    if note:
        notes.append(f"{where.split(': ', 1)[-1]}: {note}")
    finished = None
    if steps[-1].cut:
        finished = "eos"  # AIPerf records no finish reason; a step cut short ended its request
    ttft = _metric(metrics, "time_to_first_token", where, MAX_MS, "time")
    lat = _metric(metrics, "request_latency", where, MAX_REQUEST_MS, "time")
    if ttft is not None and lat is not None and lat < ttft:
        fail(where, "metrics.request_latency", f"{lat:g} ms < time_to_first_token {ttft:g} ms")
    wall = vllm._times(steps, {"time_to_first_token_ms": ttft,
                               "generation_time_ms": None if lat is None or ttft is None else lat - ttft},
                       where) if ttft is not None or lat is not None else None
    rid = ident(meta, "x_request_id", where, prefix="metadata.")
    return PeerRequest(steps, category=label(meta, "category", where, prefix="metadata."),
                       question_id=rid if rid is not None else ident(meta, "conversation_id", where, "metadata."),
                       finished=finished, wall_ms=wall, ordered=ordered,
                       reported={"request_id": rid, **({} if a is None else s["raw"])})


def aiperf_records(data: bytes, name: str, command: str = "") -> list[dict[str, Any]]:
    """Trace records for an AIPerf profile_export.jsonl (see the module docstring)."""
    rows = json_lines(data, name, "AIPerf records")
    kept, skipped = [], {"warmup": 0, "cancelled": 0, "error": 0}
    for where, d in rows:
        if not is_record(d):
            fail(where, "metadata", "missing: not an AIPerf profile_export.jsonl record (metadata + metrics)")
        meta = d["metadata"]
        phase = meta.get("benchmark_phase", "profiling")
        if phase not in PHASES:
            fail(where, "metadata.benchmark_phase", f"expected 'profiling' or 'warmup', got {str(phase)[:40]!r}")
        if meta.get("was_cancelled") not in (None, False, True):
            fail(where, "metadata.was_cancelled", "expected true or false")
        if phase == "warmup":
            skipped["warmup"] += 1
        elif meta.get("was_cancelled"):
            skipped["cancelled"] += 1
        elif d.get("error") is not None:
            skipped["error"] += 1
        else:
            kept.append((where, d))
    if not kept:
        raise PeerError(f"{name}: no completed profiling requests in the file")
    any_spec = any(d.get("spec_decode_acceptance") is not None for _, d in kept)
    notes = [f"{n} {k} record{'s' if n > 1 else ''} left out" for k, n in skipped.items() if n]
    budget, reqs, engines, ks = Budget(), [], set(), set()
    for where, d in kept:
        reqs.append(_request(d, where, budget, any_spec, notes))
        a = d.get("spec_decode_acceptance")
        if a is not None:
            engines.add(str(a.get("engine") or "unknown")[:40])
            ks.add(a.get("num_spec_tokens"))
    if len(engines) > 1:
        raise PeerError(f"{name}: records from several engines ({', '.join(sorted(engines))}): one run per file")
    starts = [d["metadata"].get("request_start_ns") for _, d in kept]
    starts = [x for x in starts if type(x) is int and 0 < x < 1 << 63]
    created = (datetime.fromtimestamp(min(starts) / 1e9, timezone.utc).isoformat(timespec="seconds")
               if starts else None)
    engine = engines.pop() if engines else "unknown"
    K = ks.pop() if len(ks) == 1 else None
    detailed = all(r.ordered for r in reqs)
    timed = any(r.wall_ms is not None for r in reqs)
    lacks = ["t_draft_ms", "prompt_ids", "output_ids"] + ([] if detailed else ["step order"]) + \
        ([] if timed else ["t_verify_ms", "t_prefill_ms"])
    return peer_records(FORMAT, reqs, engine={"name": "aiperf", "server": engine,
                                              "level": "detailed" if detailed else "summary"},
                        target="(aiperf target)", draft="(aiperf draft)" if any_spec else None,
                        spec=f"aiperf:{engine}:" + (f"K={K}" if K is not None else "K=variable") if any_spec
                        else "aiperf:autoregressive", lacks=lacks,
                        timing=("time_to_first_token → step 0's prefill; request_latency − TTFT split evenly over "
                                "the later steps" if timed else "no times in the records: every time is 0"),
                        notes=notes, source=name, command=command, created=created)
