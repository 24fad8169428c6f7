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
(Σ t_draft / Σ window ÷ median t_verify of the drafting steps), else the cost model's default.
"""

from __future__ import annotations

import statistics
from typing import Any

from engine.interop import bounds
from engine.interop.peer import PER_STEP
from engine.offline.costmodel import CostModel, expected_emitted, iid_theory
from engine.trace.format import Trace


def _lacks(trace: Trace) -> set[str]:
    return set((trace.header.get("imported") or {}).get("lacks") or [])


def drafting_steps(trace: Trace, steps: list[dict] | None = None) -> list[dict]:
    steps = trace.steps if steps is None else steps
    if "window" in _lacks(trace):
        return list(steps) if trace.header.get("draft") is not None else []
    return [s for s in steps if (s["window"] or 0) > 0]


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
    stated = [(e.get("reported") or {}).get("num_spec_tokens") for e in trace.ends.values()]
    if stated and all(type(x) is int and x >= k for x in stated):  # vLLM's K, even when no step drafted K
        k = max(stated)
        pooled = counts_of(spec, known, k)
    return {"pooled": pooled, "requests": {rid: counts_of(v, known, k) for rid, v in by.items()}}


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


def diagnose(trace: Trace, c: float | None = None) -> dict[str, Any]:
    """Per-position acceptance, the fitted α, the recommended window and the accepted-length bound."""
    m = peer_metrics(trace)["pooled"]
    alpha, how = fit_alpha(trace)
    c_how = "given"
    if c is None:
        c = trace_cost_ratio(trace)
        c_how = "from the trace's timings (draft ms per token ÷ median verify ms)"
    if c is None:
        c, c_how = CostModel().c, f"the cost model's default (the trace has no draft timings; set --c)"
    a_fit = min(alpha, 1 - 1e-9)
    theory = iid_theory(a_fit, c)
    best = theory.loc[theory["speedup"].idxmax()]
    spec = drafting_steps(trace)
    lacks = _lacks(trace)
    bound = bounds.renewal_bound([s["accepted"] for s in spec], c) if spec and PER_STEP not in lacks else None
    windows = sorted({s["window"] for s in spec if s["window"] is not None})
    return {"metrics": m, "alpha": alpha, "alpha_fit": how,
            "geometric_per_position": [alpha ** (i + 1) for i in range(len(m["num_accepted_tokens_per_pos"]))],
            "c": c, "c_source": c_how, "recommended_window": int(best["gamma"]),
            "recommended_speedup": float(best["speedup"]), "run_windows": windows,
            "bound": bound, "lacks": sorted(lacks),
            "bound_note": None if bound else "needs per-step accepted counts, which this trace does not keep"}


def format_diagnosis(d: dict[str, Any], name: str) -> str:
    m = d["metrics"]
    rate = m["draft_acceptance_rate"]
    lines = [f"{name}: {m['num_spec_steps']} drafting steps, {m['num_accepted_draft_tokens']} accepted"
             + (f" of {m['num_draft_tokens']} drafted" if m["num_draft_tokens"] is not None else ""),
             f"  mean acceptance length (incl. bonus, vLLM's) {m['mean_acceptance_length']:.4f}   "
             f"acceptance rate (accepted ÷ drafted) {'n/a (windows unknown)' if rate is None else f'{rate:.4f}'}",
             f"  accepted histogram {m['acceptance_histogram']}",
             "  position   accepted   rate (÷ steps)   conditional   geometric α^i"]
    for i, (p, r, b, g) in enumerate(zip(m["num_accepted_tokens_per_pos"], m["per_position_rate"],
                                         m["per_position_conditional"], d["geometric_per_position"])):
        lines.append(f"  {i:>8}   {p:>8}   {r:>14.4f}   {'—' if b is None else f'{b:.4f}':>11}   {g:>13.4f}")
    lines.append(f"  fitted α = {d['alpha']:.4f} ({d['alpha_fit']})")
    lines.append(f"  c = {d['c']:.3g} ({d['c_source']})")
    lines.append(f"  cost model (flat verify) recommends window γ = {d['recommended_window']} "
                 f"(predicted {d['recommended_speedup']:.2f}× over autoregressive); the run used {d['run_windows'] or '?'}")
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
