"""An imported run beside the lab's own runs of the same pair: where acceptance drops, and where drafts are
first rejected, in both.

Same pair: the same target and the same draft model, by name. Engines and the lab spell one model
differently (a Hub id "Qwen/Qwen2.5-Coder-1.5B-Instruct", a path ".../qwen2.5-coder-1.5b", a GGUF
"qwen2.5-coder-1.5b-instruct-q8_0.gguf"), so names are compared by `model_key`: the last path component,
lower case, without a weights-file extension, a trailing quantisation tag (q8_0, q4_k_m, f16, bf16, …) or a
trailing -instruct / -chat / -it (the lab names its instruct models without it), "_" read as "-". A name
in parentheses is an importer's placeholder for a file that does not name its model ("(llama.cpp
model)"): it matches nothing. Model-free drafts (lookup, suffix, vLLM's n-gram) are not a draft model and
match only their own spelling.

Per run, over its drafting steps (engine.interop.diagnose.drafting_steps), N of them, with accepted
counts a_s and largest window K:

    rate_i    = #{s : a_s ≥ i} ÷ N            acceptance rate at draft position i = 1..K (vLLM's per-position
                                              rate, the diagnosis's "rate (÷ steps)"); None past K
    drop_i    = rate_{i−1} − rate_i           with rate_0 = 1: how much is lost at position i
    first rejection at i = #{s : a_s = i − 1 < w_s} ÷ N, and "all" = #{s : a_s = w_s} ÷ N
                                              (engine.interop.baseline.first_rejection; needs windows)

Worked example: accepted (2, 0, 1, 2) at K = 2 → rate = (3/4, 2/4), drop = (1/4, 1/4); first rejection at
1: 1/4, at 2: 1/4, all accepted: 2/4. Per task (Spec-Bench's tasks, engine.trace.prompts.task_of) when the
run's requests carry categories, the same figures over that task's steps.

Only per-step counts give these: an imported file that keeps totals only (engine.interop.peer.PER_STEP
lacking — llama.cpp's timings, SGLang's meta_info) shows its totals (mean acceptance length, acceptance
rate; per task too, since a request's total is exact) and says it has nothing per position. The lab's
hindsight-oracle runs are left out (their windows are the accepted counts: nothing is ever rejected), as
are runs that drafted nothing. Pure functions of loaded traces; `own_runs` finds the lab's traces of the
pair in a folder (traces/ by default). `python -m engine diagnose` and the Upload page's diagnosis show it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from engine.interop.baseline import first_rejection
from engine.interop.diagnose import _lacks, drafting_steps, per_step_known
from engine.trace.format import Trace, TraceError, load_trace
from engine.trace.prompts import task_of

TRACES = Path(__file__).resolve().parents[2] / "traces"
_EXT = re.compile(r"\.(gguf|bin|safetensors|pt|pth|onnx)$")
# trailing tags that name a file's weights or its chat tuning, not the model: strip them one at a time
_TAG = re.compile(r"[-_.](q\d+(_[a-z0-9]+)*|iq\d+(_[a-z0-9]+)*|f16|f32|bf16|fp16|fp32|fp8|int4|int8|awq|gptq|gguf"
                  r"|instruct|chat|it)$")
TOTALS_ONLY = "totals only: the file has no per-step or per-position counts, so nothing per position is drawn"


def model_key(name: Any) -> str | None:
    """A model name as the pair is matched on (module docstring); None for a missing or placeholder name.

    >>> model_key("Qwen/Qwen2.5-Coder-1.5B-Instruct"), model_key("/m/qwen2.5-coder-1.5b-instruct-q8_0.gguf")
    ('qwen2.5-coder-1.5b', 'qwen2.5-coder-1.5b')
    """
    if not isinstance(name, str) or not name.strip() or name.strip().startswith("("):
        return None
    s = _EXT.sub("", re.split(r"[\\/]", name.strip().rstrip("/\\"))[-1].lower())
    while True:
        t = _TAG.sub("", s)
        if t == s or not t:
            break
        s = t
    return s.replace("_", "-").replace(" ", "-") or None


def _pair_of(header: dict) -> tuple[str, str] | None:
    t, d = (header.get("target") or {}), (header.get("draft") or {})
    k = (model_key(t.get("name")) if isinstance(t, dict) else None,
         model_key(d.get("name")) if isinstance(d, dict) else None)
    return k if k[0] and k[1] else None


def pair_key(trace: Trace) -> tuple[str, str] | None:
    """(target, draft) keys of a run that drafted with a named model; None otherwise."""
    return _pair_of(trace.header)


def _header(p: Path) -> dict | None:
    """A .jsonl file's first line when it is a trace header (read without the rest)."""
    try:
        with open(p, "rb") as f:
            d = json.loads(f.readline(1 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    return d if isinstance(d, dict) and d.get("type") == "header" and d.get("schema") == "speclab.trace" else None


def own_runs(pair: tuple[str, str] | None, directory: Path | str | None = None) -> dict[str, Trace]:
    """The lab's own traces of this pair in the folder (traces/ by default), file name → trace. Headers are
    peeked before a file is loaded; a Parquet trace is loaded to read its header; unreadable files are skipped."""
    out: dict[str, Trace] = {}
    if pair is None:
        return out
    for p in sorted(Path(directory or TRACES).glob("*")):
        if p.suffix == ".jsonl":
            h = _header(p)
            if h is None or _pair_of(h) != pair:
                continue
        elif p.suffix != ".parquet":
            continue
        try:
            t = load_trace(p)
        except (TraceError, OSError, ValueError):
            continue
        if pair_key(t) == pair and not t.header.get("imported"):
            out[p.name] = t
    return out


def _positions(acc: list[int], k: int) -> dict[str, Any]:
    n = len(acc)
    rates = [sum(1 for a in acc if a >= i) / n for i in range(1, k + 1)] if n else []
    drops = [(rates[i - 2] if i > 1 else 1.0) - r for i, r in enumerate(rates, 1)]
    worst = max(range(len(drops)), key=lambda i: drops[i]) if drops else None
    return {"rates": rates, "drops": drops, "largest_drop_at": None if worst is None else worst + 1}


def profile(trace: Trace, label: str, source: str) -> dict[str, Any]:
    """One run's figures (module docstring): totals always; per position, first rejection and per task's
    per-position figures only from per-step counts."""
    spec = drafting_steps(trace)
    known = "window" not in _lacks(trace) and all(s["window"] is not None for s in spec)
    windows = sorted({s["window"] for s in spec if s["window"] is not None}) if known else []
    k = max(windows) if windows else max([s["accepted"] for s in spec] or [0])
    exact = per_step_known(trace)
    pol = trace.header.get("policy") or {}
    out: dict[str, Any] = {"label": label, "source": source, "steps": len(spec), "windows": windows, "k": k,
                           "policy": pol.get("spec") if isinstance(pol, dict) else None,
                           **_totals(spec, known), "per_step": exact, "why": None if exact else TOTALS_ONLY}
    out.update(per_position=_positions([s["accepted"] for s in spec], k) if exact and spec else None,
               first_rejection=first_rejection(trace) if spec else {"shares": None, "why": "no drafting steps"})
    cats = {rid: task_of(str(r.get("category") or "")) for rid, r in trace.requests.items()
            if r.get("category")}
    tasks: dict[str, list[dict]] = {}
    for s in spec:
        if s["request_id"] in cats:
            tasks.setdefault(cats[s["request_id"]], []).append(s)
    out["by_task"] = {name: {**_totals(st, known), "steps": len(st),
                             "per_position": _positions([s["accepted"] for s in st], k) if exact else None,
                             "first_rejection": first_rejection(trace, st)["shares"] if exact else None}
                      for name, st in sorted(tasks.items())}
    return out


def _totals(spec: list[dict], known: bool) -> dict[str, Any]:
    a = sum(s["accepted"] for s in spec)
    d = sum(s["window"] for s in spec) if known else None
    return {"mean_acceptance_length": 1.0 + a / len(spec) if spec else None,
            "acceptance_rate": a / d if d else None}


def beside_ours(imported: Trace, ours: dict[str, Trace], label: str = "imported") -> dict[str, Any]:
    """The imported run's profile next to each of the lab's runs of the same pair in `ours` (others are ignored;
    oracle runs and runs that drafted nothing are listed in `skipped` with the reason). `why` says, in one line,
    why there is no comparison (the file names no draft model, or the lab has no run of the pair)."""
    pair = pair_key(imported)
    out: dict[str, Any] = {"pair": pair, "imported": None, "ours": [], "skipped": [], "why": None}
    if pair is None:
        out["why"] = ("the file does not name both models (target and draft), so the lab's runs of the same pair "
                      "cannot be told")
        return out
    for name, t in sorted(ours.items()):
        if pair_key(t) != pair or t.header.get("imported"):
            continue
        pol = t.header.get("policy") or {}
        if isinstance(pol, dict) and pol.get("name") == "oracle":
            out["skipped"].append((name, "hindsight oracle: its windows are the accepted counts, nothing is rejected"))
        elif not drafting_steps(t):
            out["skipped"].append((name, "no drafting steps"))
        else:
            out["ours"].append(profile(t, name, "ours"))
    if not out["ours"]:
        out["why"] = f"the lab has no run of {pair[0]} ← {pair[1]} that drafted"
        return out
    out["imported"] = profile(imported, label, "imported")
    return out


def position_rows(b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (run, position) with a per-position rate: run, source, position (1-based), rate, drop.
    A totals-only run has none (its profile says why)."""
    runs = [b["imported"], *b["ours"]] if b["imported"] else []
    return [{"run": p["label"], "source": p["source"], "position": i, "rate": r, "drop": d}
            for p in runs if p["per_position"]
            for i, (r, d) in enumerate(zip(p["per_position"]["rates"], p["per_position"]["drops"]), 1)]


def rejection_rows(b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (task, run): the share of drafting steps first rejected at each position ("1", "2", …, up
    to the run's largest window; "none" = all accepted) and the mean acceptance length; task "all" is the
    whole run, then the tasks both the imported run and one of ours carry. No share where the run cannot
    tell them (totals only, windows not known per step) or past its window."""
    runs = [b["imported"], *b["ours"]] if b["imported"] else []
    if not runs:
        return []
    tasks = sorted(set(runs[0]["by_task"]) & set().union(*(p["by_task"] for p in runs[1:])))
    out = []
    for task in ["all", *tasks]:
        for p in runs:
            t = p if task == "all" else p["by_task"].get(task)
            if not t:
                continue
            fr = t["first_rejection"]["shares"] if task == "all" else t["first_rejection"]
            # a position up to the run's window that no step was first rejected at is 0, not unknown
            shares = {} if fr is None else {**{str(i): fr.get(str(i), 0.0) for i in range(1, p["k"] + 1)},
                                            "none": fr.get("all", 0.0)}
            out.append({"task": task, "run": p["label"], "steps": t["steps"],
                        "mean acceptance length": t["mean_acceptance_length"], **shares})
    return out


def _shares(fr: dict[str, float] | None) -> str:
    if fr is None:
        return "—"
    return ", ".join(f"{k} {v:.0%}" if k != "all" else f"none {v:.0%}" for k, v in fr.items())


def _row(p: dict[str, Any], k: int) -> str:
    L, r = p["mean_acceptance_length"], p["acceptance_rate"]
    head = (f"    {p['label'][:34]:<34} {p['steps']:>6} {'—' if L is None else f'{L:.3f}':>7} "
            f"{'—' if r is None else f'{r:.1%}':>7}  ")
    if p["per_position"] is None:
        return head + "per position: none (totals only)"
    rates = p["per_position"]["rates"]
    return head + " ".join(f"{rates[i]:.2f}" if i < len(rates) else "  — " for i in range(k))


def format_beside(b: dict[str, Any]) -> list[str]:
    """`diagnose`'s lines for `beside_ours`."""
    if b["imported"] is None:
        return [f"beside the lab's own runs: none — {b['why']}"]
    runs = [b["imported"], *b["ours"]]
    k = max(p["k"] for p in runs if p["per_position"] is not None) if any(p["per_position"] for p in runs) else 0
    lines = [f"beside the lab's own runs of {b['pair'][0]} ← {b['pair'][1]} (acceptance rate at draft position i = "
             f"steps that accepted ≥ i drafts ÷ drafting steps):",
             f"    {'run':<34} {'steps':>6} {'mean AL':>7} {'rate':>7}  " + " ".join(f"{'p' + str(i):>4}"
                                                                                  for i in range(1, k + 1))]
    lines += [_row(p, k) for p in runs]
    if b["imported"]["why"]:
        lines.append(f"  the imported run: {b['imported']['why']}")
    lines.append("  first rejected position (share of drafting steps; none = every draft accepted):")
    for p in runs:
        fr = p["first_rejection"]
        lines.append(f"    {p['label'][:34]:<34} " + (_shares(fr["shares"]) if fr["shares"] is not None
                                                       else f"— ({fr['why']})"))
    tasks = sorted(set(b["imported"]["by_task"]) & set().union(*(p["by_task"] for p in b["ours"])))
    for task in tasks:
        lines.append(f"  task {task!r}: first rejected position / mean acceptance length")
        for p in runs:
            t = p["by_task"].get(task)
            if t:
                lines.append(f"    {p['label'][:34]:<34} {_shares(t['first_rejection'])}   "
                             f"mean AL {t['mean_acceptance_length']:.3f} over {t['steps']} steps")
    for name, why in b["skipped"]:
        lines.append(f"  left out: {name} ({why})")
    return lines
