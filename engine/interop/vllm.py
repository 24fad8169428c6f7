"""vLLM per-request speculative-decoding metrics → speclab traces.

vLLM (≥ 0.32, engine argument `per_request_spec_decode_metrics="summary" | "detailed"`) keeps, per
sequence (`vllm/v1/metrics/stats.py`, `RequestSpecDecodeMetrics.to_dict`):

    num_spec_tokens              K, the configured `num_speculative_tokens`
    acceptance_histogram         h_j = verify steps that accepted exactly j drafts (length K + 1)
    num_spec_steps               Σ_j h_j: steps that carried drafts (a step that drafted nothing is not one)
    num_accepted_draft_tokens    Σ_j j·h_j (bonus excluded)
    num_draft_tokens             drafted tokens
    mean_acceptance_length       1 + accepted / steps (bonus included; 1.0 with no steps)
    draft_acceptance_rate        accepted / drafted (0.0 with none)
    per_step_accepted/_drafted   the same per verify step, in order (`detailed` only)

Two ways users hold them, both read here, one record per line (or one JSON list):

  offline   {"request_id", "prompt_token_ids", "token_ids", "spec_decode_metrics": to_dict(), …}
            — the snippet in docs/interop.md writes it from `LLM.generate` outputs;
  served    OpenAI-API responses of `vllm serve --per-request-spec-decode-metrics detailed`:
            `metrics.speculative_decoding` (the same keys) beside `metrics.time_to_first_token_ms`,
            `generation_time_ms`, `mean_itl_ms`; `usage.completion_tokens`; `choices[0]`.

Steps of a request: step 0 is the prefill call (window 0, emits the first token); then one step per
verify step (window = drafted, accepted, emitted = accepted + 1); then the steps that drafted
nothing, which vLLM does not record in order — `n_out − 1 − Σ(accepted + 1)` of them, appended
(window 0, emitted 1). vLLM counts accepted drafts before it cuts an output at the token budget or
a stop, so when Σ(accepted + 1) + 1 > n_out the last step emits the remainder and finishes the
request — with the record's finish reason, or, where it has none, 'max_new_tokens' when n_out is the
header's max_tokens and 'eos' otherwise (`cut_finish`). A summary record has
no per-step order: its steps come from the histogram (window K when drafted = steps · K).

Checks (one line naming the record and field on failure): every count a whole number in range;
Σh = steps, Σj·h_j = accepted ≤ drafted; per-step arrays of one length equal to steps, accepted ≤
drafted on every step, sums equal to the totals, histogram equal to the per-step counts; the stated
mean acceptance length and rate equal those recomputed (1e-9).

Times: served responses give t_prefill_ms = time to first token and split generation_time_ms evenly
over the later steps (the last takes the remainder); offline records have no times unless they carry
the same `metrics` keys.
"""

from __future__ import annotations

import math
from operator import gt
from typing import Any

from engine.interop.peer import (MAX_STEPS, Budget, PeerError, PeerRequest, PeerStep, check_finished, count, counts,
                                 cut_finish, fail, first_json, ident, json_lines, label, number, peer_records,
                                 sampling_of, token_ids)
from engine.trace.check import MAX_REQUEST_MS, MAX_WINDOW

FORMAT = "vllm"
FINISH = {"stop": "eos", "length": "max_new_tokens", "abort": None, "tool_calls": "eos", "error": None}
SPEC_KEYS = ("num_spec_tokens", "acceptance_histogram", "num_spec_steps", "num_accepted_draft_tokens",
             "num_draft_tokens", "mean_acceptance_length", "draft_acceptance_rate")
LACKS = ["t_draft_ms"]
AUTOREGRESSIVE = {"K": 0, "n": 0, "A": 0, "D": 0, "hist": [0], "acc": [], "drafted": [], "raw": {}}


def kind_of(d: Any) -> str | None:
    """'offline' | 'served' for a vLLM record, else None."""
    if not isinstance(d, dict):
        return None
    if isinstance(d.get("spec_decode_metrics"), dict) or ("spec_decode_metrics" in d and "token_ids" in d):
        return "offline"
    m = d.get("metrics")
    if isinstance(m, dict) and "speculative_decoding" in m and "choices" in d:
        return "served"
    return None


def is_vllm(head: bytes) -> bool:
    return kind_of(first_json(head)) is not None


def spec_metrics(m: Any, where: str, prefix: str) -> dict[str, Any]:
    """Validated `spec_decode_metrics` / `metrics.speculative_decoding`; per-step lists or None."""
    if not isinstance(m, dict):
        fail(where, prefix.rstrip("."), f"expected an object (per_request_spec_decode_metrics on?), got "
                                        f"{type(m).__name__}")
    for k in SPEC_KEYS:
        if k not in m:
            fail(where, prefix + k, "missing")
    K = count(m, "num_spec_tokens", where, 0, MAX_WINDOW, prefix=prefix)
    n = count(m, "num_spec_steps", where, 0, MAX_STEPS, prefix=prefix)
    A = count(m, "num_accepted_draft_tokens", where, prefix=prefix)
    D = count(m, "num_draft_tokens", where, prefix=prefix)
    h = counts(m, "acceptance_histogram", where, hi=MAX_STEPS, prefix=prefix, max_len=MAX_WINDOW + 1)
    if len(h) != K + 1:
        fail(where, prefix + "acceptance_histogram", f"{len(h)} entries, expected num_spec_tokens + 1 = {K + 1}")
    if sum(h) != n:
        fail(where, prefix + "num_spec_steps", f"{n}, but the histogram counts {sum(h)} steps")
    if sum(j * x for j, x in enumerate(h)) != A:
        fail(where, prefix + "num_accepted_draft_tokens", f"{A}, but the histogram gives "
                                                          f"{sum(j * x for j, x in enumerate(h))}")
    if A > D:
        fail(where, prefix + "num_accepted_draft_tokens", f"{A} accepted > {D} drafted")
    # a spec step drafts 1 … K tokens (a step that drafted nothing is not one): n ≤ D ≤ n·K
    if not n <= D <= n * K:
        fail(where, prefix + "num_draft_tokens", f"{D} drafted over {n} steps of at most num_spec_tokens = {K} "
                                                 f"(expected {n} … {n * K})")
    acc = counts(m, "per_step_accepted", where, hi=MAX_WINDOW, prefix=prefix, optional=True)
    dr = counts(m, "per_step_drafted", where, hi=MAX_WINDOW, prefix=prefix, optional=True)
    if (acc is None) != (dr is None):
        fail(where, prefix + ("per_step_drafted" if dr is None else "per_step_accepted"),
             "missing while the other per-step array is there")
    if acc is not None:
        if len(acc) != len(dr):
            fail(where, prefix + "per_step_drafted", f"{len(dr)} entries but per_step_accepted has {len(acc)}")
        if len(acc) != n:
            fail(where, prefix + "per_step_accepted", f"{len(acc)} entries but num_spec_steps is {n}")
        if any(map(gt, acc, dr)) or (dr and max(dr) > K):  # C-level scans; the loop only to name the step
            for i, (a, w) in enumerate(zip(acc, dr)):
                if a > w:
                    fail(where, f"{prefix}per_step_accepted[{i}]", f"{a} accepted > {w} drafted (per_step_drafted[{i}])")
                if a > K or w > K:
                    fail(where, f"{prefix}per_step_drafted[{i}]", f"more than num_spec_tokens = {K}")
        if sum(dr) != D:
            fail(where, prefix + "per_step_drafted", f"sums to {sum(dr)}, but num_draft_tokens is {D}")
        if [acc.count(j) for j in range(K + 1)] != h:
            fail(where, prefix + "acceptance_histogram", "differs from the per-step accepted counts")
    for k, want in (("mean_acceptance_length", 1.0 + A / n if n else 1.0),
                    ("draft_acceptance_rate", A / D if D else 0.0)):
        got = number(m, k, where, 0.0, MAX_WINDOW + 1.0, optional=False, prefix=prefix)
        if not math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12):
            fail(where, prefix + k, f"states {got}, the counts give {want}")
    return {"K": K, "n": n, "A": A, "D": D, "hist": h, "acc": acc, "drafted": dr, "raw": dict(m)}


def _steps(s: dict[str, Any], n_out: int | None, where: str, fld: str) -> tuple[list[PeerStep], bool, str]:
    """The request's steps (see the module docstring), whether they are in order, and a note."""
    if s["acc"] is not None:
        spec = [PeerStep(w, a, a + 1, fields={"spec_step": i}) for i, (a, w) in enumerate(zip(s["acc"], s["drafted"]))]
        ordered = True
    else:
        fixed = s["D"] == s["n"] * s["K"]
        # no order: ascending, so a cut at the budget falls on the step that accepted most
        spec = [PeerStep(s["K"] if fixed else None, j, j + 1) for j in range(s["K"] + 1) for _ in range(s["hist"][j])]
        ordered = not spec
    steps = [PeerStep(0, 0, 1, fields={"prefill": True})] + spec
    if n_out is None:
        return steps, ordered, "output length unknown: no steps that drafted nothing were added"
    if n_out == 0:
        fail(where, fld, "no output tokens")
    extra = n_out - sum(x.emitted for x in steps)
    note = ""
    if extra > 0:
        steps += [PeerStep(0, 0, 1, fields={"undrafted": True}) for _ in range(extra)]
        ordered = False
        note = f"{extra} steps drafted nothing; vLLM does not say where they ran, so they are appended"
    elif extra < 0:
        last = steps[-1]
        if -extra > last.accepted:
            fail(where, fld, f"{n_out} output tokens, but the verify steps emitted {n_out - extra} "
                             f"(more than the last step's cut can explain)")
        last.emitted += extra
        last.cut = True  # the request ended inside this step: parse_record marks it finished
        note = f"the last step emitted {last.emitted} of its {last.accepted + 1} (the output was cut at the budget)"
    return steps, ordered, note


def _times(steps: list[PeerStep], metrics: dict, where: str) -> float | None:
    """TTFT → step 0's prefill, generation_time_ms split evenly over the later steps; the request's wall ms."""
    ttft = number(metrics, "time_to_first_token_ms", where, prefix="metrics.")
    gen = number(metrics, "generation_time_ms", where, hi=MAX_REQUEST_MS, prefix="metrics.")
    itl = number(metrics, "mean_itl_ms", where, prefix="metrics.")
    if gen is None and itl is not None:
        gen = itl * (sum(s.emitted for s in steps) - 1)
    if ttft is None and gen is None:
        return None
    steps[0].t_prefill_ms = ttft or 0.0
    rest = steps[1:]
    if rest and gen:
        share = round(gen / len(rest), 6)
        for i, s in enumerate(rest):
            s.t_verify_ms = max(0.0, gen - share * i) if i == len(rest) - 1 else share
            if s.t_verify_ms > 3_600_000.0:
                fail(where, "metrics.generation_time_ms", f"{gen} ms makes a step longer than an hour")
    return (ttft or 0.0) + (gen or 0.0)


def parse_record(d: Any, where: str, budget: int | None = None,
                 steps_left: Budget | None = None) -> tuple[PeerRequest, dict[str, Any], str]:
    """One vLLM record → (request, its validated spec metrics, a note). `budget`: the run's max_tokens
    when a header line gives it (only read to name how a cut request without a finish reason ended);
    `steps_left`: the import's step budget, charged before any step is built."""
    kind = kind_of(d)
    if kind is None:
        fail(where, "spec_decode_metrics", "missing: not a vLLM record with per-request spec-decode metrics "
                                           "(offline: spec_decode_metrics; served: metrics.speculative_decoding)")
    if kind == "offline":
        s = (spec_metrics(d["spec_decode_metrics"], where, "spec_decode_metrics.") if d["spec_decode_metrics"]
             is not None else AUTOREGRESSIVE)  # a run without speculation: every step drafts nothing
        prompt = token_ids(d, "prompt_token_ids", where)
        out = token_ids(d, "token_ids", where)
        if out is None:
            fail(where, "token_ids", "missing: the output token ids")
        if d.get("metrics") is not None and not isinstance(d["metrics"], dict):
            fail(where, "metrics", f"expected an object of times, got {type(d['metrics']).__name__}")
        n_out, metrics = len(out), d.get("metrics") or {}
        text, fin_raw, fin_field = d.get("text"), d.get("finish_reason"), "finish_reason"
        fld = "token_ids"
    else:
        s = spec_metrics(d["metrics"]["speculative_decoding"], where, "metrics.speculative_decoding.")
        metrics = d["metrics"]
        ch = d.get("choices")
        if not isinstance(ch, list) or not ch or not isinstance(ch[0], dict):
            fail(where, "choices", "expected a non-empty list of objects")
        c0 = ch[0]
        usage = d.get("usage") if isinstance(d.get("usage"), dict) else {}
        n_out = count(usage, "completion_tokens", where, optional=True, prefix="usage.")
        prompt = token_ids(c0, "prompt_token_ids", where, prefix="choices[0].") or token_ids(d, "prompt_token_ids", where)
        out = token_ids(c0, "token_ids", where, prefix="choices[0].")
        if out is not None:
            if n_out is not None and n_out != len(out):
                fail(where, "usage.completion_tokens", f"{n_out}, but choices[0].token_ids has {len(out)}")
            n_out = len(out)
        msg = c0.get("message") if isinstance(c0.get("message"), dict) else {}
        text = c0.get("text") if c0.get("text") is not None else msg.get("content")
        fin_raw, fin_field, fld = c0.get("finish_reason"), "choices[0].finish_reason", "usage.completion_tokens"
    # prefill + verify steps + undrafted ones (see _steps), counted before one is built
    planned = 1 + s["n"] + (max(0, n_out - 1 - s["A"] - s["n"]) if n_out is not None else 0)
    (steps_left or Budget()).take(planned, where, fld)
    steps, ordered, note = _steps(s, n_out, where, fld)
    finished = check_finished(fin_raw, where, fin_field, FINISH)
    if steps[-1].cut:
        finished, why = cut_finish(finished, n_out, budget)
        note = "; ".join(x for x in (note, why) if x)
    wall = _times(steps, metrics, where)
    if text is not None and type(text) is not str:
        fail(where, "text", f"expected a string, got {type(text).__name__}")
    rid = ident(d, "request_id", where) if "request_id" in d else ident(d, "id", where)
    qid = ident(d, "question_id", where)
    cat = label(d, "category", where)
    req = PeerRequest(steps, prompt_ids=prompt, output_ids=out, prompt_text=str(d.get("prompt") or ""),
                      output_text=text or "", category=cat, question_id=qid if qid is not None else rid,
                      finished=finished, wall_ms=wall,
                      reported={"request_id": rid, **s["raw"]}, ordered=ordered)
    return req, s, note


def parse_records(data: bytes, name: str) -> tuple[list[PeerRequest], list[dict], list[str], dict]:
    """Every record of a vLLM file; all must be one kind (offline or served) and one K."""
    reqs, specs, notes, kinds = [], [], [], set()
    meta: dict[str, Any] = {}
    left = Budget()
    for where, d in json_lines(data, name, "vLLM records"):
        if isinstance(d, dict) and d.get("type") == "speclab.peer_header":  # the run script's first line
            meta = d
            continue
        r, s, note = parse_record(d, where, meta.get("max_tokens") if type(meta.get("max_tokens")) is int else None,
                                  left)
        kinds.add(kind_of(d))
        if specs and s["K"] != specs[0]["K"]:
            fail(where, "num_spec_tokens", f"{s['K']}, but earlier records have {specs[0]['K']} (one run per file)")
        reqs.append(r)
        specs.append(s)
        if note:
            notes.append(f"{where.split(': ', 1)[-1]}: {note}")
    if not reqs:
        raise PeerError(f"{name}: no vLLM records in the file")
    if len(kinds) > 1:
        raise PeerError(f"{name}: offline records and served responses mixed in one file (one run per file)")
    meta["kind"] = kinds.pop()
    return reqs, specs, notes, meta


def vllm_records(data: bytes, name: str, command: str = "") -> list[dict[str, Any]]:
    """Trace records for a vLLM file (see the module docstring)."""
    reqs, specs, notes, meta = parse_records(data, name)
    K = specs[0]["K"]
    detailed = all(s["acc"] is not None for s in specs)
    timed = any(r.wall_ms is not None for r in reqs)
    lacks = list(LACKS) + ([] if detailed else ["step order"]) + ([] if timed else ["t_verify_ms", "t_prefill_ms"])
    method = str(meta.get("method") or ("draft" if K else "autoregressive"))
    timing = ("served: step 0's t_prefill_ms = time to first token; generation_time_ms split evenly over the "
              "later steps" if meta["kind"] == "served" or timed else "no times in the records: every time is 0")
    return peer_records(FORMAT, reqs, engine={"name": "vllm", "version": meta.get("vllm_version"),
                                              "kind": meta["kind"], "level": "detailed" if detailed else "summary"},
                        target=str(meta.get("target") or "(vllm model)"),
                        draft=(str(meta.get("draft") or f"(vllm {method})") if K else None),
                        spec=f"vllm:{method}:K={K}", lacks=lacks, timing=timing, notes=notes, source=name,
                        command=command, max_new_tokens=meta.get("max_tokens") if type(meta.get("max_tokens")) is int
                        else None, sampling=sampling_of(meta), created=meta.get("created"))
