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
"""

from __future__ import annotations

import math
import re
from typing import Any

from engine.interop.peer import (PER_STEP, PeerError, PeerRequest, PeerStep, check_finished, count, even_split, fail,
                                 first_json, json_lines, number, peer_records)
from engine.trace.check import MAX_REQUEST_MS, MAX_WINDOW

FORMAT = "llamacpp"
FINISH = {"eos": "eos", "word": "eos", "limit": "max_new_tokens", "stop": "eos", "length": "max_new_tokens",
          "none": None}
LACKS = [PER_STEP, "window per step", "prompt_ids", "output_ids", "t_draft_ms"]
LOG_KEYS = {"n_draft": "K", "n_predict": "N", "n_drafted": "D", "n_accept": "A"}
LOG_LINE = re.compile(r"\b(n_draft|n_predict|n_drafted|n_accept)\s*=\s*(-?\d+)")
ACCEPT = re.compile(r"\baccept\s*=\s*(\S+?)%")
TIMED = re.compile(r"\b(encoded|decoded)\s+(-?\d+)\s+tokens in\s+(\S+)\s+seconds")


def is_server(head: bytes) -> bool:
    d = first_json(head)
    return isinstance(d, dict) and isinstance(d.get("timings"), dict) and "predicted_n" in d["timings"]


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
    if prompt_ms is not None:
        steps[0].t_prefill_ms = prompt_ms
    timed = steps[1:] if first_undrafted else steps
    if decode_ms and timed:
        share = round(decode_ms / len(timed), 6)
        for i, s in enumerate(timed):
            s.t_verify_ms = max(0.0, decode_ms - share * i) if i == len(timed) - 1 else share
    return steps


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


def server_request(d: Any, where: str) -> PeerRequest:
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
    calls = _check_totals(N, D, A, None, True, where, names)
    prompt_ms = number(t, "prompt_ms", where, prefix="timings.")
    decode_ms = number(t, "predicted_ms", where, hi=MAX_REQUEST_MS, prefix="timings.")
    if decode_ms is not None and calls > 1 and decode_ms / (calls - 1) > 3_600_000.0:
        fail(where, "timings.predicted_ms", f"{decode_ms} ms makes a step longer than an hour")
    steps = _split(calls, D, A, True, prompt_ms, decode_ms)
    choice = d["choices"][0] if isinstance(d.get("choices"), list) and d["choices"] and isinstance(
        d["choices"][0], dict) else {}
    msg = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    text = d.get("content", choice.get("text", msg.get("content")))
    if text is not None and type(text) is not str:
        fail(where, "content", f"expected a string, got {type(text).__name__}")
    fin = d.get("stop_type", choice.get("finish_reason"))
    wall = None if prompt_ms is None and decode_ms is None else (prompt_ms or 0.0) + (decode_ms or 0.0)
    prompt = d.get("prompt") if type(d.get("prompt")) is str else ""
    qid = d.get("question_id", d.get("id"))
    return PeerRequest(steps, prompt_text=prompt, output_text=text or "", category=str(d.get("category") or ""),
                       question_id=qid if type(qid) in (int, str) else None,
                       finished=check_finished(fin, where, "stop_type", FINISH), wall_ms=wall,
                       reported={"timings": dict(t), "model": d.get("model")}, ordered=True)


def log_requests(data: bytes, name: str) -> list[PeerRequest]:
    """Every run summary of a `llama-speculative-simple` log (several runs may be concatenated)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PeerError(f"{name}: not UTF-8 text (byte {e.start})") from None
    reqs, cur, timed, start = [], {}, {}, 0
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
            cur[LOG_KEYS[k]] = int(v)
            if int(v) < 0 or int(v) > (1 << 24):
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
    if not reqs:
        raise PeerError(f"{name}: no run summary (n_drafted / n_accept lines) in the log")
    return reqs


def llamacpp_records(data: bytes, name: str, command: str = "", meta: dict | None = None) -> list[dict[str, Any]]:
    """Trace records for a llama.cpp file: server responses (JSONL or a JSON list) or an example's log."""
    meta = dict(meta or {})
    if is_server(data[: 1 << 20]):
        reqs, kind = [], "server"
        for where, d in json_lines(data, name, "llama.cpp responses"):
            if isinstance(d, dict) and d.get("type") == "speclab.peer_header":
                meta.update(d)
                continue
            reqs.append(server_request(d, where))
        if not reqs:
            raise PeerError(f"{name}: no llama.cpp responses in the file")
        timing = ("step 0's t_prefill_ms = timings.prompt_ms; timings.predicted_ms split evenly over the later calls")
        K = meta.get("n_draft")
    else:
        reqs, kind = log_requests(data, name), "speculative-simple"
        timing = "step 0's t_prefill_ms = the 'encoded' time; the 'decoded' time split evenly over the calls"
        K = reqs[0].reported.get("n_draft")
    drafted = any(s.window for r in reqs for s in r.steps)
    notes = ["per-step accepted and drafted counts are even shares of each request's totals (llama.cpp reports "
             "totals only); means, totals and the acceptance rate are exact"]
    return peer_records(FORMAT, reqs, engine={"name": "llama.cpp", "kind": kind, "version": meta.get("version")},
                        target=str(meta.get("target") or "(llama.cpp model)"),
                        draft=str(meta.get("draft") or "(llama.cpp draft)") if drafted else None,
                        spec=f"llamacpp:{kind}" + (f":K={K}" if K is not None else ""), lacks=LACKS, timing=timing,
                        notes=notes, source=name, command=command)
