"""llama.cpp reports → speclab traces: server responses (`timings`) and `llama-speculative-simple` logs.

llama.cpp counts speculative decoding per request, in totals only:

  server     every response of `llama-server` (`/completion`, and the OpenAI-compatible
             `/v1/completions`, `/v1/chat/completions`) carries
             `timings = {prompt_n, prompt_ms, predicted_n, predicted_ms, predicted_per_second,
                         draft_n, draft_n_accepted}` (the draft keys only when speculation ran);
  example    `llama-speculative-simple` prints at the end of a run
                 encoded   N tokens in S seconds …      decoded   N tokens in S seconds …
                 n_draft   = K      n_predict = N      n_drafted = D      n_accept  = A
                 accept    = 100·A/D %

Every target call emits exactly one token the draft did not supply, so the target calls are
N − A (no per-step log is needed). The server's first call processes the prompt and samples the
first token with no draft (step 0, window 0); `llama-speculative-simple` verifies its first draft
together with the prompt's last token, so all its N − A calls verify. Per step only the totals are
known: each call gets an even share of the drafted and accepted tokens (engine.interop.peer), so
means, totals and the acceptance rate are exact and the histogram is not (`accepted_per_step` lacking).

Times: the prompt's time (prompt_ms / "encoded … S seconds") is step 0's t_prefill_ms; the decode time
(predicted_ms / "decoded … S seconds") is split evenly over the calls that follow (the example: all).

The totals alone miscount the verify steps by one where a request ends inside a step (the drafts
accepted past an EOS or the token budget are counted, not emitted) or a call drafted nothing. A
server record may also carry `speclab_counters` (scripts/peers/run_llamacpp.py writes it): the change
of the server's own /metrics counters over that request — `spec_decode_num_drafts_total` (its verify
steps), `…_num_draft_tokens_total`, `…_num_accepted_tokens_total` and `accepted_per_pos`, the
accepted tokens per draft position. Then the steps are exact as a histogram (steps that accepted ≥ j
= position j's count), in no known order (ascending, so a cut falls on the step that accepted most),
the mean acceptance length is llama.cpp's own (1 + accepted ÷ verify steps), calls that drafted
nothing are appended (window 0), and a cut at the end shortens the last step's emitted tokens.
"""

from __future__ import annotations

import math
import re
from typing import Any

from engine.interop.peer import (PER_STEP, Budget, PeerError, PeerRequest, PeerStep, as_count, check_finished, count,
                                 cut_finish, even_split, fail, first_json, ident, json_lines, label, number,
                                 peer_records, sampling_of)
from engine.trace.check import MAX_REQUEST_MS, MAX_WINDOW

FORMAT = "llamacpp"
FINISH = {"eos": "eos", "word": "eos", "limit": "max_new_tokens", "stop": "eos", "length": "max_new_tokens",
          "none": None}
LACKS = [PER_STEP, "window per step", "prompt_ids", "output_ids", "t_draft_ms"]
LOG_KEYS = {"n_draft": "K", "n_predict": "N", "n_drafted": "D", "n_accept": "A"}
LOG_LINE = re.compile(r"\b(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(\S*)")
ACCEPT = re.compile(r"\baccept\s*=\s*(\S+?)%")
TIMED = re.compile(r"\b(encoded|decoded)\s+(-?\d+)\s+tokens in\s+(\S+)\s+seconds")


def is_server_record(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("timings"), dict) and "predicted_n" in d["timings"]


def is_server(head: bytes) -> bool:
    return is_server_record(first_json(head))


def is_log(head: bytes) -> bool:
    try:
        text = head.decode("utf-8", errors="replace")
    except Exception:
        return False
    return bool(re.search(r"\bn_drafted\s*=", text)) and bool(re.search(r"\bn_accept\s*=", text))


def _split(n_calls: int, drafted: int, accepted: int, first_undrafted: bool, prompt_ms: float | None,
           decode_ms: float | None) -> list[PeerStep]:
    """The calls of one request: even shares of drafted and accepted over the calls that verify."""
    verify = n_calls - 1 if first_undrafted else n_calls
    wins, accs = even_split(drafted, verify), even_split(accepted, verify)
    steps = ([PeerStep(0, 0, 1, fields={"prefill": True})] if first_undrafted else []) + [
        PeerStep(w, a, a + 1) for w, a in zip(wins, accs)]
    _time(steps, prompt_ms, decode_ms, first_undrafted)
    return steps


def _time(steps: list[PeerStep], prompt_ms: float | None, decode_ms: float | None, first_undrafted: bool = True) -> None:
    """The prompt's time on step 0, the decode time split evenly over the calls after it."""
    if prompt_ms is not None:
        steps[0].t_prefill_ms = prompt_ms
    timed = steps[1:] if first_undrafted else steps
    if decode_ms and timed:
        share = round(decode_ms / len(timed), 6)
        for i, s in enumerate(timed):
            s.t_verify_ms = max(0.0, decode_ms - share * i) if i == len(timed) - 1 else share


def _check_totals(N: int, D: int, A: int, K: int | None, first_undrafted: bool, where: str, names: dict) -> int:
    if A > D:
        fail(where, names["A"], f"{A} accepted > {D} drafted ({names['D']})")
    if A >= N:
        fail(where, names["A"], f"{A} accepted ≥ {N} predicted tokens: every call also emits one token of its own")
    calls = N - A
    verify = calls - 1 if first_undrafted else calls
    if D and verify < 1:
        fail(where, names["D"], f"{D} drafted, but no call after the prompt's to verify them")
    if K is not None and D > K * max(verify, 0):
        fail(where, names["D"], f"{D} drafted > n_draft {K} × {verify} verify calls")
    if verify and math.ceil(D / verify) > MAX_WINDOW:
        fail(where, names["D"], f"{D} drafted over {verify} calls: windows over {MAX_WINDOW}")
    return calls


COUNTERS = "speclab_counters"
C_STEPS, C_DRAFTED, C_ACCEPTED = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
                                  "spec_decode_num_accepted_tokens_total")


def _counter_steps(c: Any, N: int, D: int, A: int, where: str,
                   left: Budget) -> tuple[list[PeerStep], bool, str]:
    """The steps of a request from the server's per-request counters (module docstring); whether they
    are in order, and a note."""
    pre = COUNTERS + "."
    if not isinstance(c, dict):
        fail(where, COUNTERS, f"expected an object, got {type(c).__name__}")
    S = count(c, C_STEPS, where, prefix=pre)
    for k, want, name in ((C_DRAFTED, D, "timings.draft_n"), (C_ACCEPTED, A, "timings.draft_n_accepted")):
        if count(c, k, where, prefix=pre) != want:
            fail(where, pre + k, f"{c[k]} but {name} says {want}")
    pos = c.get("accepted_per_pos")
    if not isinstance(pos, list):
        fail(where, pre + "accepted_per_pos", "missing: a list of accepted tokens per draft position")
    p = [as_count(x, f"{pre}accepted_per_pos[{i}]", where) for i, x in enumerate(pos)]
    if len(p) > MAX_WINDOW or sum(p) != A or any(b > a for a, b in zip([S, *p], p)):
        fail(where, pre + "accepted_per_pos", f"{p} is not a non-increasing split of {A} accepted over {S} steps")
    if D and not S:
        fail(where, pre + C_STEPS, f"0 verify steps for {D} drafted tokens")
    left.take(1 + S + max(0, N - 1 - S - A), where, pre + C_STEPS)  # before a step is built
    K = len(p)
    hist = [S - (p[0] if p else 0)] + [p[j] - (p[j + 1] if j + 1 < K else 0) for j in range(K)]
    acc = [j for j in range(K + 1) for _ in range(hist[j])]
    spec = [PeerStep(w, a, a + 1) for w, a in zip(_windows(acc, D, K, where), acc)]
    steps = [PeerStep(0, 0, 1, fields={"prefill": True})] + spec
    extra = N - sum(x.emitted for x in steps)
    note = ""
    if extra > 0:
        steps += [PeerStep(0, 0, 1, fields={"undrafted": True}) for _ in range(extra)]
        note = "calls that drafted nothing (appended: the server does not say where they ran)" if S else ""
    elif extra < 0:
        last = steps[-1]
        if -extra > last.accepted:
            fail(where, pre + C_STEPS, f"{N} predicted tokens, but the verify steps emit {N - extra} "
                                       f"(more than the last step's cut can explain)")
        last.emitted += extra
        last.cut = True
        note = "a last step cut short (drafts accepted past the end of the output)"
    return steps, not spec, note


def _windows(acc: list[int], D: int, K: int, where: str) -> list[int]:
    """Drafted tokens per step adding up to D, each at least the step's accepted count and at most K:
    one more than accepted where a step accepted fewer than K (it saw a rejection), the rest spread
    over the steps below K. Exact when D = steps · K; otherwise one consistent split."""
    w = list(acc)
    left = D - sum(acc)
    for i, a in enumerate(acc):
        if left and a < K:
            w[i], left = a + 1, left - 1
    while left:
        room = [i for i, x in enumerate(w) if x < K]
        if not room:
            fail(where, COUNTERS + "." + C_DRAFTED, f"{D} drafted > {K} positions × {len(acc)} verify steps")
        for i in room[:left]:
            w[i] += 1
        left -= min(left, len(room))
    return w


def server_request(d: Any, where: str, left: Budget | None = None) -> PeerRequest:
    left = left or Budget()
    if not isinstance(d, dict) or not isinstance(d.get("timings"), dict):
        fail(where, "timings", "missing: not a llama.cpp server response")
    t = d["timings"]
    N = count(t, "predicted_n", where, lo=1, prefix="timings.")
    D = count(t, "draft_n", where, optional=True, prefix="timings.") or 0
    A = count(t, "draft_n_accepted", where, optional=True, prefix="timings.") or 0
    if ("draft_n" in t) != ("draft_n_accepted" in t):
        fail(where, "timings.draft_n_accepted" if "draft_n" in t else "timings.draft_n",
             "missing while the other draft count is there")
    names = {"A": "timings.draft_n_accepted", "D": "timings.draft_n"}
    prompt_ms = number(t, "prompt_ms", where, prefix="timings.")
    decode_ms = number(t, "predicted_ms", where, hi=MAX_REQUEST_MS, prefix="timings.")
    ordered, note = True, ""
    if COUNTERS in d:
        if A > D:
            fail(where, names["A"], f"{A} accepted > {D} drafted ({names['D']})")
        steps, ordered, note = _counter_steps(d[COUNTERS], N, D, A, where, left)
        _time(steps, prompt_ms, decode_ms)
        calls = len(steps)
    else:
        calls = _check_totals(N, D, A, None, True, where, names)
        left.take(calls, where, "timings.predicted_n")
        steps = _split(calls, D, A, True, prompt_ms, decode_ms)
    if decode_ms is not None and calls > 1 and decode_ms / (calls - 1) > 3_600_000.0:
        fail(where, "timings.predicted_ms", f"{decode_ms} ms makes a step longer than an hour")
    choice = d["choices"][0] if isinstance(d.get("choices"), list) and d["choices"] and isinstance(
        d["choices"][0], dict) else {}
    msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = d.get("content", choice.get("text", msg.get("content")))
    if text is not None and type(text) is not str:
        fail(where, "content", f"expected a string, got {type(text).__name__}")
    fin = d.get("stop_type", choice.get("finish_reason"))
    finished = check_finished(fin, where, "stop_type", FINISH)
    if steps[-1].cut:  # the output ended inside the last step: it finished the request, whatever the record says
        finished, why = cut_finish(finished, N, None)
        note = "; ".join(x for x in (note, why) if x)
    wall = None if prompt_ms is None and decode_ms is None else (prompt_ms or 0.0) + (decode_ms or 0.0)
    prompt = d.get("prompt") if type(d.get("prompt")) is str else ""
    qid = ident(d, "question_id", where) if "question_id" in d else ident(d, "id", where)
    return PeerRequest(steps, prompt_text=prompt, output_text=text or "", category=label(d, "category", where),
                       question_id=qid,
                       finished=finished, wall_ms=wall,
                       reported={"timings": dict(t), "model": d.get("model"),
                                 **({COUNTERS: d[COUNTERS]} if COUNTERS in d else {}), **({"note": note} if note else {})},
                       ordered=ordered)


def log_requests(data: bytes, name: str) -> list[PeerRequest]:
    """Every run summary of a `llama-speculative-simple` log (several runs may be concatenated)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PeerError(f"{name}: not UTF-8 text (byte {e.start})") from None
    reqs, cur, timed, start = [], {}, {}, 0
    left = Budget()
    for i, line in enumerate(text.split("\n"), start=1):
        where = f"{name}: line {i}"
        m = TIMED.search(line)
        if m:
            try:
                sec = float(m.group(3))
            except ValueError:
                fail(where, m.group(1), f"time {m.group(3)[:20]!r} is not a number")
            if not math.isfinite(sec) or not 0 <= sec <= MAX_REQUEST_MS / 1e3:
                fail(where, m.group(1), f"time {sec} s outside [0, {MAX_REQUEST_MS / 1e3:g}]")
            timed[m.group(1)] = sec * 1e3
        for k, v in LOG_LINE.findall(line):
            if not cur:
                start = i
            if not re.fullmatch(r"[0-9]{1,9}", v):
                fail(where, k, f"expected a whole count, got {v[:20]!r}")
            if LOG_KEYS[k] in cur:  # a run's summary without its 'accept = …%' line: never merge two runs
                fail(where, k, f"a second {k} before the run that began at line {start} ended with 'accept = …%' "
                               f"(a cut-off or garbled summary)")
            cur[LOG_KEYS[k]] = int(v)
            if int(v) > (1 << 24):
                fail(where, k, f"{v} outside [0, 2^24]")
        m = ACCEPT.search(line)
        if m and cur:
            where = f"{name}: run ending line {i}"
            for k, key in (("N", "n_predict"), ("D", "n_drafted"), ("A", "n_accept")):
                if k not in cur:
                    fail(where, key, "missing from the run's summary (a cut-off log?)")
            K = cur.get("K")
            if K is not None and not 0 <= K <= MAX_WINDOW:
                fail(where, "n_draft", f"{K} outside [0, {MAX_WINDOW}]")
            N, D, A = cur["N"], cur["D"], cur["A"]
            if N < 1:
                fail(where, "n_predict", f"{N}: nothing was generated")
            try:
                pct = float(m.group(1))
            except ValueError:
                fail(where, "accept", f"{m.group(1)[:20]!r} is not a percentage")
            want = 100.0 * A / D if D else 0.0
            if not math.isfinite(pct) or abs(pct - want) > 0.0006 + 1e-9 * want:
                fail(where, "accept", f"{pct}% but n_accept / n_drafted = {want:.3f}%")
            calls = _check_totals(N, D, A, K, False, where, {"A": "n_accept", "D": "n_drafted"})
            left.take(calls, where, "n_predict")
            steps = _split(calls, D, A, False, timed.get("encoded"), timed.get("decoded"))
            wall = None if not timed else timed.get("encoded", 0.0) + timed.get("decoded", 0.0)
            reqs.append(PeerRequest(steps, question_id=len(reqs), wall_ms=wall, ordered=True,
                                    reported={"n_draft": K, "n_predict": N, "n_drafted": D, "n_accept": A,
                                              "accept_pct": pct, "encoded_ms": timed.get("encoded"),
                                              "decoded_ms": timed.get("decoded"), "log_lines": [start, i]}))
            cur, timed = {}, {}
    if cur:
        raise PeerError(f"{name}: line {start}: field 'accept': the run's summary has no 'accept = …%' line "
                        f"(a cut-off log?)")
    if timed:  # the last run's timings without its summary: the log was cut inside that run
        raise PeerError(f"{name}: field '{next(iter(timed))}': a run's timings after the last summary, with no "
                        f"n_predict / n_drafted / n_accept lines (a cut-off log?)")
    if not reqs:
        raise PeerError(f"{name}: no run summary (n_drafted / n_accept lines) in the log")
    return reqs


def llamacpp_records(data: bytes, name: str, command: str = "", meta: dict | None = None) -> list[dict[str, Any]]:
    """Trace records for a llama.cpp file: server responses (JSONL or a JSON list) or an example's log."""
    meta = dict(meta or {})
    if data.removeprefix(b"\xef\xbb\xbf").lstrip()[:1] in (b"{", b"["):  # JSON: responses (a log is never JSON)
        reqs, kind, left = [], "server", Budget()
        for where, d in json_lines(data, name, "llama.cpp responses"):
            if isinstance(d, dict) and d.get("type") == "speclab.peer_header":
                meta.update(d)
                continue
            reqs.append(server_request(d, where, left))
        if not reqs:
            raise PeerError(f"{name}: no llama.cpp responses in the file")
        timing = ("step 0's t_prefill_ms = timings.prompt_ms; timings.predicted_ms split evenly over the later calls")
        K = meta.get("n_draft")
    else:
        reqs, kind = log_requests(data, name), "speculative-simple"
        timing = "step 0's t_prefill_ms = the 'encoded' time; the 'decoded' time split evenly over the calls"
        K = reqs[0].reported.get("n_draft")
    drafted = any(s.window for r in reqs for s in r.steps)
    counted = all(COUNTERS in r.reported for r in reqs)
    lacks = list(LACKS)
    if counted:
        lacks.remove(PER_STEP)
        lacks += ["step order"] if not all(r.ordered for r in reqs) else []
        notes = ["per-step accepted counts from the server's own counters over each request (accepted per draft "
                 "position): the histogram, the mean acceptance length and the rate are exact; the order of the "
                 "steps, and how many tokens each step drafted where a step drafted fewer than K, are not"]
    else:
        notes = ["per-step accepted and drafted counts are even shares of each request's totals (llama.cpp reports "
                 "totals only); means, totals and the acceptance rate are exact"]
    kinds = [r.reported["note"] for r in reqs if r.reported.get("note")]
    notes += [f"{kinds.count(k)} of {len(reqs)} requests: {k}" for k in sorted(set(kinds))]
    return peer_records(FORMAT, reqs, engine={"name": "llama.cpp", "kind": kind, "version": meta.get("version")},
                        target=str(meta.get("target") or "(llama.cpp model)"),
                        draft=str(meta.get("draft") or "(llama.cpp draft)") if drafted else None,
                        spec=f"llamacpp:{kind}" + (f":K={K}" if K is not None else ""), lacks=lacks, timing=timing,
                        notes=notes, source=name, command=command, sampling=sampling_of(meta),
                        created=meta.get("created"),
                        max_new_tokens=meta.get("max_tokens") if type(meta.get("max_tokens")) is int and
                        0 < meta["max_tokens"] <= 1 << 24 else None)
