"""The Windows page's headline, as plain sentences built from the tables the page already computes.

Why a module of its own: the headline is the page's answer to the papers' questions (how much the
oracle gains over the best fixed window, how far adaptive policies close that gap, where PACER
stands, how the replay relates to real decoding), so its wording and arithmetic are tested on small
hand-made frames without Streamlit. Pure functions only: no Streamlit, no file access, no torch.

Which oracle the headline uses — oracle (a), window = the accepted run A(j): nothing drafted is
wasted and a step with A(j) = 0 is a plain target step. That is exactly what the real oracle does
(engine/policies/oracle.py, the bench's `oracle` row), so (a) is the one a real bench can check, and it is
the oracle engine.offline.analysis measures adaptive positions against. Oracle (b), window = A(j) + 1, pays
for the mismatching draft (the bar for a rule that must draft a token before judging it); it is
given beside (a) in the help text, never mixed into the headline.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import pandas as pd

PAPER_RATIO = 1.4  # PACER's "up to 1.4×" oracle over the best fixed window
# Within ±0.05 of 1.4 counts as reaching it: the paper quotes one decimal, and per-task ratios on a
# few dozen prompts move by more than that between runs.
PAPER_TOL = 0.05
HEADLINE_ORACLE = "a"

REPLAYED_LABEL = "replayed (reference, cost model)"
REAL_LABEL = "real (bench, wall clock)"
# One constant so the explanation can be refined in one place (docs/benchmarks.md, "Replayed vs real").
WHY_DIFFER = ("Replayed with the reference's timing block they differ: it times a k-token verify at the first "
              "prompt's short context, where the verify curve is flat, while real steps run at longer contexts "
              "(a 2-token forward already costs ~2× a 1-token one there) and pay the draft's per-step catch-up. "
              "Priced with what the real steps paid (cost model “in-run”), the replay lands within ~0.05 of the "
              "real runs (docs/benchmarks.md, “Replayed vs real, reconciled”).")

ORACLE_HELP = ("Oracle (a): window = the accepted run A(j), so nothing drafted is wasted and a step with A(j) = 0 "
               "is a plain target step — what the real oracle does (engine/policies/oracle.py, the bench's `oracle` row), "
               "so it is the one a real run can check. Oracle (b): window = A(j) + 1, it pays for the mismatching "
               "draft — the bar for a rule that must draft a token before judging it.")


def num(x: float, digits: int = 2) -> str:
    """A number with a typographic minus, as the sentences print it."""
    return f"{x:.{digits}f}".replace("-", "−")


def pair_label(pair: tuple[str, str]) -> str:
    return f"{pair[0]} ← {pair[1]}"


# ---------------------------------------------------------------- which references


def pair_of(header: Mapping[str, Any]) -> tuple[str, str]:
    """(target name, draft name) from a reference header."""
    return ((header.get("target") or {}).get("name") or "?", (header.get("draft") or {}).get("name") or "?")


def group_by_pair(headers: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """pair -> labels, in the headers' order."""
    out: dict[tuple[str, str], list[str]] = {}
    for label, h in headers.items():
        out.setdefault(pair_of(h), []).append(label)
    return out


def default_references(headers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The references the page opens on: one pair, never a blend of two (their numbers do not add up).
    The Qwen2.5-Coder pair when present (the realistic pair the papers' questions are about), else the
    first real pair, else the tiny demo ones."""
    real = group_by_pair({k: h for k, h in headers.items() if not h.get("demo")})
    for pair, labels in real.items():
        if "qwen" in pair[0].lower():
            return labels
    if real:
        return next(iter(real.values()))
    demo = group_by_pair(headers)
    return next(iter(demo.values()), [])


def blend_warning(headers: Mapping[str, Mapping[str, Any]], chosen: Iterable[str]) -> str | None:
    """One line when the chosen references come from more than one pair; None when they do not."""
    pairs = list(group_by_pair({k: headers[k] for k in chosen}))
    if len(pairs) < 2:
        return None
    return (f"These references blend {len(pairs)} pairs ({'; '.join(pair_label(p) for p in pairs)}): every number "
            f"below mixes them. Pick one pair's references.")


# ---------------------------------------------------------------- a. the oracle's gain


def verdict(ratio: float, paper: float = PAPER_RATIO, tol: float = PAPER_TOL) -> str:
    if ratio > paper + tol:
        return "exceeds"
    if ratio < paper - tol:
        return "falls short of"
    return "reaches"


def oracle_gain(ot: pd.DataFrame, oracle: str = HEADLINE_ORACLE) -> str:
    """One or two sentences: oracle ÷ best fixed window overall and its per-task range, the paper's 1.4×
    beside it — the overall figure and the best task each get their own verdict, so "exceeds" never stands
    beside an overall figure below 1.4× — and, where a task's ratio is below 1, why the oracle loses to a
    fixed window there (the advice's long K on that task is the same fact). `ot` = oracle_ratio_table rows
    of one cost model (task 'all' plus one row per task)."""
    col = f"ratio_{oracle}"
    overall = ot.loc[ot["task"] == "all", col]
    tasks = ot[ot["task"] != "all"].sort_values(col)
    head = f"Oracle ({oracle}) ÷ best fixed window: **{num(float(overall.iloc[0]))}×** overall" if len(overall) \
        else f"Oracle ({oracle}) ÷ best fixed window"
    if len(tasks) > 1:
        lo, hi = tasks.iloc[0], tasks.iloc[-1]
        head += f", {num(lo[col])}× ({lo['task']}) to {num(hi[col])}× ({hi['task']}) per task"
    elif len(tasks) == 1:
        head += f", {num(tasks.iloc[0][col])}× on {tasks.iloc[0]['task']}"
    paper = f" — paper: up to {PAPER_RATIO:g}×"
    if len(overall):
        out = f"{head}{paper}. Overall this {verdict(float(overall.iloc[0]))} the paper's figure"
        if len(tasks) > 1 and verdict(float(tasks.iloc[-1][col])) != verdict(float(overall.iloc[0])):
            out += f"; the best task ({tasks.iloc[-1]['task']}) {verdict(float(tasks.iloc[-1][col]))} it"
        out += "."
    else:
        out = f"{head}{paper}; this {verdict(float(ot[col].max()))} the paper's figure."
    losers = tasks[tasks[col] < 1]
    if len(losers):
        names = ", ".join(f"{r['task']} ({num(r[col])}×, best fixed γ = {int(r['best_gamma'])})" if "best_gamma" in r
                          else f"{r['task']} ({num(r[col])}×)" for _, r in losers.iterrows())
        out += (f" Below 1 on {names}: oracle ({oracle}) ends every window at the accepted run, so it pays one verify "
                "per run, while a long fixed window there amortises one verify over several runs — which is why the "
                "advice picks that long K for the task; the cost-optimal hindsight schedule (oracle (c)) may choose "
                "long windows too and never falls below the best fixed one.")
    return out


def oracle_help(ot: pd.DataFrame) -> str:
    """The help text beside the gain sentence: which oracle and why, with (b)'s overall figure."""
    b = ot.loc[ot["task"] == "all", "ratio_b"]
    extra = f" Oracle (b) ÷ best fixed here: {num(float(b.iloc[0]))}× overall." if len(b) else ""
    return ORACLE_HELP + extra


# ---------------------------------------------------------------- b. the gap closed


def short_policy(spec: str) -> str:
    """'heuristic:start=5,max=8' -> 'heuristic' (the sentences name policies, the chart's hover has the spec)."""
    return spec.split(":", 1)[0]


def gap_closed(ot: pd.DataFrame, task: str = "all") -> pd.DataFrame:
    """One row per adaptive policy: position = (S_policy − S_best fixed) ÷ (S_oracle(a) − S_best fixed),
    0 = the best fixed window, 1 = the oracle, negative = worse than the best fixed window. Read from
    the `pos:<policy>` columns of oracle_ratio_table (NaN where the oracle gains nothing)."""
    row = ot[ot["task"] == task]
    cols = [c for c in ot.columns if c.startswith("pos:")]
    if row.empty or not cols:
        return pd.DataFrame(columns=["policy", "label", "position"])
    specs = [c[4:] for c in cols]
    shorts = [short_policy(s) for s in specs]
    labels = [sh if shorts.count(sh) == 1 else s for s, sh in zip(specs, shorts)]  # short unless ambiguous
    return pd.DataFrame({"policy": specs, "label": labels, "position": [float(row[c].iloc[0]) for c in cols]})


def gap_sentence(gaps: pd.DataFrame) -> str:
    """One sentence naming the policy that closes most of the oracle's gap (or saying none closes any)."""
    g = gaps.dropna(subset=["position"])
    if gaps.empty:
        return "No adaptive policy was replayed (they need greedy references: the recorded draft signals)."
    if g.empty:
        return "The oracle gains nothing over the best fixed window here, so there is no gap to close."
    best = g.loc[g["position"].idxmax()]
    worse = int((g["position"] < 0).sum())
    if round(float(best["position"]), 2) <= 0:  # 0.004 prints as 0.00: that is no gain worth naming
        return (f"No adaptive policy beats the best fixed window: the closest, {best['label']}, sits at "
                f"{num(best['position'])} (0 = best fixed, 1 = oracle).")
    tail = f"; {worse} of {len(g)} do worse than the best fixed window" if worse else ""
    return (f"{best['label']} closes the most of the gap: {num(best['position'])} of the way from the best fixed "
            f"window (0) to the oracle (1){tail}.")


def ceiling_sentence(cc: pd.DataFrame) -> str:
    """One sentence on the confidence ceiling (engine.offline.confidence_ceiling): how far a window that reads
    only the draft's confidence could go, calibrated perfectly, against the best fixed window and the
    cost-optimal schedule — so a gap between it and the oracle reads as the signal's limit, not the rule's."""
    row = cc[cc["task"] == "all"]
    if row.empty:
        return "No confidence ceiling: it needs greedy references with recorded draft signals."
    r = row.iloc[0]
    ends = (f"the best fixed window ({r['best_fixed']}) reaches {num(r['s_best_fixed'])}× and the cost-optimal "
            f"schedule {num(r['s_oracle_c'])}×")
    if r["ceiling_rule"] == "autoregressive":
        return (f"No rule that reads only the draft's confidence beats plain autoregressive decoding here, even "
                f"calibrated perfectly in hindsight; {ends}.")
    return (f"Calibrated perfectly in hindsight, the best rule that reads only the draft's confidence "
            f"({r['ceiling_rule']}) reaches {num(r['s_ceiling'])}× AR: {num(r['rel_best_fixed'])}× the best fixed "
            f"window, {num(r['headroom_share'])} of the way to the cost-optimal schedule ({ends}). The rest of "
            "the oracle's gain is what the confidence cannot tell: more needs a better signal, not a better rule.")


# ---------------------------------------------------------------- c. PACER


def pacer_position(ceiling: pd.DataFrame, split: str = "all", f: float = 1.0) -> dict[str, float] | None:
    """Where the best PACER rule lands in a `pacer sweep` ceiling (data.pacer_ceiling's long form) at
    draft-cost factor f (1 = the draft's measured cost): speedup, share of the oracle, and its position
    on the same 0 = best fixed, 1 = oracle scale as the adaptive policies. None without those rows."""
    if ceiling is None or ceiling.empty:
        return None
    c = ceiling[(ceiling["split"] == split) & (ceiling["f"] == f)].set_index("rule")["speedup"]
    if not {"oracle", "best PACER", "best fixed"} <= set(c.index):
        return None
    o, p, fx = float(c["oracle"]), float(c["best PACER"]), float(c["best fixed"])
    return {"speedup": p, "of_oracle": p / o, "position": (p - fx) / (o - fx) if o > fx else math.nan}


# One command from a new pair's dev prompts to its own M_B and swept defaults (engine/cli/pacer.py).
PACER_CALIBRATE = "python -m engine pacer calibrate --name <pair> --target T --draft D"


def pacer_calibration(draft: str, models: Mapping[str, tuple[str, str]]) -> str | None:
    """None when a pre-verifier is committed for this draft; else the sentence saying PACER is
    uncalibrated for the pair (its M_B and defaults b, t, ρ come from another pair) and how to fix it."""
    if any(d == draft for _, d in models.values()):
        return None
    return (f"PACER is uncalibrated for {draft}: no pre-verifier weights are committed for it, so `pacer` here "
            f"runs another pair's M_B and defaults (b, t, ρ). Calibrate on this pair's dev prompts with "
            f"`{PACER_CALIBRATE}`.")


def pacer_sentence(draft: str, models: Mapping[str, tuple[str, str]], ceiling: pd.DataFrame | None = None,
                   ceiling_model: str | None = None) -> str:
    """Where PACER stands for this reference's draft. `models`: pre-verifier folder -> (target, draft)
    from its model card; `ceiling`: data.pacer_ceiling(); `ceiling_model`: the folder whose weights
    that sweep replayed (its pair is the one the ceiling is about)."""
    mine = [m for m, (_, d) in models.items() if d == draft]
    at = pacer_position(ceiling) if ceiling_model else None

    def lands(pos: dict[str, float]) -> str:
        return (f"{num(pos['of_oracle'])} of the oracle's speedup, {num(pos['position'])} of the way from the best "
                f"fixed window to the oracle (held-out steps, draft at its measured cost)")

    if mine:
        if at is not None and ceiling_model in mine:
            return f"PACER's pre-verifier for {draft} (models/{ceiling_model}) reaches {lands(at)}."
        return (f"A PACER pre-verifier is trained for {draft} (models/{mine[0]}), but no sweep with a ceiling "
                f"replays it yet.")
    head = f"No PACER pre-verifier is trained for {draft} yet"
    if at is not None and ceiling_model in models:
        return f"{head}; on the {pair_label(models[ceiling_model])} pair it reaches {lands(at)}."
    return head + "."


# ---------------------------------------------------------------- d. replayed vs real


def _fixed_gamma(config: str) -> int | None:
    kind, _, arg = str(config).partition(":")
    return int(arg) if kind == "fixed" and arg.isdigit() else None


def bench_oracle_ratio(bench: Mapping[str, Any], task: str = "overall", temperature: float = 0.0) -> dict | None:
    """Oracle ÷ best fixed window measured on the wall clock by `python -m engine bench`: the `oracle`
    row and the best `fixed:γ` row of one task at one temperature. None when either is missing."""
    rows = [r for r in bench.get("rows", []) if r.get("task") == task and r.get("temperature") == temperature]
    oracle = next((r for r in rows if r.get("config") == "oracle"), None)
    fixed = [r for r in rows if _fixed_gamma(r.get("config")) is not None]
    if oracle is None or not fixed:
        return None
    best = max(fixed, key=lambda r: r["speedup_vs_ar"])
    return {"oracle": float(oracle["speedup_vs_ar"]), "best_fixed": float(best["speedup_vs_ar"]),
            "best_gamma": _fixed_gamma(best["config"]), "gammas": sorted(_fixed_gamma(r["config"]) for r in fixed),
            "ratio": float(oracle["speedup_vs_ar"]) / float(best["speedup_vs_ar"])}


def bench_pacer_standing(bench: Mapping[str, Any], task: str = "overall", temperature: float = 0.0) -> dict | None:
    """PACER on the wall clock in one bench run: its best `pacer…` row against the best `fixed:γ` row
    and the real `oracle` row (None at T > 0, where the hindsight oracle does not run). None without
    pacer and fixed rows at that temperature."""
    rows = [r for r in bench.get("rows", []) if r.get("task") == task and r.get("temperature") == temperature]
    pacer = [r for r in rows if str(r.get("config", "")).startswith("pacer")]
    fixed = [r for r in rows if _fixed_gamma(r.get("config")) is not None]
    if not pacer or not fixed:
        return None
    p = max(pacer, key=lambda r: r["speedup_vs_ar"])
    f = max(fixed, key=lambda r: r["speedup_vs_ar"])
    o = next((r for r in rows if r.get("config") == "oracle"), None)
    out = {"config": p["config"], "speedup": float(p["speedup_vs_ar"]), "best_fixed": float(f["speedup_vs_ar"]),
           "best_gamma": _fixed_gamma(f["config"]), "over_fixed": float(p["speedup_vs_ar"]) / float(f["speedup_vs_ar"])}
    if o is not None:
        out.update(oracle=float(o["speedup_vs_ar"]), of_oracle=float(p["speedup_vs_ar"]) / float(o["speedup_vs_ar"]))
    return out


def bench_gap_closed(bench: Mapping[str, Any], task: str = "overall", temperature: float = 0.0) -> pd.DataFrame:
    """The gap-closed scale on the wall clock: for every adaptive policy row of one bench run (not ar,
    fixed:γ, oracle, HF or another drafter's `…@…`), (S − S_best fixed) ÷ (S_oracle − S_best fixed).
    Empty without an oracle row or when the oracle does not beat the best fixed window."""
    cols = ["policy", "label", "position", "speedup"]
    real = bench_oracle_ratio(bench, task, temperature)
    if real is None or real["oracle"] <= real["best_fixed"]:
        return pd.DataFrame(columns=cols)
    rows = [r for r in bench.get("rows", []) if r.get("task") == task and r.get("temperature") == temperature]
    keep = [r for r in rows if r["config"] not in ("ar", "oracle") and _fixed_gamma(r["config"]) is None
            and not str(r["config"]).startswith("hf:") and "@" not in str(r["config"])]
    span = real["oracle"] - real["best_fixed"]
    specs = [str(r["config"]) for r in keep]
    shorts = [short_policy(x) for x in specs]
    labels = [sh if shorts.count(sh) == 1 else x for x, sh in zip(specs, shorts)]
    return pd.DataFrame({"policy": specs, "label": labels,
                         "position": [(float(r["speedup_vs_ar"]) - real["best_fixed"]) / span for r in keep],
                         "speedup": [float(r["speedup_vs_ar"]) for r in keep]}, columns=cols)


def pacer_wall_clock_sentence(name: str, bench: Mapping[str, Any]) -> str | None:
    """One sentence: PACER's measured standing at T = 0 (and at T = 0.7 when that run has it)."""
    g = bench_pacer_standing(bench)
    if g is None:
        return None
    text = (f"On the wall clock (docs/results/{name}, all tasks) the best PACER rule ({g['config']}) runs at "
            f"{num(g['speedup'])}× AR = {num(g['over_fixed'])}× the best fixed window (γ = {g['best_gamma']}, "
            f"{num(g['best_fixed'])}×)")
    if "oracle" in g:
        text += f" and {num(g['of_oracle'])} of the real oracle's speedup ({num(g['oracle'])}×)"
    s = bench_pacer_standing(bench, temperature=0.7)
    if s is not None:
        text += f"; at T = 0.7, {num(s['over_fixed'])}× the best fixed window"
    return text + " (greedy unless stated)."


def find_bench(benches: Mapping[str, Mapping[str, Any]], target: str, draft: str,
               need=None) -> tuple[str, dict] | None:
    """The newest bench result of this exact pair for which `need(bench)` is not None (default
    `bench_oracle_ratio`: an `oracle` row and fixed rows at T = 0)."""
    need = need or bench_oracle_ratio
    ok = [(name, b) for name, b in benches.items()
          if b.get("target") == target and b.get("draft") == draft and need(b) is not None]
    ok.sort(key=lambda nb: str(nb[1].get("created") or ""), reverse=True)
    return ok[0] if ok else None


def replayed_oracle_ratio(wt: pd.DataFrame, gammas: Iterable[int] | None = None, task: str = "all") -> dict | None:
    """The replay's oracle (a) ÷ best fixed window from window_table rows, over `gammas` only (the
    windows the bench ran, so both sides pick their best from the same set). None if none replayed."""
    g = wt[wt["task"] == task]
    fixed = g[g["kind"] == "fixed"]
    if gammas is not None:
        fixed = fixed[fixed["gamma"].isin(list(gammas))]
    oracle = g.loc[g["policy"] == f"oracle:{HEADLINE_ORACLE}", "speedup"]
    if fixed.empty or oracle.empty:
        return None
    best = fixed.loc[fixed["speedup"].idxmax()]
    return {"oracle": float(oracle.iloc[0]), "best_fixed": float(best["speedup"]), "best_gamma": int(best["gamma"]),
            "ratio": float(oracle.iloc[0]) / float(best["speedup"])}


def reconcile_sentence(replayed: dict, real: dict | None, gammas: Iterable[int] | None = None) -> str:
    """Replayed and real oracle ÷ best fixed side by side, with the oracles' own speedups vs AR."""
    windows = ", ".join(str(x) for x in gammas or ())
    over = f" (best of fixed γ ∈ {{{windows}}}, the windows the bench ran)" if windows else ""
    rep = f"{REPLAYED_LABEL} {num(replayed['ratio'])}× (oracle {num(replayed['oracle'])}× AR)"
    if real is None:
        return (f"Oracle ÷ best fixed window: {rep}; no {REAL_LABEL} figure for this pair yet (a bench with an "
                f"`oracle` row).")
    return (f"Oracle ÷ best fixed window{over}: {rep}, {REAL_LABEL} {num(real['ratio'])}× "
            f"(oracle {num(real['oracle'])}× AR).")


# ---------------------------------------------------------------- e. the cost model


def cost_sentence(c: float, measured: bool, timed: bool, demo: bool, in_run: int = 0) -> str:
    """Which cost model the headline uses and why. `c` = draft ÷ target forward cost in that model;
    `in_run` = how many decode traces the in-run cost model was fitted from (0: not in use)."""
    if in_run:
        return (f"Cost model: in-run (c = {c:.3g}) — what real decoding of this pair paid per step on this machine "
                f"(verify time per window and the draft's cost, fitted from {in_run} decode traces), so the replay "
                "prices steps as the real runs did; the reference's own timing block is the “measured” option.")
    if measured:
        why = ("; but these are the tiny demo's timings (draft ≈ target), which say nothing about a trained pair"
               if demo else "")
        return (f"Cost model: measured (c = {c:.3g}) — this machine's own timings of the pair, recorded in the "
                f"reference (a draft forward and the verify curve t_target(k)), price every replayed step{why}.")
    flat = (f"Cost model: flat c = {c:.3g} (Leviathan's assumption: verifying any window costs one target "
            f"forward)")
    if not timed:
        return f"{flat}, because the references carry no timings."
    if demo:
        return f"{flat}, because the tiny demo's timings (draft ≈ target) say nothing about a trained pair."
    return f"{flat}, as picked above; the references' measured timings are the default."


# ---------------------------------------------------------------- tables and defaults

RATIO_HEADERS = {"task": "task", "cost": "cost model", "alpha": "α (per-token acceptance)",
                 "best_gamma": "best fixed γ*", "s_best_fixed": "speedup at γ*", "s_oracle_a": "oracle (a) speedup",
                 "s_oracle_b": "oracle (b) speedup", "ratio_a": "oracle (a) ÷ best fixed",
                 "ratio_b": "oracle (b) ÷ best fixed", "iid_ratio_a": "i.i.d. (a) ÷ best fixed",
                 "iid_ratio_b": "i.i.d. (b) ÷ best fixed", "value": "values"}


def default_traces(entries: Mapping[str, Any], target: str, draft: str, limit: int = 5) -> list[str]:
    """A handful of decode traces of the page's pair (same target and draft; real before demo), so the
    tokens-per-call chart opens readable; the first few of any pair when none matches."""
    from app.runs import model_name

    same = [k for k, e in entries.items() if model_name(e.info["target"]) == model_name(target)
            and e.info["draft"] == draft]
    same.sort(key=lambda k: bool(entries[k].info["demo"]))
    pick = same or [k for k, e in entries.items() if not e.info["demo"]] or list(entries)
    return pick[:limit]
