"""One answer per pair and task: which fixed window K to use, where K = 0 (plain autoregressive) wins,
and what the oracle leaves on the table — from any trace, ours or imported.

Notation: K drafted tokens per target call, a_i = P(draft i accepted | drafts 1..i−1 accepted),
E(K) = 1 + Σ_{i≤K} Π_{j≤i} a_j (emitted per call, bonus included), cost(K) = K·c + v(K) in target
single-token forwards (engine.offline.costmodel), S(K) = E(K) / cost(K) (S(0) = 1 = AR).

Two sources, the better one used:

- a greedy **reference run** (engine.offline.reference): every fixed K replayed exactly
  (engine.offline.analysis.window_table), and the oracle is the *cost-optimal hindsight schedule*
  (oracle (c), engine.offline.oracles);
- **decode traces** (any policy, imported ones included): a_i estimated from the steps, censoring
  handled by counting only steps whose window reached i (a_i = #[accepted ≥ i] / #[accepted ≥ i−1],
  over steps with window ≥ i, Beta(1, 1)-smoothed; past the longest recorded window a_i stays at its
  last value), and the oracle is the *accepted-length bound* of those steps.

Costs: the pair's decode traces when they carry timings (CostModel.from_steps when they hold AR and
two window sizes, else t(1) = median verify of the narrowest steps, c = Σ t_draft / Σ drafted / t(1),
flat verify); a reference's own timing block; otherwise hardware-free units (flat verify, c = the
user's `c`, default 0.1), said in a one-line note. A task is advised K = 0 when no K beats AR there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import pandas as pd

from engine.offline.costmodel import CostModel
from engine.offline.oracles import ACCEPTED_BOUND, CONFIDENCE_CEILING, COST_OPTIMAL, accepted_length_bound

DEFAULT_C = 0.1  # hardware-free fallback: a draft ~10× cheaper than its target (flat verify, Leviathan)
MAX_K = 8  # windows advised; longer ones rarely pay on the CPUs this lab measures


@dataclass(frozen=True)
class Advice:
    pair: str
    k: int  # the fixed window to use overall (0 = autoregressive)
    speedup: float  # S(k) vs AR, in `units`
    per_task: dict[str, tuple[int, float]] = field(default_factory=dict)  # task → (best K, its S)
    oracle: str = ""  # which oracle (engine.offline.oracles names)
    oracle_speedup: float | None = None
    units: str = "measured"  # measured | hardware-free
    note: str = ""
    source: str = ""  # reference | traces
    rule: str | None = None  # the confidence ceiling's rule (engine.offline.confidence_ceiling; references only)
    rule_speedup: float | None = None  # … and its speedup: what a window reading the draft's confidence can reach
    runnable: tuple[str, float] | None = None  # the best policy spec of the ceiling a user can run, its speedup

    @property
    def left_on_table(self) -> float | None:
        """Share the oracle gains over the advice: S_oracle / max(S(k), 1) − 1."""
        if self.oracle_speedup is None or not math.isfinite(self.oracle_speedup):
            return None
        return max(0.0, self.oracle_speedup / max(self.speedup, 1.0) - 1.0)

    def line(self) -> str:
        """'use K = 2 (1.31× AR); K = 0 on translation; the oracle leaves 9 % on the table'."""
        head = "use K = 0 (plain autoregressive: no window beats AR)" if self.k == 0 else \
            f"use K = {self.k} ({self.speedup:.2f}× AR)"
        parts = [head]
        others = {}
        for task, (k, s) in self.per_task.items():
            if k != self.k:
                others.setdefault(k, []).append(task)
        for k, tasks in sorted(others.items()):
            parts.append(f"K = {k} on {', '.join(sorted(tasks))}")
        if self.rule is not None and self.rule_speedup is not None and self.rule_speedup > max(self.speedup, 1.0):
            same = self.runnable is not None and self.runnable[0].split(",")[0] == self.rule
            rule = self.runnable[0] if same else self.rule  # HF's rule: said as the spec to run
            tail = f"; {self.runnable[0]} reaches {self.runnable[1]:.2f}×" if self.runnable and not same else ""
            parts.append(f"a window reading the draft's confidence reaches at most {self.rule_speedup:.2f}× "
                         f"(the {CONFIDENCE_CEILING}: {rule}{tail})")
        if (left := self.left_on_table) is not None:
            parts.append(f"the {self.oracle} leaves {100 * left:.0f} % on the table")
        text = "; ".join(parts)
        if self.units != "measured":
            text += f" [{self.units}]"
        return text


def _pair(header: dict) -> str:
    t = (header.get("target") or {}).get("name") or "?"
    d = (header.get("draft") or {}).get("name")
    return f"{t} ← {d}" if d else t


def conditional_acceptance(steps: pd.DataFrame, max_k: int = MAX_K) -> list[float]:
    """a_1..a_max_k from steps with known windows (module doc); [] when no step drafted."""
    s = steps[steps["window"].notna() & (steps["window"] > 0)]
    if not len(s):
        return []
    w, a = s["window"].to_numpy(), s["accepted"].to_numpy()
    out = []
    for i in range(1, max_k + 1):
        reach = (w >= i) & (a >= i - 1)
        if not reach.any():
            out.append(out[-1])
            continue
        out.append((float((a[reach] >= i).sum()) + 1.0) / (float(reach.sum()) + 2.0))
    return out


def speedups(acc: Sequence[float], cost: CostModel) -> list[float]:
    """S(K) for K = 0..len(acc)."""
    e, surv, out = 1.0, 1.0, [1.0]  # AR against itself: S(0) = 1 whatever the fit made of v(0)
    for k, a in enumerate(acc, 1):
        surv *= a
        e += surv
        out.append(e / cost.step(k) * cost.v(0))
    return out


def trace_cost(frame: pd.DataFrame, c: float | None, max_k: int = MAX_K) -> tuple[CostModel, str]:
    """(cost model, units) from decode-trace steps (module doc)."""
    timed = frame[(frame["t_verify_ms"] > 0) & frame["window"].notna()] if len(frame) else frame
    if c is None and len(timed) and timed["window"].max() > 0:
        try:
            cm = CostModel.from_steps(timed["window"].astype(int), timed["t_draft_ms"], timed["t_verify_ms"],
                                      max_window=max_k)
            return cm, "measured"
        except ValueError:
            narrow = timed[timed["window"] == timed["window"].min()]
            t1 = float(narrow["t_verify_ms"].median())
            drafted = float(timed["window"].sum())
            ratio = float(timed["t_draft_ms"].sum()) / drafted / t1 if drafted else DEFAULT_C
            return CostModel(c=ratio, target_ms=t1, label=f"trace c={ratio:.3g} flat"), "measured"
    return CostModel.flat(DEFAULT_C if c is None else c), "hardware-free"


def from_traces(traces: Sequence[Any], c: float | None = None, max_k: int = MAX_K) -> Advice:
    """Advice from decode traces alone (module doc)."""
    from engine.offline.analysis import trace_accepted_frame

    spec = [t for t in traces if (t.header.get("draft") or {}).get("name")]
    if not spec:
        raise ValueError("advice needs at least one speculative trace (one with a draft) or a reference run")
    frame = trace_accepted_frame(traces)
    known = frame[frame["window"].notna()]
    if not len(known[known["window"] > 0]):
        raise ValueError("no step of these traces records its window: the acceptance per position is unknown")
    cost, units = trace_cost(frame, c, max_k)
    note = "" if units == "measured" else (
        f"the traces carry no timings: speedups in hardware-free units (flat verify, c = {cost.c:g}; set --c)")
    acc = conditional_acceptance(known, max_k)
    overall = speedups(acc, cost)
    k = max(range(len(overall)), key=lambda i: (overall[i], -i))
    per_task = {}
    for task, g in known.groupby("task"):
        a = conditional_acceptance(g, max_k)
        if a:
            s = speedups(a, cost)
            kt = max(range(len(s)), key=lambda i: (s[i], -i))
            per_task[str(task)] = (kt, s[kt])
    bound = accepted_length_bound(known[known["window"] > 0], cost)
    return Advice(_pair(spec[0].header), k, overall[k], per_task, ACCEPTED_BOUND, bound, units, note, "traces")


def from_window_table(wt: pd.DataFrame, pair: str, units: str = "measured", note: str = "",
                      ceiling: pd.DataFrame | None = None) -> Advice:
    """Advice from engine.offline.analysis.window_table rows (a reference replay): best fixed K per
    task (K = 0 where none beats 1×) and the cost-optimal hindsight schedule (oracle:c) as the oracle;
    with `ceiling` (engine.offline.confidence_ceiling), what a window reading the draft's confidence reaches."""
    def best(g: pd.DataFrame) -> tuple[int, float]:
        f = g[g["kind"] == "fixed"]
        row = f.loc[f["speedup"].idxmax()]
        return (int(row["gamma"]), float(row["speedup"])) if row["speedup"] > 1.0 else (0, 1.0)

    k, s = best(wt[wt["task"] == "all"])
    per_task = {t: best(g) for t, g in wt[wt["task"] != "all"].groupby("task")}
    oc = wt[(wt["task"] == "all") & (wt["policy"].astype(str).str.startswith("oracle:c"))]
    if not len(oc):
        oc = wt[(wt["task"] == "all") & (wt["policy"].astype(str).str.startswith("oracle:a"))]
    osp = float(oc["speedup"].iloc[0]) if len(oc) else None
    top = ceiling[ceiling["task"] == "all"] if ceiling is not None else pd.DataFrame()
    rule, rs = (str(top["ceiling_rule"].iloc[0]), float(top["s_ceiling"].iloc[0])) if len(top) else (None, None)
    run = (str(top["runnable_rule"].iloc[0]), float(top["s_runnable"].iloc[0])) if len(top) else None
    return Advice(pair, k, s, per_task, COST_OPTIMAL, osp, units, note, "reference", rule, rs, run)


def advise(items: Iterable[Any], c: float | None = None, max_k: int = MAX_K) -> Advice:
    """Advice from loaded items: engine.trace.reference_file.Reference and/or engine.trace Trace
    objects (engine.offline.analysis.load_any loads either). A greedy reference wins; decode traces
    then only price it (in-run costs)."""
    from engine.offline.analysis import cost_for, has_timings, in_run_cost, window_table
    from engine.trace.reference_file import Reference

    if c is not None and not (isinstance(c, (int, float)) and math.isfinite(c) and c > 0):
        raise ValueError(f"cost ratio c must be a positive number, got {c!r}")
    if not 1 <= max_k <= 64:
        raise ValueError(f"max K must be in [1, 64], got {max_k}")
    items = list(items)
    refs = [x for x in items if isinstance(x, Reference) and x.greedy]
    traces = [x for x in items if not isinstance(x, Reference)]
    if not refs:
        return from_traces(traces, c, max_k)
    note, units = "", "measured"
    cost: Any
    if c is not None:
        cost, units, note = float(c), "hardware-free", f"priced at a flat c = {c:g} (--c)"
    else:
        try:
            cost = in_run_cost(traces, refs, max_window=max_k)
        except ValueError:
            if has_timings(refs):
                cost = "measured"
            else:
                cost, units = DEFAULT_C, "hardware-free"
                note = f"the reference carries no timings: speedups in hardware-free units (flat verify, c = {DEFAULT_C:g}; set --c)"
    cost_for(refs[0], cost)  # a bad cost spec fails here, in one line
    wt = window_table(refs, cost, gammas=range(1, max_k + 1), policies=())
    ceiling = None
    if min(r.max_window for r in refs) >= 2:  # the rules replay the recorded draft signals (tails)
        from engine.offline.confidence_ceiling import confidence_ceiling

        ceiling = confidence_ceiling(refs, lambda r: cost_for(r, cost), max_window=max_k)
    return from_window_table(wt, _pair(refs[0].header), units, note, ceiling)


def check_against(adv: Advice, result: dict, temperature: float = 0.0) -> dict[str, Any]:
    """How well the advice predicts a measured run: the overall row of `fixed:K` (K = the advised window;
    `ar` for K = 0) in a bench result (engine.bench.bench.run_bench) at `temperature`, beside S(K).

    Returns {k, config, predicted, measured, modelled, error} with error = predicted / measured − 1 (the
    target: |error| ≤ 10 %). Worked example: advice "use K = 2 (1.31× AR)" against a run whose
    fixed:2 row reads 1.25× → error +4.8 %."""
    config = "ar" if adv.k == 0 else f"fixed:{adv.k}"
    rows = [r for r in result.get("rows") or []
            if r.get("task") == "overall" and r.get("config") == config
            and abs(float(r.get("temperature", -1)) - temperature) < 1e-9]
    if not rows:
        have = sorted({str(r.get("config")) for r in result.get("rows") or []})
        raise ValueError(f"the result has no overall {config} row at T = {temperature:g} to check the advice "
                         f"against (it has {', '.join(have) or 'no rows'})")
    row = rows[0]
    measured = float(row["speedup_vs_ar"])
    modelled = row.get("modelled_speedup_vs_ar")
    return {"k": adv.k, "config": config, "predicted": adv.speedup, "measured": measured,
            "modelled": None if modelled is None else float(modelled), "error": adv.speedup / measured - 1.0}
