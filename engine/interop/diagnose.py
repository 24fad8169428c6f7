"""Diagnosis of a run from its accepted counts: what an imported (or our own) trace says about windows.

`peer_metrics` recomputes the serving engines' own figures from a trace, with their conventions
(vLLM `RequestSpecDecodeMetrics.to_dict`, its Prometheus counters): over the steps that carried
drafts (window > 0; every step when the trace does not record windows),

    num_spec_steps N, num_draft_tokens D, num_accepted A
    mean_acceptance_length = 1 + A / N          (bonus included; 1.0 when N = 0)
    draft_acceptance_rate  = A / D              (None when windows are unknown)
    acceptance_histogram[j] = steps with exactly j accepted
    per_pos[i] = steps whose draft at position i (0-based) was accepted = steps with accepted > i
    per-position rate = per_pos[i] / N (vLLM's), and conditional β_i = per_pos[i] / per_pos[i − 1]

`diagnose` adds:

- the fitted geometric acceptance α: each drafted position is accepted with probability α until the
  first rejection, so a step that accepted a < w of its w drafts saw a successes and one failure, and
  one that accepted all w saw w successes (censored). The maximum-likelihood estimate is
      α = Σ a / (Σ a + #{steps with a < w})
  (every step counts as rejected when windows are unknown). For a trace that keeps totals only
  (`accepted_per_step` lacking, e.g. llama.cpp), α instead solves Σ_{i=1..K} α^i = A / N with K the
  mean window (moment fit), since the per-step split is not data;
- the window the cost model recommends at that α (engine.offline.costmodel, flat verify cost,
  S(γ) = (1 − α^{γ+1}) / ((1 − α)(γc + 1)), best γ in 1…16) and its predicted speedup;
- the accepted-length bound (engine.interop.bounds.renewal_bound): the most any per-step window
  policy could gain over the best fixed window on this accepted-length distribution.

c (draft ÷ target cost per token) comes from the caller, else from the trace's own timings
(Σ t_draft / Σ window ÷ median t_verify of the drafting steps), else from the lab's measured costs of
the same pair (docs/results/costs-*.json, same model names); else there is no recommendation and the
diagnosis says to give c — never a silent default. A recommended window larger than any the run
drafted is flagged `extrapolated`: the fit is only measured up to the run's largest window.

Per-position figures need per-step (or per-position) counts: for a trace that keeps totals only they
are None and `per_position_basis` says so.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from engine.interop import bounds
from engine.interop.peer import PER_STEP
from engine.offline.costmodel import CostModel, expected_emitted, iid_theory
from engine.trace.format import Trace


def _lacks(trace: Trace) -> set[str]:
    return set((trace.header.get("imported") or {}).get("lacks") or [])


def drafting_steps(trace: Trace, steps: list[dict] | None = None) -> list[dict]:
    """The steps that carried drafts. Where windows are unknown per step (None), a step whose window
    is known to be 0 — the prefill call, a step that drafted nothing — is still not one: counting them
    would lower the mean acceptance length below the engine's own."""
    steps = trace.steps if steps is None else steps
    if "window" in _lacks(trace):
        return [s for s in steps if s["window"] != 0] if trace.header.get("draft") is not None else []
    return [s for s in steps if (s["window"] or 0) > 0]


def per_step_known(trace: Trace) -> bool:
    """Whether the trace keeps each step's accepted count (else only totals: llama.cpp's timings, SGLang's
    meta_info without a histogram, where the per-step split is an even share and not data)."""
    return PER_STEP not in _lacks(trace)


def acceptance_lengths(trace: Trace) -> dict[str, float | None]:
    """Mean acceptance length (1 + accepted ÷ drafting steps, bonus included) two ways, as benchmark
    harnesses report it: averaged over requests (each request's own mean, then the mean of those), and
    token-weighted (pooled over every drafting step of the run). They differ when requests of
    different lengths accept differently; vLLM's /metrics gives the token-weighted one. A request that
    drafted nothing counts 1.0 in the per-request mean, the value vLLM states for it."""
    spec = drafting_steps(trace)
    by: dict[int, list[int]] = {rid: [] for rid in trace.requests}
    for s in spec:
        by.setdefault(s["request_id"], []).append(s["accepted"])
    # a request that never drafted has 1.0, as vLLM states it (its own mean_acceptance_length)
    per_req = [1.0 + sum(a) / len(a) if a else 1.0 for a in by.values()] if spec else []
    return {"per_request_mean": sum(per_req) / len(per_req) if per_req else None,
            "token_weighted": 1.0 + sum(s["accepted"] for s in spec) / len(spec) if spec else None,
            "requests": len(per_req)}


# Acceptance length two ways, named as AIPerf names them (spec_decode_acceptance_length averaged over requests,
# spec_decode_token_weighted_acceptance_length pooled over the run's verify steps).
LENGTH_NAMES = {"per_request_mean": "Acceptance Length (per-request mean)",
                "token_weighted": "Token-Weighted Acceptance Length"}


def counts_of(steps: list[dict], windows_known: bool, k: int | None = None) -> dict[str, Any]:
    """vLLM's per-request figures for these (drafting) steps (see the module docstring); `k` the
    histogram's top index (vLLM's K: a request with no drafting step still has K + 1 zeros)."""
    n = len(steps)
    acc = [s["accepted"] for s in steps]
    A = sum(acc)
    D = sum(s["window"] for s in steps) if windows_known else None
    if k is None:
        k = max([s["window"] for s in steps] if windows_known and steps else acc or [0])
    hist = [acc.count(j) for j in range(k + 1)]
    per_pos = [sum(1 for a in acc if a > i) for i in range(k)]
    return {"num_spec_steps": n, "num_draft_tokens": D, "num_accepted_draft_tokens": A,
            "mean_acceptance_length": 1.0 + A / n if n else 1.0,
            "draft_acceptance_rate": (A / D if D else 0.0) if D is not None else None,
            "acceptance_histogram": hist, "num_accepted_tokens_per_pos": per_pos,
            "per_position_rate": [p / n for p in per_pos] if n else [],
            "per_position_conditional": [p / (per_pos[i - 1] if i else n) if (per_pos[i - 1] if i else n) else None
                                         for i, p in enumerate(per_pos)]}


def peer_metrics(trace: Trace) -> dict[str, Any]:
    """{"pooled": …, "requests": {request_id: …}}: the engines' figures recomputed from the trace."""
    known = "window" not in _lacks(trace)
    spec = drafting_steps(trace)
    by: dict[int, list[dict]] = {rid: [] for rid in trace.requests}
    for s in spec:
        by.setdefault(s["request_id"], []).append(s)
    pooled = counts_of(spec, known)
    k = len(pooled["acceptance_histogram"]) - 1
    exact = per_step_known(trace)
    stated = [(e.get("reported") or {}).get("num_spec_tokens") for e in trace.ends.values()]
    if stated and all(type(x) is int and x >= k for x in stated):  # vLLM's K, even when no step drafted K
        k = max(stated)
        pooled = counts_of(spec, known, k)
    requests = {rid: counts_of(v, known, k) for rid, v in by.items()}
    if not exact:  # totals only: a histogram or per-position line would be drawn from an even split
        for m in (pooled, *requests.values()):
            for key in TOTALS_ONLY:
                m[key] = None
    pooled["per_position_basis"] = ("per-step accepted counts" if exact else
                                    "totals only: no per-step or per-position counts in the file")
    stated = (trace.header.get("imported") or {}).get("per_position")
    pooled["per_position_stated"] = stated if isinstance(stated, dict) else None
    return {"pooled": pooled, "requests": requests}


TOTALS_ONLY = ("acceptance_histogram", "num_accepted_tokens_per_pos", "per_position_rate", "per_position_conditional")


def fit_alpha(trace: Trace) -> tuple[float, str]:
    """Geometric per-position acceptance α and how it was fitted (see the module docstring)."""
    spec = drafting_steps(trace)
    if not spec:
        raise ValueError("no drafting steps: an autoregressive run has no acceptance to fit")
    lacks = _lacks(trace)
    A = sum(s["accepted"] for s in spec)
    if PER_STEP in lacks:
        ws = [s["window"] for s in spec if s["window"] is not None]
        K = max(1, round(sum(ws) / len(ws))) if ws else max(1, max(s["accepted"] for s in spec))
        target = A / len(spec)
        if target >= K:
            return 1.0, f"moment fit, K = {K} (every draft accepted)"
        lo, hi = 0.0, 1.0
        for _ in range(100):  # Σ_{i=1..K} α^i = E[accepted] is increasing in α
            mid = (lo + hi) / 2
            if expected_emitted(mid, K) - 1.0 < target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2, f"moment fit to the mean accepted per call, K = {K} (totals only)"
    if "window" in lacks:
        rejected = len(spec)
        how = "maximum likelihood, every step counted as ending in a rejection (windows unknown)"
    else:
        rejected = sum(1 for s in spec if s["accepted"] < s["window"])
        how = "maximum likelihood with censoring at each step's window"
    return (A / (A + rejected) if A + rejected else 0.0), how


def trace_cost_ratio(trace: Trace) -> float | None:
    """c from the trace's own timings, or None when it has none (imported runs)."""
    spec = drafting_steps(trace)
    if "t_draft_ms" in _lacks(trace) or "window" in _lacks(trace) or not spec:
        return None
    td, w = sum(s["t_draft_ms"] for s in spec), sum(s["window"] for s in spec)
    tv = [s["t_verify_ms"] for s in spec if s["t_verify_ms"] > 0]
    if not td or not w or not tv:
        return None
    return (td / w) / statistics.median(tv)


RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
NEEDS_C = ("c unknown: the file has no draft timings and the lab has no measured costs for this pair — give c "
           "(draft ÷ target cost per token; --c on the command line)")


def pair_cost_results(target: str, draft: str, results: Path = RESULTS):
    """(created, timing blocks, file name) of every `python -m engine costs` result for this exact pair (same
    model names) that holds timings; unreadable files are skipped."""
    for p in sorted(Path(results).glob("costs-*.json")):
        try:
            d = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict) or d.get("target") != target or d.get("draft") != draft:
            continue
        blocks = [b for b in d.get("by_threads", []) if isinstance(b, dict) and isinstance(b.get("timings"), dict)
                  and b.get("timings")]
        if blocks:
            yield str(d.get("created", "")), blocks, p.name


def pair_cost_ratio(target: str, draft: str, results: Path = RESULTS) -> tuple[float, str] | None:
    """c measured by `python -m engine costs` for this exact pair (same model names), newest result, the
    dense weights path where there are several, most threads; None when the lab has not measured it."""
    best = None
    for created, blocks, name in pair_cost_results(target, draft, results):
        b = max(blocks, key=lambda b: (b.get("weights") in (None, "dense"), b.get("threads") or 0))
        if best is None or created > best[0]:
            best = (created, b, name)
    if best is None:
        return None
    try:
        c = CostModel.from_timings(best[1]["timings"]).c
    except (KeyError, TypeError, ValueError):
        return None
    w = best[1].get("weights")
    return c, (f"measured for this pair ({best[2]}{f', {w} weights' if w else ''}, "
               f"{best[1].get('threads')} threads)")


def resolve_c(trace: Trace, c: float | None = None) -> tuple[float | None, str]:
    """c and where it came from: given; else the trace's own timings; else the lab's measured costs for
    the same pair; else (None, why) — never a silent default."""
    if c is not None:
        return c, "given"
    own = trace_cost_ratio(trace)
    if own is not None:
        return own, "from the trace's timings (draft ms per token ÷ median verify ms)"
    pair = pair_cost_ratio(str((trace.header.get("target") or {}).get("name", "")),
                           str((trace.header.get("draft") or {}).get("name", "")))
    if pair is not None:
        return pair
    return None, NEEDS_C


def diagnose(trace: Trace, c: float | None = None) -> dict[str, Any]:
    """Per-position acceptance, the fitted α, the recommended window and the accepted-length bound.
    Without a c (`resolve_c`) the window and the bound are None and `c_source` says what to give."""
    m = peer_metrics(trace)["pooled"]
    alpha, how = fit_alpha(trace)
    c, c_how = resolve_c(trace, c)
    spec = drafting_steps(trace)
    lacks = _lacks(trace)
    windows = sorted({s["window"] for s in spec if s["window"] is not None})
    best, bound = None, None
    if c is not None:
        theory = iid_theory(min(alpha, 1 - 1e-9), c)
        best = theory.loc[theory["speedup"].idxmax()]
        bound = bounds.renewal_bound([s["accepted"] for s in spec], c) if spec and PER_STEP not in lacks else None
    k_max = max(windows) if windows else max([s["accepted"] for s in spec] or [0])
    rec = int(best["gamma"]) if best is not None else None
    n_pos = len(m["num_accepted_tokens_per_pos"] or []) or k_max
    return {"metrics": m, "alpha": alpha, "alpha_fit": how, "acceptance_length": acceptance_lengths(trace),
            "geometric_per_position": [alpha ** (i + 1) for i in range(n_pos)],
            "c": c, "c_source": c_how, "recommended_window": rec,
            "recommended_speedup": float(best["speedup"]) if best is not None else None, "run_windows": windows,
            # the fit is measured up to the largest window the run drafted; past it, the geometric tail is assumed
            "extrapolated": rec is not None and rec > k_max, "largest_window_run": k_max,
            "bound": bound, "lacks": sorted(lacks),
            "bound_note": None if bound else ("needs c" if c is None else
                                              "needs per-step accepted counts, which this trace does not keep")}


def format_diagnosis(d: dict[str, Any], name: str) -> str:
    m = d["metrics"]
    rate = m["draft_acceptance_rate"]
    lines = [f"{name}: {m['num_spec_steps']} drafting steps, {m['num_accepted_draft_tokens']} accepted"
             + (f" of {m['num_draft_tokens']} drafted" if m["num_draft_tokens"] is not None else ""),
             f"  mean acceptance length (incl. bonus, vLLM's) {m['mean_acceptance_length']:.4f}   "
             f"acceptance rate (accepted ÷ drafted) {'n/a (windows unknown)' if rate is None else f'{rate:.4f}'}",
             f"  accepted histogram {m['acceptance_histogram'] if m['acceptance_histogram'] is not None else '—'}"]
    if m["num_accepted_tokens_per_pos"] is None:
        lines.append(f"  per position: none — {m['per_position_basis']} (totals, means and the rate are exact)")
        stated = m.get("per_position_stated")
        if stated:  # rates the engine printed over its whole lifetime: shown as it stated them, not drawn per step
            lines.append(f"  the engine's own per-position rates ({stated['basis']}, over {stated['steps']} steps): "
                         + ", ".join(f"{r:.3f}" for r in stated["rates"]))
    else:
        lines.append("  position   accepted   rate (÷ steps)   conditional   geometric α^i")
        for i, (p, r, b, g) in enumerate(zip(m["num_accepted_tokens_per_pos"], m["per_position_rate"],
                                             m["per_position_conditional"], d["geometric_per_position"])):
            lines.append(f"  {i:>8}   {p:>8}   {r:>14.4f}   {'—' if b is None else f'{b:.4f}':>11}   {g:>13.4f}")
    lines.append(f"  fitted α = {d['alpha']:.4f} ({d['alpha_fit']})")
    al = d["acceptance_length"]
    if al["token_weighted"] is not None:
        lines.append(f"  {LENGTH_NAMES['per_request_mean']} {al['per_request_mean']:.4f} over {al['requests']} "
                     f"requests; {LENGTH_NAMES['token_weighted']} {al['token_weighted']:.4f}")
    if d["c"] is None:
        lines.append(f"  recommended window: {d['c_source']}")
    else:
        ext = (f" — an extrapolation: the run never drafted more than {d['largest_window_run']}"
               if d["extrapolated"] else "")
        lines.append(f"  cost model (flat verify) at c = {d['c']:.3g} ({d['c_source']}) recommends window "
                     f"γ = {d['recommended_window']} (predicted {d['recommended_speedup']:.2f}× over autoregressive "
                     f"at c = {d['c']:.3g}){ext}; the run used {d['run_windows'] or '?'}")
    b = d["bound"]
    if b:
        lines.append(f"  accepted-length bound: oracle {b['s_oracle']:.3f}× ÷ best fixed γ = {b['best_gamma']} "
                     f"{b['s_best_fixed']:.3f}× = {b['bound']:.3f}: no per-step window policy gains more than "
                     f"{(b['bound'] - 1) * 100:.1f} % over the best fixed window on this distribution")
    else:
        lines.append(f"  accepted-length bound: {d['bound_note']}")
    if d["lacks"]:
        lines.append(f"  the trace lacks: {', '.join(d['lacks'])}")
    return "\n".join(lines)
