"""Replay any window policy over a reference run (engine.offline.reference), position by position.

Notation: γ window, A(j) accepted run length from position j (excl. bonus), N output tokens,
M = max_new_tokens, cost(γ) = γc + v(γ) (engine.offline.costmodel). A step starting at position `pos`:

    cap      = min(policy.propose(), M − pos − 1)      exactly as engine.decode caps it
    window   = drafted tokens (policy may stop early; oracle (a): min(A, cap); (b): min(A+1, cap))
    accepted = min(A(pos), window)                     excludes the bonus/correction token
    emitted  = min(accepted + 1, N − pos)              includes it; the next step starts at pos + emitted

Step boundaries depend on the policy, so nothing is reused from another policy's steps.

Adaptive policies are the engine.policies.base classes themselves. They see DraftInfo built from the
recorded draft signals: the teacher-forced signals for the first A(pos)+1 drafts, then the recorded
free-running tail after the mismatch — exactly what engine.decode would have shown them — and
`update` gets a stand-in result with `.accepted`. Greedy references give **exact** counts (a
test checks them against real decode runs). Sampling references give **expected** values: a draft
at position j is accepted with probability β_j, and a dynamic programme over step start positions
gives E[calls], E[drafted], E[time] (speedup = E[AR time] / E[time], a ratio of expectations);
only fixed γ and the oracles are defined there.

Two approximations, both confined to the last step of a request that ended with EOS: the policy is
not consulted past the end of the output (it drafts up to its cap), and accepted counts are
censored at EOS (the real loop may accept drafts after EOS that it then discards).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from engine.offline.costmodel import CostModel
from engine.policies.base import DraftInfo, Fixed, WindowPolicy, parse_policy
from engine.offline.reference import Reference


@dataclass(frozen=True)
class SimVerify:
    """Stand-in for engine.verify.VerifyResult: the fields window policies read."""

    accepted: int  # excludes the bonus/correction token
    emitted: int  # includes it
    bonus: bool


@dataclass(frozen=True)
class OracleSpec:
    # "a": window = A (nothing wasted); "b": window = A + 1 (until mismatch); "c": the cheapest windows
    # in hindsight under the cost model (`cost_optimal_windows`; greedy references only)
    variant: str
    max_window: int | None = None  # None = unlimited, as in the closed form

    @property
    def spec(self) -> str:
        return f"oracle:{self.variant}" + (f",max={self.max_window}" if self.max_window else "")


def parse_spec(spec: str) -> WindowPolicy | OracleSpec:
    """'oracle:a', 'oracle:b,max=16', or any engine.policies.base spec ('fixed:4', 'confidence:0.4')."""
    name, _, rest = spec.strip().partition(":")
    if name != "oracle":
        pol = parse_policy(spec)
        if pol.needs_hidden:
            raise ValueError(f"policy {spec!r} needs draft hidden states, which a reference run does not record")
        return pol
    variant, mx = "a", None
    for part in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq and key in ("a", "b", "c"):
            variant = key
        elif key == "max" and value.isdigit() and int(value) >= 1:
            mx = int(value)
        else:
            raise ValueError(f"bad oracle spec {spec!r}: use oracle:a, oracle:b or oracle:c, optionally ,max=N")
    return OracleSpec(variant, mx)


def check_window(ref: Reference, pol: WindowPolicy | OracleSpec) -> None:
    """Refuse, before replaying, an adaptive policy whose window can outgrow the reference's recorded
    draft tails (max_window − 1 tokens after a mismatch): past them its signals are unknown. Fixed
    windows and the oracles need no tail (their counts are min(A, γ)), so they replay at any γ."""
    if kind_of(pol) == "adaptive" and ref.greedy and pol.max_window > ref.max_window:
        raise ValueError(f"policy {pol.spec!r} drafts up to {pol.max_window} tokens but the reference recorded "
                         f"draft signals for windows ≤ {ref.max_window}: add ,max={ref.max_window} to the spec "
                         f"or re-run the reference with --max-window {pol.max_window}")


def kind_of(pol: WindowPolicy | OracleSpec) -> str:
    return "oracle" if isinstance(pol, OracleSpec) else "fixed" if isinstance(pol, Fixed) else "adaptive"


def _signal(req: dict, pos: int, i: int) -> tuple[int, float, float] | None:
    """(token, q, entropy) the draft shows for the i-th draft (0-based) of a step starting at pos."""
    a = req["accept_run"][pos]
    n = len(req["output_ids"])
    if i <= a:
        j = pos + i
        if j >= n:
            return None
        return req["draft_argmax"][j], req["q_top"][j], req["entropy"][j]
    if pos + a >= n:  # the run reaches the end of an EOS-ended output: nothing was drafted past it
        return None
    tail = req["tails_by_pos"][pos + a]
    k = i - a - 1
    if k >= len(tail["tokens"]):
        raise ValueError(f"request {req['request_id']}: window {i + 1} at position {pos} is longer than the "
                         f"recorded tail; re-run the reference with a larger --max-window")
    return tail["tokens"][k], tail["q_top"][k], tail["entropy"][k]


def simulate_steps(ref: Reference, spec: str, cost: CostModel, request_id: int = 0) -> pd.DataFrame:
    """Per-step replay of one request of a greedy reference (exact): pos, window, accepted, emitted, cost."""
    if not ref.greedy:
        raise ValueError("per-step replay needs a greedy reference; sampling references give expected values only")
    pol = parse_spec(spec)
    check_window(ref, pol)
    req = ref.requests[request_id]
    return pd.DataFrame(_walk(req, pol, ref.max_new_tokens, cost))


def cost_optimal_windows(runs: list[int], budget: int, cost: CostModel, max_window: int | None = None) -> list[int]:
    """Hindsight windows that minimise the total cost of the whole output (oracle "c").

    With A(j) known, a step at j with window w ≤ A(j) costs cost(w) = wc + v(w) and emits w + 1
    tokens (a window past A(j) costs more and emits no more). F(N) = 0 and

        F(j) = min_{0 ≤ w ≤ min(A(j), cap_j)} cost(w) + F(min(N, j + w + 1)),   cap_j = min(max, M − j − 1)

    Returns the minimising w for every j (ties → the longer window). Oracle (a), w = A(j), is this
    only when a wide verify costs no more than a narrow one; under a steep measured verify curve it
    is not the fastest hindsight schedule, this is. Worked example: A = [3, 2, 1, 0], flat verify,
    c = 0.5: w = 3 at j = 0 costs 2.5 for all 4 tokens; w = 1 then w = 1 costs 1.5 + 1.5 = 3.0."""
    n = len(runs)
    f = [0.0] * (n + 1)
    best = [0] * n
    for j in range(n - 1, -1, -1):
        cap = max(0, min(max_window or budget, budget - j - 1))
        top = min(runs[j], cap)
        val, arg = math.inf, 0
        for w in range(top + 1):
            v = cost.step(w) + f[min(n, j + w + 1)]
            if v <= val:
                val, arg = v, w
        f[j], best[j] = val, arg
    return best


def _walk(req: dict, pol: WindowPolicy | OracleSpec, budget: int, cost: CostModel) -> list[dict[str, Any]]:
    runs = req["accept_run"]
    n = len(runs)
    steps: list[dict[str, Any]] = []
    pos = 0
    plan = (cost_optimal_windows(runs, budget, cost, pol.max_window)
            if isinstance(pol, OracleSpec) and pol.variant == "c" else None)
    if not isinstance(pol, OracleSpec):
        pol.reset()
    while pos < n:
        remaining = budget - pos
        a = runs[pos]
        stop = "cap"
        dropped = 0
        if isinstance(pol, OracleSpec):
            cap = max(0, min(pol.max_window or budget, remaining - 1))
            window = plan[pos] if plan is not None else min(a + (pol.variant == "b"), cap)
            stop = "oracle"
        else:
            cap = max(0, min(pol.propose(), remaining - 1))
            # A policy that never overrides keep_drafting (fixed, heuristic) drafts up to its cap.
            window = 0 if type(pol).keep_drafting is not WindowPolicy.keep_drafting else cap
            while window < cap:
                sig = _signal(req, pos, window)
                window += 1
                if sig is None:  # past the end of an EOS-ended output: the policy is not consulted
                    continue
                if not pol.keep_drafting(DraftInfo(window, sig[0], sig[1], sig[2], None)):
                    # as the drafter does: a trimming rule drops the failed drafts unverified (even at the cap)
                    dropped = min(pol.drop_on_stop(), window)
                    if window < cap or dropped:
                        stop = "policy"
                        break
        drafted = window
        window -= dropped
        accepted = min(a, window)
        emitted = min(accepted + 1, n - pos)
        if not isinstance(pol, OracleSpec):
            pol.update(SimVerify(accepted, accepted + 1, accepted == window), window)
            pol.step_fields()
        steps.append({"request_id": req["request_id"], "step": len(steps), "pos": pos, "window_cap": cap,
                      "window": window, "drafted": drafted, "accepted": accepted, "emitted": emitted,
                      "accept_run": a, "stop_reason": stop,
                      "cost": cost.step(window) + dropped * cost.c})  # dropped drafts cost c each, no verify
        pos += emitted
    return steps


def _expected(req: dict, pol: WindowPolicy | OracleSpec, budget: int, cost: CostModel) -> dict[str, float]:
    """Dynamic programme over step starts with acceptance probability a_j (β_j, or 0/1 if greedy)."""
    a = req["beta"] if "beta" in req else [float(x == y) for x, y in zip(req["draft_argmax"], req["output_ids"])]
    n = len(a)
    mass = [0.0] * (n + 1)
    mass[0] = 1.0
    tot = dict(target_calls=0.0, drafted=0.0, accepted=0.0, sim_time=0.0)
    oracle = isinstance(pol, OracleSpec)
    if oracle and pol.variant == "c":
        raise ValueError("oracle:c (cost-optimal hindsight windows) needs a greedy reference")
    for pos in range(n):
        w = mass[pos]
        if w <= 1e-15:
            continue
        limit = (pol.max_window or budget) if oracle else pol.max_window
        cap = max(0, min(limit, budget - pos - 1))
        surv = 1.0
        for k in range(cap + 1):  # k = accepted drafts
            acc_k = a[pos + k] if pos + k < n else 0.0
            pk = surv * (1.0 - acc_k) if k < cap else surv
            if pk > 0:
                window = cap if not oracle else (k if pol.variant == "a" else min(k + 1, cap))
                emitted = min(k + 1, n - pos)
                tot["target_calls"] += w * pk
                tot["drafted"] += w * pk * window
                tot["accepted"] += w * pk * min(k, window)
                tot["sim_time"] += w * pk * cost.step(window)
                mass[pos + emitted] += w * pk
            surv *= acc_k
            if surv <= 1e-15:
                break
    return tot


def simulate_policy(ref: Reference, spec: str, cost: CostModel) -> pd.DataFrame:
    """One row per request: target calls, emitted/accepted per call, wasted drafts, time, speedup.

    Times are in target single-token forwards (autoregressive = 1 per token); `sim_ms` multiplies by
    the measured t(1) when the cost model has it. Column `value` says 'exact' or 'expected'."""
    pol = parse_spec(spec)
    kind = kind_of(pol)
    if not ref.greedy and kind == "adaptive":
        raise ValueError(f"policy {spec!r}: adaptive policies are replayed only on greedy references")
    check_window(ref, pol)
    rows = []
    for req in ref.requests:
        n = len(req["output_ids"])
        if ref.greedy:
            steps = _walk(req, pol, ref.max_new_tokens, cost)
            tot = {"target_calls": float(len(steps)), "drafted": float(sum(s["drafted"] for s in steps)),
                   "accepted": float(sum(s["accepted"] for s in steps)),
                   "sim_time": sum(s["cost"] for s in steps)}
        else:
            tot = _expected(req, pol, ref.max_new_tokens, cost)
        ar = float(n) * cost.v(0)
        rows.append({
            "source": ref.source, "request_id": req["request_id"], "task": req.get("task", ""),
            "category": req.get("category", ""), "policy": pol.spec, "kind": kind,
            "gamma": pol.max_window if kind == "fixed" else math.nan, "cost": cost.label,
            "tokens": n, **tot,
            "wasted_draft": tot["drafted"] - tot["accepted"],
            "emitted_per_call": n / tot["target_calls"], "accepted_per_call": tot["accepted"] / tot["target_calls"],
            "ar_time": ar, "speedup": ar / tot["sim_time"],
            "sim_ms": tot["sim_time"] * cost.target_ms if cost.target_ms else math.nan,
            "value": "exact" if ref.greedy else "expected",
        })
    return pd.DataFrame(rows)
