"""vLLM's Prometheus counters ⇄ speclab: a scrape in as an aggregate run, any trace out under vLLM's names.

vLLM (v1, `vllm/v1/metrics/loggers.py`) counts speculative decoding server-wide, per engine and
model (labels `engine`, `model_name`):

    vllm:spec_decode_num_drafts_total                      N  verify steps that carried drafts
    vllm:spec_decode_num_draft_tokens_total                D  drafted tokens
    vllm:spec_decode_num_accepted_tokens_total             A  accepted drafts (bonus excluded)
    vllm:spec_decode_num_accepted_tokens_per_pos_total     P_i  steps whose draft at position i (0-based)
                                                              was accepted, label `position`
    vllm:generation_tokens_total                           G  tokens generated (prefill tokens included)

and derives (its docstring's PromQL): acceptance rate = A / D, mean acceptance length = 1 + A / N,
per-position rate = P_i / N.

Import (scrape → trace). Acceptance is a prefix, so a step accepted ≥ j + 1 drafts iff it is counted
in P_j: the number of steps that accepted exactly j drafts is h_j = P_{j−1} − P_j (P_{−1} = N, P_K = 0),
which makes the accepted histogram exact, whatever the windows were. One request stands for the whole
scrape: N steps with accepted j, h_j of each (their order is not recorded), window K = len(P) on every
step when D = N·K (fixed K), else unknown; plus G − N − A steps that drafted nothing (prefills and
undrafted steps) when G is in the scrape; when G < N + A (outputs cut at the budget after their last
step's drafts were counted) that many tokens come off the steps that accepted most instead, so the
trace's new tokens always equal G. Checks: P non-increasing, P_0 ≤ N, ΣP = A ≤ D ≤ N·K.

Export (trace → scrape): the same counters from a trace's steps (steps with window > 0 are drafts;
an imported trace without windows counts every step of a speculative run as a draft and leaves D out),
plus `vllm:prompt_tokens_total` and `vllm:request_success_total`, labelled `engine="0"` and
`model_name` = the trace's target, so Grafana panels built on vLLM's names read our runs too.
"""

from __future__ import annotations

import math
import re
from typing import Any

from engine.interop.peer import MAX_STEPS, PeerError, PeerRequest, PeerStep, peer_records
from engine.trace.format import Trace

FORMAT = "vllm-prom"
PREFIX = "vllm:spec_decode_"
NAMES = {"num_drafts": "N", "num_draft_tokens": "D", "num_accepted_tokens": "A"}
PER_POS = "num_accepted_tokens_per_pos"
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?\s*$')
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
MAX_COUNT = float(1 << 40)


def is_scrape(head: bytes) -> bool:
    """True when the text has a vLLM speculative-decoding counter line (a scrape of /metrics)."""
    text = head.decode("utf-8", errors="ignore")  # a head may end inside a character
    return any(line.startswith(PREFIX) or line.startswith(f"# TYPE {PREFIX}") for line in text.splitlines()[:4000])


def parse_samples(data: bytes, name: str) -> list[tuple[str, dict[str, str], float, str]]:
    """(metric, labels, value, where) for every sample line; comments and blank lines skipped."""
    if b"\0" in data[:65536]:
        raise PeerError(f"{name}: not a Prometheus text scrape (binary data)")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as e:
        raise PeerError(f"{name}: not UTF-8 text (byte {e.start})") from None
    if text and not text.endswith("\n"):
        # the exposition format ends every line with a line feed: without one the last value may be cut
        n = text.count("\n") + 1
        raise PeerError(f"{name}: line {n}: the scrape does not end with a newline (cut off mid-value?)")
    out, seen = [], {}
    for i, line in enumerate(text.split("\n"), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        where = f"{name}: line {i}"
        m = LINE.match(s)
        if not m:
            raise PeerError(f"{where}: not a Prometheus sample line ({s[:40]!r}; a cut-off file?)")
        labels, body = {}, m.group(3) or ""
        pos = 0
        while pos < len(body.strip()):
            lm = LABEL.match(body, pos)
            if not lm:
                raise PeerError(f"{where}: field '{m.group(1)}': malformed labels {{{body[:40]}}}")
            labels[lm.group(1)] = lm.group(2)
            pos = lm.end()
        try:
            v = float(m.group(4))
        except ValueError:
            raise PeerError(f"{where}: field '{m.group(1)}': value {m.group(4)[:40]!r} is not a number") from None
        key = (m.group(1), tuple(sorted(labels.items())))
        if key in seen:  # a series twice: a scrape pasted twice or two scrapes in one file, never one scrape
            raise PeerError(f"{where}: field '{m.group(1)}': the same series as line {seen[key]} (two scrapes in "
                            f"one file? diff them with --before instead)")
        seen[key] = i
        out.append((m.group(1), labels, v, where))
    return out


def _value(v: float, metric: str, where: str) -> int:
    if not math.isfinite(v) or v < 0 or v != int(v) or v > MAX_COUNT:
        raise PeerError(f"{where}: field '{metric}': expected a whole count in [0, 2^40], got {v}")
    return int(v)


def counters(data: bytes, name: str, model: str | None = None) -> dict[str, Any]:
    """The spec-decode counters of one model (summed over engines): N, D, A, P (list), G or None,
    R (finished requests) or None, and the model name."""
    per: dict[str, dict[str, Any]] = {}
    for metric, labels, v, where in parse_samples(data, name):
        if metric.endswith("_created"):
            continue
        base = metric[:-len("_total")] if metric.endswith("_total") else metric
        mname = labels.get("model_name", "")
        c = per.setdefault(mname, {"N": None, "D": None, "A": None, "P": {}, "G": None, "R": None, "prompt": None})
        if base.startswith(PREFIX):
            key = base[len(PREFIX):]
            n = _value(v, metric, where)
            if key == PER_POS:
                # ASCII digits only: str.isdigit() also takes '²' and '٣', which int() then refuses
                if not re.fullmatch(r"[0-9]{1,4}", labels.get("position", "")) or int(labels["position"]) > 1024:
                    raise PeerError(f"{where}: field '{metric}': label position must be 0 … 1024, got "
                                    f"{labels.get('position')!r}")
                p = int(labels["position"])
                c["P"][p] = c["P"].get(p, 0) + n
            elif key in NAMES:
                c[NAMES[key]] = (c[NAMES[key]] or 0) + n
        elif base == "vllm:generation_tokens":
            c["G"] = (c["G"] or 0) + _value(v, metric, where)
        elif base == "vllm:prompt_tokens":
            c["prompt"] = (c["prompt"] or 0) + _value(v, metric, where)
        elif base == "vllm:request_success":
            c["R"] = (c["R"] or 0) + _value(v, metric, where)
    per = {k: c for k, c in per.items() if c["N"] is not None or c["P"]}
    if not per:
        raise PeerError(f"{name}: no {PREFIX}* counters (was speculative decoding on when this was scraped?)")
    if model is None and len(per) > 1:
        raise PeerError(f"{name}: counters of {len(per)} models ({', '.join(sorted(per))}); pick one with --model "
                        f"(python -m engine import vllm-prom … --model NAME)")
    if model is not None and model not in per:
        raise PeerError(f"{name}: no counters for model {model!r} (the scrape has {', '.join(sorted(per))})")
    mname = model if model is not None else next(iter(per))
    c = per[mname]
    for k, metric in (("N", "num_drafts"), ("D", "num_draft_tokens"), ("A", "num_accepted_tokens")):
        if c[k] is None:
            raise PeerError(f"{name}: field '{PREFIX}{metric}_total': missing from the scrape")
    k = max(c["P"]) + 1 if c["P"] else 0
    if sorted(c["P"]) != list(range(k)):
        gap = min(set(range(k)) - set(c["P"]))
        raise PeerError(f"{name}: field '{PREFIX}{PER_POS}_total': no sample for position {gap}")
    P = [c["P"][i] for i in range(k)]
    N, D, A = c["N"], c["D"], c["A"]
    where = f"{name}: model {mname!r}"
    if P and P[0] > N:
        raise PeerError(f"{where}: field 'position 0': {P[0]} steps accepted it, but only {N} drafts")
    for i in range(1, k):
        if P[i] > P[i - 1]:
            raise PeerError(f"{where}: field 'position {i}': {P[i]} accepted > {P[i - 1]} at position {i - 1} "
                            f"(acceptance is a prefix)")
    if sum(P) != A:
        raise PeerError(f"{where}: field '{PREFIX}num_accepted_tokens_total': {A}, but the positions sum to {sum(P)}")
    if A > D:
        raise PeerError(f"{where}: field '{PREFIX}num_accepted_tokens_total': {A} accepted > {D} drafted")
    if k and D > N * k:
        raise PeerError(f"{where}: field '{PREFIX}num_draft_tokens_total': {D} drafted > {N} drafts × {k} positions")
    if N + (c["G"] or 0) > MAX_STEPS:
        raise PeerError(f"{where}: {N} drafts is more steps than one import expands ({MAX_STEPS})")
    return {"model": mname, "N": N, "D": D, "A": A, "P": P, "G": c["G"], "R": c["R"], "prompt": c["prompt"]}


def diff(after: dict[str, Any], before: dict[str, Any], name: str) -> dict[str, Any]:
    """The counters of one run: a scrape taken after it minus one taken before it (counters count
    since the server started, so a single scrape is every request the server ever served). A counter
    that went down means the server restarted between the scrapes: refused, naming the counter."""
    if after["model"] != before["model"]:
        raise PeerError(f"{name}: the scrapes are of different models ({before['model']!r} before, "
                        f"{after['model']!r} after)")
    out = {"model": after["model"]}
    for k, metric in (("N", "num_drafts"), ("D", "num_draft_tokens"), ("A", "num_accepted_tokens"),
                      ("G", "generation_tokens"), ("R", "request_success"), ("prompt", "prompt_tokens")):
        a, b = after[k], before[k]
        if a is None or b is None:
            out[k] = None if a is None else a if k not in ("N", "D", "A") else a - (b or 0)
            continue
        if a < b:
            raise PeerError(f"{name}: field '{metric}': {a} after < {b} before — a counter went down (the server "
                            f"restarted between the scrapes?)")
        out[k] = a - b
    Pb = before["P"] + [0] * max(0, len(after["P"]) - len(before["P"]))
    if len(before["P"]) > len(after["P"]):
        raise PeerError(f"{name}: field '{PREFIX}{PER_POS}_total': {len(before['P'])} positions before, "
                        f"{len(after['P'])} after (another K: not the same server run)")
    for i, (a, b) in enumerate(zip(after["P"], Pb)):
        if a < b:
            raise PeerError(f"{name}: field 'position {i}': {a} after < {b} before — a counter went down")
    out["P"] = [a - b for a, b in zip(after["P"], Pb)]
    P, N = out["P"], out["N"]
    # the difference of two valid scrapes is a valid run; a pair that is not (edited, or not one server) is refused
    if P and P[0] > N or any(y > x for x, y in zip(P, P[1:])) or sum(P) != out["A"] or out["A"] > out["D"] or \
            (P and out["D"] > N * len(P)):
        raise PeerError(f"{name}: field '{PREFIX}{PER_POS}_total': the differences (drafts {N}, drafted {out['D']}, "
                        f"accepted {out['A']}, per position {P}) are not one run's counts")
    return out


def histogram(N: int, P: list[int]) -> list[int]:
    """h_j = steps that accepted exactly j drafts, from the per-position counts (prefix acceptance)."""
    bounds = [N, *P, 0]
    return [bounds[j] - bounds[j + 1] for j in range(len(P) + 1)]


def scrape_records(data: bytes, name: str, model: str | None = None, command: str = "",
                   before: bytes | None = None, before_name: str = "before") -> list[dict[str, Any]]:
    """Trace records of a scrape — of one run when `before` (a scrape taken just before the run) is
    given: the run is the difference (`diff`); else everything the server counted since it started,
    which the header's notes say."""
    c = counters(data, name, model)
    if before is not None:
        c = diff(c, counters(before, before_name, c["model"]), f"{name} − {before_name}")
    N, D, A, P, G = c["N"], c["D"], c["A"], c["P"], c["G"]
    K = len(P)
    fixed = K > 0 and D == N * K
    notes = [f"{N} drafts, {D} drafted, {A} accepted tokens; per position {P}",
             f"the run: this scrape minus {before_name}, taken before it" if before is not None else
             "one scrape: counters since the server started (every request it served, warm-up included); give the "
             "scrape taken before the run (--before) to import that run alone"]
    steps = [PeerStep(K if fixed else None, j, j + 1) for j, n in enumerate(histogram(N, P)) for _ in range(n)]
    if G is not None:
        rest = G - N - A
        if rest < 0:  # vLLM counts a step's accepted drafts before it cuts an output at the budget / a stop
            cut = -rest
            for st in reversed(steps):  # the steps that accepted most lose the cut tokens (order is unknown anyway)
                take = min(cut, st.emitted - 1)
                st.emitted -= take
                cut -= take
                if not cut:
                    break
            notes.append(f"generation_tokens_total {G} < drafts + accepted ({N + A}): outputs were cut at the "
                         f"budget; {-rest} tokens taken off the steps that accepted most, no undrafted steps added")
        else:
            steps += [PeerStep(0, 0, 1) for _ in range(rest)]
            notes.append(f"{rest} steps that drafted nothing (prefills, undrafted steps) from generation_tokens_total")
    else:
        notes.append("no vllm:generation_tokens_total: steps that drafted nothing are not in the trace")
    if not fixed:
        notes.append(f"drafted {D} ≠ drafts × positions ({N} × {K}): windows varied, so they are unknown per step")
    r = PeerRequest(steps, prompt_text="", category="", question_id=None, ordered=False,
                    reported={"num_drafts": N, "num_draft_tokens": D, "num_accepted_tokens": A,
                              "num_accepted_tokens_per_pos": P, "generation_tokens": G, "requests": c["R"]})
    if not steps:
        raise PeerError(f"{name}: the counters are all zero: nothing to import")
    return peer_records(FORMAT, [r], engine={"name": "vllm", "version": None, "source": "prometheus"},
                        target=c["model"] or "(vllm model)", draft="(not in the scrape)" if N else None,
                        spec=f"vllm-prom:K={K}", lacks=["prompt_ids", "output_ids", "t_verify_ms", "t_prefill_ms",
                                                        "request boundaries", "step order"],
                        timing="a scrape has no per-step times: every time is 0", notes=notes, source=name,
                        command=command)


# ------------------------------------------------------------------ export


def export_counters(trace: Trace) -> dict[str, Any]:
    """The vLLM counters a trace's steps amount to (see the module docstring)."""
    lacks = set(((trace.header.get("imported") or {}).get("lacks")) or [])
    known = "window" not in lacks
    spec_run = trace.header.get("draft") is not None
    drafts = [s for s in trace.steps if (s["window"] or 0) > 0] if known else (trace.steps if spec_run else [])
    k = max([s["window"] for s in drafts] if known and drafts else [s["accepted"] for s in drafts] or [0])
    return {"N": len(drafts), "D": sum(s["window"] for s in drafts) if known else None,
            "A": sum(s["accepted"] for s in drafts),
            "P": [sum(1 for s in drafts if s["accepted"] > i) for i in range(k)],
            "G": sum(s["emitted"] for s in trace.steps),
            "prompt": sum(len(r.get("prompt_ids") or []) for r in trace.requests.values()),
            "R": {f: sum(1 for e in trace.ends.values() if e.get("finished") == f) for f in ("eos", "max_new_tokens")}}


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def to_prometheus(trace: Trace) -> str:
    """A trace as Prometheus text exposition with vLLM's metric names (counters, `_total`)."""
    c = export_counters(trace)
    lab = f'engine="0",model_name="{_esc(str((trace.header.get("target") or {}).get("name", "")))}"'
    out = [f"# speclab trace {_esc(trace.source or '')}: policy {_esc((trace.header.get('policy') or {}).get('spec', ''))}"]

    def counter(name: str, help_: str, rows: list[tuple[str, int]]) -> None:
        out.extend([f"# HELP {name} {help_}", f"# TYPE {name} counter"])
        out.extend(f"{name}_total{{{lab}{extra}}} {float(v)}" for extra, v in rows)

    counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [("", c["N"])])
    if c["D"] is not None:
        counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [("", c["D"])])
    else:
        out.append("# vllm:spec_decode_num_draft_tokens omitted: the trace does not record its windows")
    counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [("", c["A"])])
    counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
            [(f',position="{i}"', v) for i, v in enumerate(c["P"])])
    counter("vllm:generation_tokens", "Number of generation tokens processed.", [("", c["G"])])
    counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [("", c["prompt"])])
    reasons = {"eos": "stop", "max_new_tokens": "length"}
    counter("vllm:request_success", "Count of successfully processed requests.",
            [(f',finished_reason="{reasons[f]}"', n) for f, n in c["R"].items()])
    return "\n".join(out) + "\n"
