"""Window analysis over reference runs: oracle vs best fixed γ vs adaptive policies (the "1.4×").

Notation: γ window, α acceptance, p target, q draft, c draft/target cost ratio, A(j) the accepted
run length from output position j ("accepted" excludes the bonus token, "emitted" includes it).
Speedups are ratios of summed times over all requests of a group: S = Σ AR time / Σ simulated time
(autoregressive = 1 target forward per token). For a greedy reference every number is exact; for a
sampling reference fixed γ and the oracles are expected values under per-position acceptance β_j
(column `value`). Oracles: (a) window = A(j), nothing wasted; (b) window = A(j)+1, until mismatch.

    headroom = S_oracle / max_γ S_fixed(γ)          (PACER's "up to 1.4×")
    position = (S_policy − S_fixed*) / (S_oracle − S_fixed*)    0 = best fixed, 1 = oracle

Pure functions returning pandas DataFrames, for the CLI (`python -m engine analyze`) and the app:
load_reference, positions_frame, simulate_policy, window_table, oracle_ratio_table,
variability_table, iid_theory, CostModel, trace_table, trace_accepted_frame.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence, Union

import numpy as np
import pandas as pd
from tqdm import tqdm

from engine.offline.costmodel import CostModel, iid_theory, leviathan_speedup, oracle_speedup
from engine.trace.reference_file import Reference, load_reference
from engine.offline.replay import kind_of, parse_spec, simulate_policy, simulate_steps, steps_for, walk_reference

__all__ = ["CostModel", "DEFAULT_COSTS", "DEFAULT_POLICIES", "iid_theory", "load_reference", "oracle_ratio_table",
           "policy_positions", "positions_frame", "simulate_policy", "simulate_steps", "trace_accepted_frame",
           "trace_table", "variability_table", "window_table"]

# The engine's adaptive policies at their documented defaults: the app's comparison set.
DEFAULT_POLICIES = ("heuristic", "confidence", "cumulative", "entropy", "costaware")  # costaware: the lab's own answer
# "measured" = each reference's own timings; the others are Leviathan-style flat-verify ratios.
DEFAULT_COSTS = ("measured", 0.02, 0.05, 0.1, 0.2)
ORACLES = ("oracle:a", "oracle:b", "oracle:c")  # c: cost-optimal in hindsight, greedy references only

Refs = Union[Reference, Sequence[Reference]]
CostLike = Union[CostModel, float, str]


def _refs(refs: Refs) -> list[Reference]:
    out = [refs] if isinstance(refs, Reference) else list(refs)
    if not out:
        raise ValueError("no reference runs given")
    return out


def cost_for(ref: Reference, cost: CostLike) -> CostModel:
    """A CostModel as given; a float = flat c; 'measured' = the reference's own timings (c and v);
    '0.05@measured' = user-set c with the reference's measured verify curve v(γ)."""
    if isinstance(cost, CostModel):
        return cost
    if isinstance(cost, str):
        if cost == "measured":
            return CostModel.from_timings(ref.header.get("timings"))
        c, at, what = cost.partition("@")
        try:
            value = float(c)
        except ValueError:
            value = None
        if value is None or (at and what != "measured"):
            raise ValueError(f"cost must be a number, 'measured' or 'C@measured', got {cost!r}")
        return CostModel.from_timings(ref.header.get("timings"), c=value) if at else CostModel.flat(value)
    return CostModel.flat(float(cost))


def _label(cost: CostLike, refs: list[Reference]) -> str:
    if isinstance(cost, CostModel):
        return cost.label
    labels = {cost_for(r, cost).label for r in refs}
    return labels.pop() if len(labels) == 1 else f"{cost} (per reference)"


def has_timings(refs: Refs) -> bool:
    return all((r.header.get("timings") or {}).get("target_ms_by_tokens") for r in _refs(refs))


# ------------------------------------------------------------------ positions and A(j)


def positions_frame(refs: Refs) -> pd.DataFrame:
    """One row per output position: task, token, draft argmax, match, A(j) (exact) or E[A(j)] (expected),
    draft confidence q_top (prob of its argmax) and q_target (prob of the target token), entropy, β."""
    frames = []
    for ref in _refs(refs):
        for req in ref.requests:
            y, d = req["output_ids"], req["draft_argmax"]
            n = len(y)
            match = np.array([int(a == b) for a, b in zip(d, y)])
            if ref.greedy:
                beta = match.astype(float)
                runs = np.array(req["accept_run"], dtype=float)
            else:
                beta = np.array(req["beta"], dtype=float)
                runs = np.zeros(n)
                acc = 0.0
                for j in range(n - 1, -1, -1):  # E[A(j)] = β_j (1 + E[A(j+1)])
                    acc = beta[j] * (1.0 + acc)
                    runs[j] = acc
            frames.append(pd.DataFrame({
                "source": ref.source, "request_id": req["request_id"], "task": req.get("task", ""),
                "category": req.get("category", ""), "pos": np.arange(n), "token": y, "draft_argmax": d,
                "match": match, "accept_run": runs, "q_top": req["q_top"], "q_target": req["q_target"],
                "entropy": req["entropy"], "beta": beta, "value": "exact" if ref.greedy else "expected"}))
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------ policy tables


def _sum_rows(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    sums = ["tokens", "target_calls", "drafted", "accepted", "wasted_draft", "sim_time", "ar_time", "sim_ms"]
    g = df.groupby(keys, sort=False, dropna=False)
    out = g[sums].sum(min_count=1).reset_index()
    out["requests"] = g.size().values
    out["mean_emitted_per_call_incl_bonus"] = out["tokens"] / out["target_calls"]
    out["mean_accepted_per_call_excl_bonus"] = out["accepted"] / out["target_calls"]
    out["speedup"] = out["ar_time"] / out["sim_time"]
    out["value"] = g["value"].agg(lambda v: "exact" if (v == "exact").all() else "expected").values
    return out


def fit_to_references(spec: str, refs: list[Reference]) -> str:
    """An adaptive policy capped at the references' recorded window (`heuristic` → `heuristic:max=8` on a
    max-window-8 reference), so its label says it was capped rather than the replay failing midway;
    fixed windows and the oracles are returned unchanged (they need no recorded tails)."""
    pol = parse_spec(spec)
    limit = min((r.max_window for r in refs if r.greedy), default=None)
    if kind_of(pol) != "adaptive" or limit is None or pol.max_window <= limit:
        return spec
    return f"{spec}{',' if ':' in spec else ':'}max={limit}"


def _per_request(refs: list[Reference], cost: CostLike, specs: Iterable[str], progress: bool) -> pd.DataFrame:
    specs = [fit_to_references(s, refs) for s in specs]
    greedy = all(r.greedy for r in refs)
    frames = []
    for spec in tqdm(specs, desc="simulate", unit="policy", disable=not progress):
        if not greedy and kind_of(parse_spec(spec)) == "adaptive":
            continue  # adaptive replay needs the recorded greedy draft signals
        for ref in refs:
            frames.append(simulate_policy(ref, spec, cost_for(ref, cost)))
    return pd.concat(frames, ignore_index=True)


def window_table(refs: Refs, cost: CostLike = "measured", gammas: Iterable[int] = range(1, 17),
                 policies: Iterable[str] = DEFAULT_POLICIES, by_task: bool = True,
                 progress: bool = False) -> pd.DataFrame:
    """One row per (task, policy) plus task 'all': fixed:γ for every γ, oracle:a/b, and `policies`.

    Columns: target_calls, mean_emitted_per_call_incl_bonus (incl. bonus), mean_accepted_per_call_excl_bonus (excl.), drafted,
    wasted_draft, sim_time (target forwards), speedup vs autoregressive, rel_best_fixed, value."""
    refs = _refs(refs)
    oracles = ORACLES if all(r.greedy for r in refs) else ORACLES[:2]
    specs = [f"fixed:{g}" for g in gammas] + list(oracles) + list(policies)
    per = _per_request(refs, cost, specs, progress)
    keys = ["policy", "kind", "gamma"]
    groups = [_sum_rows(per, keys).assign(task="all")]
    if by_task:
        groups.append(_sum_rows(per, ["task"] + keys))
    out = pd.concat(groups, ignore_index=True)
    best = out[out["kind"] == "fixed"].groupby("task")["speedup"].max()
    out["rel_best_fixed"] = out["speedup"] / out["task"].map(best)
    out["cost"] = _label(cost, refs)
    cols = ["task", "policy", "kind", "gamma", "requests", "tokens", "target_calls", "mean_emitted_per_call_incl_bonus",
            "mean_accepted_per_call_excl_bonus", "drafted", "wasted_draft", "sim_time", "ar_time", "sim_ms", "speedup",
            "rel_best_fixed", "cost", "value"]
    if not all(r.greedy for r in refs):
        out.attrs["note"] = "sampling reference: adaptive policies omitted; values are expectations"
    return out[cols]


def _alpha(refs: list[Reference]) -> pd.Series:
    pf = positions_frame(refs)
    s = pf.groupby("task")["beta"].mean()
    s["all"] = pf["beta"].mean()
    return s


def policy_positions(refs: Refs, costs: Sequence[CostLike] = DEFAULT_COSTS, gammas: Iterable[int] = range(1, 17),
                     policies: Iterable[str] = DEFAULT_POLICIES, progress: bool = False) -> pd.DataFrame:
    """Long table, one row per (task, cost, policy): speedup, the oracle (a) and best fixed speedups,
    and position = (S_policy − S_fixed*) / (S_oracle(a) − S_fixed*)."""
    return _ratio_tables(refs, costs, gammas, policies, progress)[1]


def oracle_ratio_table(refs: Refs, costs: Sequence[CostLike] = DEFAULT_COSTS, gammas: Iterable[int] = range(1, 17),
                       policies: Iterable[str] = DEFAULT_POLICIES, progress: bool = False) -> pd.DataFrame:
    """The 1.4× table: per task (and 'all') and cost model, best fixed γ*, S_fixed*, S_oracle(a)/(b),
    ratio_a/ratio_b = S_oracle/S_fixed*, the i.i.d. closed-form ratios (flat verify) at the same α
    and c, and one `pos:<policy>` column per adaptive policy (0 = best fixed, 1 = oracle (a)).
    'measured' is skipped when a reference has no timings."""
    return _ratio_tables(refs, costs, gammas, policies, progress)[0]


def _ratio_tables(refs, costs, gammas, policies, progress):
    refs = _refs(refs)
    gammas, policies = list(gammas), list(policies)
    alpha = _alpha(refs)
    wide, long = [], []
    for cost in costs:
        if isinstance(cost, str) and cost.endswith("measured") and not has_timings(refs):
            continue
        wt = window_table(refs, cost, gammas, policies, progress=progress)
        for task, g in wt.groupby("task", sort=False):
            fixed = g[g["kind"] == "fixed"]
            bf = fixed.loc[fixed["speedup"].idxmax()]
            sa = float(g.loc[g["policy"] == "oracle:a", "speedup"].iloc[0])
            sb = float(g.loc[g["policy"] == "oracle:b", "speedup"].iloc[0])
            sc = g.loc[g["policy"] == "oracle:c", "speedup"]
            sc = float(sc.iloc[0]) if len(sc) else math.nan
            sf = float(bf["speedup"])
            c = float(np.mean([cost_for(r, cost).c for r in refs]))
            a = float(min(alpha.get(task, math.nan), 0.999999))
            best_iid = max(leviathan_speedup(a, k, c) for k in gammas)
            row = {"task": task, "cost": wt["cost"].iloc[0], "c": c, "alpha": a, "best_gamma": int(bf["gamma"]),
                   "s_best_fixed": sf, "s_oracle_a": sa, "s_oracle_b": sb, "s_oracle_c": sc, "ratio_a": sa / sf,
                   "ratio_b": sb / sf, "ratio_c": sc / sf,
                   "iid_ratio_a": oracle_speedup(a, c, "a") / best_iid,
                   "iid_ratio_b": oracle_speedup(a, c, "b") / best_iid, "value": bf["value"]}
            for _, p in g[g["kind"] == "adaptive"].iterrows():
                pos = (p["speedup"] - sf) / (sa - sf) if sa > sf else math.nan
                row[f"pos:{p['policy']}"] = pos
                long.append({"task": task, "cost": row["cost"], "c": c, "policy": p["policy"],
                             "speedup": p["speedup"], "s_best_fixed": sf, "s_oracle_a": sa, "position": pos,
                             "value": p["value"]})
            wide.append(row)
    return pd.DataFrame(wide), pd.DataFrame(long)


# ------------------------------------------------------------------ variability


def _spread(x: np.ndarray, prefix: str) -> dict[str, float]:
    if len(x) == 0:
        return {f"{prefix}_{k}": math.nan for k in ("mean", "std", "median", "q25", "q75", "iqr", "p90", "max")}
    q25, med, q75, p90 = np.percentile(x, [25, 50, 75, 90])
    return {f"{prefix}_mean": float(x.mean()), f"{prefix}_std": float(x.std()), f"{prefix}_median": float(med),
            f"{prefix}_q25": float(q25), f"{prefix}_q75": float(q75), f"{prefix}_iqr": float(q75 - q25),
            f"{prefix}_p90": float(p90), f"{prefix}_max": float(x.max())}


def variability_table(refs: Refs, cost: CostLike | None = None, gammas: Iterable[int] = range(1, 17)) -> pd.DataFrame:
    """Per task and 'all': the spread of A(j) over all positions and of the per-step best window
    (A at the oracle-(a) step starts, greedy only), and how often that best window differs from the
    global best fixed γ* (frac_differs; frac_shorter = A < γ* wastes drafts, frac_longer = A > γ*
    leaves tokens for the next call). `cost` picks γ*; default: measured if available, else c = 0.05."""
    refs = _refs(refs)
    if cost is None:
        cost = "measured" if has_timings(refs) else 0.05
    wt = window_table(refs, cost, gammas, policies=())
    fixed = wt[wt["kind"] == "fixed"]
    gstar = fixed.loc[fixed.groupby("task")["speedup"].idxmax()].set_index("task")["gamma"]
    pf = positions_frame(refs)
    starts = []
    for ref in refs:
        if not ref.greedy:
            continue
        for req in ref.requests:
            for s in walk_reference(req, parse_spec("oracle:a"), ref.max_new_tokens, CostModel.flat(0.0),
                                    steps_for(ref, req)):
                starts.append({"task": req.get("task", ""), "best_window": s["accept_run"]})
    sf = pd.DataFrame(starts, columns=["task", "best_window"])
    rows = []
    for task in ["all"] + sorted(pf["task"].unique()):
        p = pf if task == "all" else pf[pf["task"] == task]
        s = sf if task == "all" else sf[sf["task"] == task]
        g = int(gstar[task])
        bw = s["best_window"].to_numpy(dtype=float)
        rows.append({"task": task, "positions": len(p), "alpha": float(p["beta"].mean()),
                     "frac_A0": float((p["accept_run"] < 0.5).mean()),
                     **_spread(p["accept_run"].to_numpy(dtype=float), "A"),
                     "oracle_steps": len(s), **_spread(bw, "best_window"), "best_fixed_gamma": g,
                     "frac_differs": float((bw != g).mean()) if len(bw) else math.nan,
                     "frac_shorter": float((bw < g).mean()) if len(bw) else math.nan,
                     "frac_longer": float((bw > g).mean()) if len(bw) else math.nan,
                     "cost": wt["cost"].iloc[0], "value": p["value"].iloc[0] if (p["value"] == "exact").all()
                     else "expected"})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ ordinary decode traces


def load_any(path) -> tuple[str, object]:
    """('reference', Reference) or ('trace', engine.trace.format.Trace), by the first line's schema."""
    import json
    from pathlib import Path

    from engine.trace.format import load_trace

    p = Path(path)
    if p.suffix == ".parquet":
        return "trace", load_trace(p)
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    with open(p, "rb") as f:
        first = f.readline()
    try:
        schema = json.loads(first).get("schema")
    except (ValueError, AttributeError):
        schema = None
    return ("reference", load_reference(p)) if schema == "speclab.reference" else ("trace", load_trace(p))


def _name(info) -> str | None:
    return (info or {}).get("name") if isinstance(info, dict) else None


def in_run_traces(traces, refs: Refs) -> list:
    """The decode traces of the references' pair: the same target, and no draft (autoregressive) or
    the same draft. Refuses references of more than one pair."""
    refs = _refs(refs)
    pairs = {(_name(r.header.get("target")), _name(r.header.get("draft"))) for r in refs}
    if len(pairs) != 1:
        raise ValueError("an in-run cost model needs references of one target/draft pair")
    (tname, dname), = pairs
    return [t for t in traces if _name(t.header.get("target")) == tname and _name(t.header.get("draft")) in (None, dname)]


def in_run_cost(traces, refs: Refs, c: float | None = None, max_window: int | None = None) -> CostModel:
    """The cost model real decoding paid on the references' pair (`CostModel.from_steps`) from the
    steps of `in_run_traces`: autoregressive traces of the target give t(1); the pair's speculative
    traces give v(γ) and c. `c` sets the draft cost per token instead (0 for a copy drafter, whose
    per-step scan stays in v); `max_window` the longest window priced (default: the references')."""
    refs = _refs(refs)
    use = in_run_traces(traces, refs)
    steps = [s for t in use for s in t.steps if s.get("window") is not None]
    if not steps:
        names = {(_name(r.header.get("target")), _name(r.header.get("draft"))) for r in refs}
        raise ValueError(f"no decode trace of {' + '.join(map(str, names.pop()))} given for the in-run cost model")
    cm = CostModel.from_steps([s["window"] for s in steps], [s["t_draft_ms"] for s in steps],
                              [s["t_verify_ms"] for s in steps],
                              max_window=max_window or max(r.max_window for r in refs),
                              label=f"in-run ({len(use)} traces)")
    return cm if c is None else CostModel(c, cm.verify, cm.target_ms, f"in-run c={c:g} ({len(use)} traces)", cm.mb)


def trace_accepted_frame(traces) -> pd.DataFrame:
    """One row per step of engine.trace.format traces: policy, task, window, accepted (excl. bonus), emitted,
    censored (accepted == window: the true run length may be longer), timings."""
    from engine.trace.prompts import task_of

    rows = []
    for t in traces:
        cats = {rid: str(r.get("category") or "") for rid, r in t.requests.items()}
        for s in t.steps:
            rows.append({"source": t.source, "policy": t.header["policy"]["spec"],
                         "task": task_of(cats.get(s["request_id"], "")), "request_id": s["request_id"],
                         "window": s["window"], "accepted": s["accepted"], "emitted": s["emitted"],
                         # unknown (NaN) for an imported run that never recorded its window
                         "censored": math.nan if s["window"] is None else s["window"] > 0 and s["accepted"] == s["window"],
                         "t_draft_ms": s["t_draft_ms"], "t_verify_ms": s["t_verify_ms"]})
    return pd.DataFrame(rows)


def trace_table(traces) -> pd.DataFrame:
    """Per trace and task: measured accepted-length distribution and cost ratio
    c_measured = (Σ t_draft / Σ drafted) / median t_verify. Accepted lengths of a fixed-γ trace are
    censored at γ (`censored_frac` = share of steps that accepted every draft), so the oracle cannot
    be computed from them: use a reference run for that."""
    df = trace_accepted_frame(traces)
    rows = []
    for (src, pol, task), g in list(df.groupby(["source", "policy", "task"], sort=False)) + \
            [((s, p, "all"), g) for (s, p), g in df.groupby(["source", "policy"], sort=False)]:
        known = bool(g["window"].notna().all())  # an imported run (engine.interop) may not record windows
        drafted = g["window"].sum() if known else 0
        tv = float(g["t_verify_ms"].median())
        rows.append({"source": src, "policy": pol, "task": task, "steps": len(g), "tokens": int(g["emitted"].sum()),
                     "max_window": int(g["window"].max()) if known else None,
                     "censored_frac": float(g["censored"].astype(float).mean()),
                     "note": "imported: windows not recorded, censoring unknown" if not known
                     else f"accepted censored at window {int(g['window'].max())}" if pol.startswith("fixed")
                     else "accepted censored at each step's window",
                     **_spread(g["accepted"].to_numpy(dtype=float), "accepted"),
                     "mean_emitted_per_call_incl_bonus": float(g["emitted"].mean()),
                     "draft_ms_per_token": float(g["t_draft_ms"].sum() / drafted) if drafted else math.nan,
                     "verify_ms_median": tv,
                     "c_measured": float(g["t_draft_ms"].sum() / drafted) / tv if drafted and tv > 0 else math.nan})
    return pd.DataFrame(rows)
