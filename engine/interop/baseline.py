"""An imported run against its engine's own autoregressive baseline, and why its acceptance is low.

`times_ar(run, ar)`: the run's ×AR, from the files' own timings. The baseline must be a run of the same
engine without speculation (a vLLM file with no spec_decode_metrics, a llama.cpp run without a draft, an
AIPerf file without spec_decode_acceptance): no step of it drafted. Both runs are priced on one basis,
stated with the figure:

    wall        Σ output tokens ÷ Σ request wall time (each request's own latency, `wall_ms`), when every
                request of both runs has one — concurrency is not accounted, so both runs must have been
                driven alike (the basis says so);
    steps       Σ output tokens ÷ Σ step times (prefill + draft + verify), when both runs time their steps;
    none        no figure, and the reason, when either file has no times.

Where both runs carry question ids (or prompts in the same order) the ratio is also given over the
requests they share, which removes a different mix of prompts from the comparison.

`why_low(trace)`: what the accepted counts say about low acceptance —

    first rejection   the share of drafting steps whose first rejected draft was at position i (1-based),
                      and the share that accepted every draft; needs per-step accepted counts and windows
    by task           per category (the file's task / category labels): steps, token-weighted acceptance
                      length and acceptance rate, lowest first
    per position      the per-position acceptance rate and the conditional rate at each position, and the
                      position where the conditional rate drops most

Totals-only runs (per-step counts lacking) get no first-rejection or per-position figures, with the reason.
Pure functions of loaded traces; the imported-run view (app/peer_view.py) and `diagnose --ar` show them.
"""

from __future__ import annotations

from typing import Any

from engine.interop.diagnose import _lacks, drafting_steps, peer_metrics, per_step_known
from engine.trace.format import Trace


class BaselineError(ValueError):
    """The chosen baseline cannot serve: one line saying why."""


def _engine(t: Trace) -> str:
    imp = t.header.get("imported") or {}
    eng = imp.get("engine") or (t.header.get("software") or {}).get("engine") or {}
    name = eng.get("name") if isinstance(eng, dict) else None
    return str(name or imp.get("format") or "speclab")


def check_baseline(run: Trace, ar: Trace, ar_name: str = "baseline") -> None:
    """Refuse, in one line, a baseline that drafted or comes from another engine."""
    drafted = drafting_steps(ar) if ar.header.get("draft") is not None else []
    if drafted or any((s.get("window") or 0) > 0 for s in ar.steps):
        n = len(drafted) or sum(1 for s in ar.steps if (s.get("window") or 0) > 0)
        raise BaselineError(f"{ar_name}: not an autoregressive run ({n} steps drafted): an AR baseline drafts nothing")
    if _engine(run) != _engine(ar):
        raise BaselineError(f"{ar_name}: a {_engine(ar)} run, but the run is {_engine(run)}: the baseline must be "
                            "the same engine without speculation")
    if not ar.steps:
        raise BaselineError(f"{ar_name}: no steps")


def _wall(t: Trace, rids: list[int]) -> tuple[int, float] | None:
    toks = {r: 0 for r in rids}
    for s in t.steps:
        if s["request_id"] in toks:
            toks[s["request_id"]] += s["emitted"]
    walls = [(t.ends.get(r) or {}).get("wall_ms") for r in rids]
    if not rids or any(w is None or w <= 0 for w in walls):
        return None
    return sum(toks.values()), float(sum(walls))


def _stepped(t: Trace, rids: list[int]) -> tuple[int, float] | None:
    if {"t_verify_ms", "t_prefill_ms"} & _lacks(t):
        return None
    keep = set(rids)
    steps = [s for s in t.steps if s["request_id"] in keep]
    ms = sum(s["t_prefill_ms"] + s["t_draft_ms"] + s["t_verify_ms"] for s in steps)
    return (sum(s["emitted"] for s in steps), ms) if ms > 0 else None


def _shared(run: Trace, ar: Trace) -> list[tuple[int, int]]:
    """(run request, baseline request) pairs of the same question id, else of the same prompt ids."""
    def keys(t: Trace) -> dict[Any, int]:
        out: dict[Any, int] = {}
        for rid, r in t.requests.items():
            k = ("q", r.get("question_id")) if r.get("question_id") is not None else \
                (("p", tuple(r["prompt_ids"])) if r.get("prompt_ids") else None)
            if k is not None and k not in out:
                out[k] = rid
        return out
    a, b = keys(run), keys(ar)
    return [(a[k], b[k]) for k in a if k in b]


BASIS = {"wall": "Σ output tokens ÷ Σ request wall time (each request's own latency; concurrency not accounted, "
                 "so both runs must have been driven alike)",
         "steps": "Σ output tokens ÷ Σ step times (prefill + draft + verify) in each file"}


def times_ar(run: Trace, ar: Trace, ar_name: str = "baseline") -> dict[str, Any]:
    """The run's ×AR on a basis both files support (module docstring), or why there is none."""
    check_baseline(run, ar, ar_name)
    out: dict[str, Any] = {"baseline": ar_name, "x_ar": None, "basis": None, "shared": None}
    for basis in ("wall", "steps"):
        f = _wall if basis == "wall" else _stepped
        a, b = f(run, list(run.requests)), f(ar, list(ar.requests))
        if a is None or b is None or not a[1] or not b[1]:
            continue
        tps_run, tps_ar = a[0] / (a[1] / 1e3), b[0] / (b[1] / 1e3)
        out.update(x_ar=tps_run / tps_ar, basis=basis, basis_text=BASIS[basis], tokens_per_s=tps_run,
                   ar_tokens_per_s=tps_ar, requests=len(run.requests), ar_requests=len(ar.requests))
        pairs = _shared(run, ar)
        if pairs:
            sa, sb = f(run, [p[0] for p in pairs]), f(ar, [p[1] for p in pairs])
            if sa and sb and sa[1] and sb[1]:
                out["shared"] = {"requests": len(pairs),
                                 "x_ar": (sa[0] / (sa[1] / 1e3)) / (sb[0] / (sb[1] / 1e3))}
        return out
    out["why_none"] = ("no timings in " + " and ".join(n for n, t in ((("the run"), run), (ar_name, ar))
                                                          if _wall(t, list(t.requests)) is None and
                                                          _stepped(t, list(t.requests)) is None)
                       + ": a ×AR needs both runs' wall or step times")
    return out


def first_rejection(trace: Trace, steps: list[dict] | None = None) -> dict[str, Any]:
    """Shares of drafting steps by the position (1-based) of their first rejected draft; 'all' = none rejected.
    `steps`: a subset of the trace's steps (one task's, engine.interop.same_pair), else all of them."""
    spec = drafting_steps(trace, steps)
    if not per_step_known(trace):
        return {"shares": None, "why": "totals only: the file has no per-step accepted counts"}
    if "window per step" in _lacks(trace):  # windows split from totals (llama.cpp): a full accept is not data
        return {"shares": None, "why": "per-step windows not known: a step's first rejection cannot be told from "
                                       "a draft that stopped short and was accepted whole"}
    if "window" in _lacks(trace) or any(s["window"] is None for s in spec):
        return {"shares": None, "why": "windows unknown: a step's first rejection cannot be told from a full accept"}
    if not spec:
        return {"shares": None, "why": "no drafting steps"}
    counts: dict[str, int] = {}
    for s in spec:
        k = "all" if s["accepted"] >= s["window"] else str(s["accepted"] + 1)
        counts[k] = counts.get(k, 0) + 1
    order = sorted((k for k in counts if k != "all"), key=int) + (["all"] if "all" in counts else [])
    return {"shares": {k: counts[k] / len(spec) for k in order}, "steps": len(spec), "why": None}


def by_task(trace: Trace) -> list[dict[str, Any]]:
    """Per category, lowest token-weighted acceptance length first; [] when the file carries no labels."""
    cat = {rid: str(r.get("category") or "") for rid, r in trace.requests.items()}
    if not any(cat.values()):
        return []
    known = "window" not in _lacks(trace)
    rows: dict[str, dict[str, int]] = {}
    for s in drafting_steps(trace):
        r = rows.setdefault(cat.get(s["request_id"], "") or "(none)", {"steps": 0, "accepted": 0, "drafted": 0})
        r["steps"] += 1
        r["accepted"] += s["accepted"]
        r["drafted"] += s["window"] or 0
    out = [{"task": k, "steps": v["steps"], "token_weighted_acceptance_length": 1 + v["accepted"] / v["steps"],
            "acceptance_rate": v["accepted"] / v["drafted"] if known and v["drafted"] else None}
           for k, v in rows.items() if v["steps"]]
    return sorted(out, key=lambda r: r["token_weighted_acceptance_length"])


def position_drop(trace: Trace) -> dict[str, Any]:
    """Per-position rates and where the conditional rate falls most (None when totals only)."""
    m = peer_metrics(trace)["pooled"]
    rates, cond = m["per_position_rate"], m["per_position_conditional"]
    if rates is None:
        return {"rates": None, "why": m["per_position_basis"]}
    drops = [(cond[i - 1] - cond[i], i) for i in range(1, len(cond)) if cond[i] is not None and cond[i - 1] is not None]
    worst = max(drops) if drops else None
    return {"rates": rates, "conditional": cond, "why": None,
            "largest_drop": None if worst is None or worst[0] <= 0 else
            {"position": worst[1] + 1, "from": cond[worst[1] - 1], "to": cond[worst[1]]}}


def why_low(trace: Trace) -> dict[str, Any]:
    return {"first_rejection": first_rejection(trace), "by_task": by_task(trace), "per_position": position_drop(trace)}


def format_why(w: dict[str, Any]) -> list[str]:
    fr, pp = w["first_rejection"], w["per_position"]
    lines = ["why acceptance is low:"]
    if fr["shares"] is None:
        lines.append(f"  first rejection: — ({fr['why']})")
    else:
        lines.append("  first rejection at position: " + ", ".join(
            f"{k} {v:.1%}" if k != "all" else f"none (all accepted) {v:.1%}" for k, v in fr["shares"].items()))
    for r in w["by_task"]:
        rate = "—" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.1%}"
        lines.append(f"  task {r['task']!r}: {r['steps']} steps, token-weighted acceptance length "
                     f"{r['token_weighted_acceptance_length']:.3f}, acceptance rate {rate}")
    if pp["rates"] is None:
        lines.append(f"  per position: — ({pp['why']})")
    else:
        lines.append("  conditional acceptance per position: " + ", ".join(
            "—" if c is None else f"{c:.3f}" for c in pp["conditional"]))
        d = pp["largest_drop"]
        if d:
            lines.append(f"  largest drop at position {d['position']}: {d['from']:.3f} → {d['to']:.3f}")
    return lines
