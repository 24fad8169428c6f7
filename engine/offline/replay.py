"""The one replay: any window policy (PACER included) walked over hindsight data, step by step.

Notation: γ window, A accepted run (excl. bonus) of a step with an unlimited window, M =
max_new_tokens, cost(γ) = γc + v(γ) (engine.offline.costmodel). One step:

    cap      = min(policy.propose(), limit)            exactly as engine.decode caps it
    drafted  = tokens drafted (the policy may stop early; oracle (a): min(A, cap); (b): min(A+1, cap))
    window   = drafted − dropped                       a trimming rule drops its failed drafts unverified
    accepted = min(A, window)                          excludes the bonus/correction token
    emitted  = min(accepted + 1, left)                 includes it
    cost     = cost(window) + dropped·c + calls·mb     calls = pre-verifier (M_B) calls of the step

Three step sources feed the same walk (`walk`):

- `reference_steps`: a reference run (engine.offline.reference), position by position. A step at
  position j has A = A(j), limit = M − j − 1, left = N − j, and the next step starts at j + emitted,
  so step boundaries depend on the policy. Draft signals: the teacher-forced ones for the first
  A(j)+1 drafts, then the recorded free-running tail after the mismatch — exactly what engine.decode
  would have shown the policy. Greedy references give **exact** counts (a test checks them against
  real decode runs).
- `recorded_steps`: PACER's held-out steps recorded with a fixed window W (engine.offline.steps).
  A = n (the recording's accepted count), limit = W, left = ∞, and every recorded step is replayed
  in order whatever the policy emitted: steps are samples of decoding situations (renewal-reward
  view, project notes §2.4), exact per step at any temperature (the drafts and the verifier's
  uniforms do not depend on the window). PACER gets each step's pre-computed M_B scores instead
  of running M_B (`Pacer.use_scores`).
- `copy_steps` (engine.offline.copy_source): a model-free drafter over one greedy autoregressive run.
  As `reference_steps`, but the step's block b_j is the drafter's own (limit = min(|b_j|, M − j − 1),
  A(j) = common prefix of b_j and y[j:], signals = the drafter's DraftInfo): exact for every policy.
  A run object that carries its own source (`step_source(req)`) is walked by it (`steps_for`).

Policies are the engine.policies classes themselves; `update` gets a stand-in result with
`.accepted`. Sampling references give **expected** values instead of a walk: a draft at position j
is accepted with probability β_j, and a dynamic programme over step starts (`_expected`) gives
E[calls], E[drafted], E[time] (speedup = E[AR time] / E[time]); only fixed γ and the oracles are
defined there.

Two approximations, both confined to the last step of a request that ended with EOS: the policy is
not consulted past the end of the output (it drafts up to its cap), and accepted counts are
censored at EOS (the real loop may accept drafts after EOS that it then discards).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Generator, Protocol, Sequence, runtime_checkable

import pandas as pd

from engine.offline.costmodel import CostModel
from engine.trace.reference_file import Reference
from engine.policies.base import DraftInfo, WindowPolicy, parse_policy
from engine.policies.simple import Fixed

EXACT_SCORES = "exact"  # score tag of a pre-verifier that is never wrong: 1 for the n accepted drafts, then 0


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
    """'oracle:a', 'oracle:b,max=16', or any engine.policies spec ('fixed:4', 'confidence:0.4')."""
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


def kind_of(pol: WindowPolicy | OracleSpec) -> str:
    return "oracle" if isinstance(pol, OracleSpec) else "fixed" if isinstance(pol, Fixed) else "adaptive"


def check_window(ref: Reference, pol: WindowPolicy | OracleSpec) -> None:
    """Refuse, before replaying, an adaptive policy whose window can outgrow the reference's recorded
    draft tails (max_window − 1 tokens after a mismatch): past them its signals are unknown. Fixed
    windows and the oracles need no tail (their counts are min(A, γ)), so they replay at any γ."""
    if kind_of(pol) == "adaptive" and ref.greedy and pol.max_window > ref.max_window:
        raise ValueError(f"policy {pol.spec!r} drafts up to {pol.max_window} tokens but the reference recorded "
                         f"draft signals for windows ≤ {ref.max_window}: add ,max={ref.max_window} to the spec "
                         f"or re-run the reference with --max-window {pol.max_window}")


# ---------------------------------------------------------------- step sources


@dataclass
class StepView:
    """What the walk may know about the step it is at: the hindsight of one decoding situation."""

    pos: int  # output position the step starts at (recorded steps: the step's index)
    accept_run: int  # A: drafts the target accepts from here with an unlimited window
    limit: int  # most drafts the step may have: M − pos − 1 (reference) or the recorded window W
    left: int | None  # output tokens left (emitted ≤ left); None = unbounded (recorded steps)
    signal: Callable[[int], DraftInfo | None]  # the i-th draft's signals (0-based); None = past the output
    scores: Sequence[float] | None = None  # M_B scores s_1..s_W of the step's drafts (recorded steps)
    drawn: bool = True  # False: drafts fixed by the context (copy drafters): a stop drops none (Keep, drawn=False)


# A source yields the step views of one request; it is sent each step's emitted count (a reference
# walks on by it, recorded steps ignore it).
StepSource = Generator[StepView, int, None]


def _signal(req: dict, pos: int, i: int) -> DraftInfo | None:
    """The i-th draft (0-based) of a step starting at pos, as engine.decode would show it."""
    a = req["accept_run"][pos]
    n = len(req["output_ids"])
    if i <= a:
        j = pos + i
        if j >= n:
            return None
        return DraftInfo(i + 1, req["draft_argmax"][j], req["q_top"][j], req["entropy"][j], None)
    if pos + a >= n:  # the run reaches the end of an EOS-ended output: nothing was drafted past it
        return None
    tail = req["tails_by_pos"][pos + a]
    k = i - a - 1
    if k >= len(tail["tokens"]):
        raise ValueError(f"request {req['request_id']}: window {i + 1} at position {pos} is longer than the "
                         f"recorded tail; re-run the reference with a larger --max-window")
    return DraftInfo(i + 1, tail["tokens"][k], tail["q_top"][k], tail["entropy"][k], None)


def reference_steps(req: dict, budget: int) -> StepSource:
    """One request of a greedy reference, position by position (the next step starts at pos + emitted)."""
    runs, n, pos = req["accept_run"], len(req["output_ids"]), 0
    while pos < n:
        p = pos
        pos += yield StepView(p, runs[p], max(0, budget - p - 1), n - p, lambda i, p=p: _signal(req, p, i))


@dataclass
class RecordedStep:
    """One recorded fixed-window step (engine.offline.steps.steps_from)."""

    n: int  # accepted (excl. bonus) in the recording
    W: int  # recorded window
    q: list[float]
    ent: list[float]
    s: dict[str, list[float]]  # M_B scores per model tag
    request: int
    temperature: float

    @cached_property
    def infos(self) -> list[DraftInfo]:
        # Built once: a sweep replays the same steps under hundreds of rules. Token ids are not
        # recorded (0): no window rule reads them.
        return [DraftInfo(i + 1, 0, self.q[i], self.ent[i], None) for i in range(self.W)]

    def scores(self, tag: str) -> list[float]:
        if tag == EXACT_SCORES:
            return [float(i < self.n) for i in range(self.W)]
        return self.s[tag]


def recorded_steps(steps: Sequence[RecordedStep], tag: str | None = None) -> StepSource:
    """Recorded steps in order, each replayed on its own; `tag` picks the M_B scores PACER is fed."""
    for k, st in enumerate(steps):
        yield StepView(k, st.n, st.W, None, st.infos.__getitem__, st.scores(tag) if tag else None)


def by_request(steps: Sequence[RecordedStep]) -> list[list[RecordedStep]]:
    """Consecutive steps of one request together: a policy's state (heuristic's γ) lives per request."""
    out: list[list[RecordedStep]] = []
    for st in steps:
        if out and out[-1][-1].request == st.request:
            out[-1].append(st)
        else:
            out.append([st])
    return out


# ---------------------------------------------------------------- the walk


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


def walk(source: StepSource, pol: WindowPolicy | OracleSpec, cost: CostModel,
         plan: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """Replay `pol` over one request's steps; one row per target call. `plan`: oracle (c)'s windows
    by position (`cost_optimal_windows`). A policy that reads draft hidden states (needs_hidden:
    PACER) is fed each step's recorded pre-verifier scores (`use_scores`) and reports its M_B calls
    (`mb_calls`); trace fields (step_fields) are not collected."""
    oracle = isinstance(pol, OracleSpec)
    if not oracle:  # a policy that prices its own steps (costaware) prices the replay's instead (WindowPolicy.price_with)
        pol.price_with(cost)
    # A policy that never overrides keep_drafting (fixed, heuristic) drafts up to its cap unasked.
    asks = not oracle and type(pol).keep_drafting is not WindowPolicy.keep_drafting
    if not oracle:
        pol.reset()
    steps: list[dict[str, Any]] = []
    view = next(source, None)
    while view is not None:
        a, stop, dropped, calls = view.accept_run, "cap", 0, 0
        if oracle:
            cap = min(pol.max_window or view.limit, view.limit)
            window = plan[view.pos] if plan is not None else min(a + (pol.variant == "b"), cap)
            stop = "oracle"
        else:
            cap = max(0, min(pol.propose(), view.limit))
            if pol.needs_hidden:  # a pre-verifier policy (PACER): fed the recorded M_B scores, no model runs
                if view.scores is None:
                    raise ValueError(f"policy {pol.spec!r} needs pre-verifier scores, which this step source lacks")
                pol.use_scores(view.scores)
            window = 0 if asks else cap
            while window < cap:
                info = view.signal(window)
                window += 1
                if info is None:  # past the end of an EOS-ended output: the policy is not consulted
                    continue
                if not pol.keep_drafting(info):
                    # as the drafter does: a trimming rule drops the failed drafts unverified (even at the cap)
                    dropped = min(pol.drop_on_stop(), window) if view.drawn else 0
                    if window < cap or dropped:
                        stop = "policy"
                        break
        drafted = window
        window -= dropped
        accepted = min(a, window)
        emitted = accepted + 1 if view.left is None else min(accepted + 1, view.left)
        if not oracle:
            pol.update(SimVerify(accepted, accepted + 1, accepted == window), window)
            calls = pol.mb_calls if pol.needs_hidden else 0  # a pre-verifier counts its own M_B calls
        steps.append({"step": len(steps), "pos": view.pos, "window_cap": cap, "window": window,
                      "drafted": drafted, "accepted": accepted, "emitted": emitted, "accept_run": a,
                      "stop_reason": stop, "mb_calls": calls,
                      # dropped drafts cost c each and are never verified
                      "cost": cost.step(window) + dropped * cost.c + calls * cost.mb})
        try:
            view = source.send(emitted)
        except StopIteration:
            view = None
    return steps


def walk_reference(req: dict, pol: WindowPolicy | OracleSpec, budget: int, cost: CostModel,
                   source: StepSource | None = None) -> list[dict[str, Any]]:
    """`walk` over one request of a greedy reference, or over `source` when given (`steps_for`); oracle
    (c) gets its hindsight plan from the request's A(j) first."""
    plan = (cost_optimal_windows(req["accept_run"], budget, cost, pol.max_window)
            if isinstance(pol, OracleSpec) and pol.variant == "c" else None)
    source = reference_steps(req, budget) if source is None else source
    return [{"request_id": req["request_id"], **s} for s in walk(source, pol, cost, plan)]


@runtime_checkable
class OwnSteps(Protocol):
    """A replayable run that carries its own step source (engine.offline.copy_source's runs)."""

    def step_source(self, req: dict) -> StepSource: ...


def steps_for(ref: "Reference | OwnSteps", req: dict) -> StepSource:
    """One request's step source: the run's own (`OwnSteps.step_source`: engine.offline.copy_source) or a
    reference's positions."""
    return ref.step_source(req) if isinstance(ref, OwnSteps) else reference_steps(req, ref.max_new_tokens)


# ---------------------------------------------------------------- references: per-step and per-request tables


def simulate_steps(ref: Reference, spec: str, cost: CostModel, request_id: int = 0) -> pd.DataFrame:
    """Per-step replay of one request of a greedy reference (exact): pos, window, accepted, emitted, cost."""
    if not ref.greedy:
        raise ValueError("per-step replay needs a greedy reference; sampling references give expected values only")
    pol = parse_spec(spec)
    check_window(ref, pol)
    req = ref.requests[request_id]
    return pd.DataFrame(walk_reference(req, pol, ref.max_new_tokens, cost, steps_for(ref, req)))


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
            steps = walk_reference(req, pol, ref.max_new_tokens, cost, steps_for(ref, req))
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
            "mean_emitted_per_call_incl_bonus": n / tot["target_calls"], "mean_accepted_per_call_excl_bonus": tot["accepted"] / tot["target_calls"],
            "ar_time": ar, "speedup": ar / tot["sim_time"],
            "sim_ms": tot["sim_time"] * cost.target_ms if cost.target_ms else math.nan,
            "value": "exact" if ref.greedy else "expected",
        })
    return pd.DataFrame(rows)
