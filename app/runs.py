"""The loaded traces as one table of runs, each speculative run against the autoregressive run recorded
beside it, and the sentence a page opens with. Pure: entries (app.frames.Entry) in, frames and strings out.

A *run* is what app.frames.run_groups groups: one target, one day, one machine setting (device, dtype,
threads, torch) and one prompt set. Tokens/s compare only inside a run, so ×AR divides a trace's
tokens/s by the autoregressive trace of the same run (the one recorded closest in time when there are
two); where a run has no autoregressive trace, ×AR is left empty and said so.

Why speculation loses is read off the same two traces:

    c = (draft ms ÷ drafted tokens) ÷ (AR ms per target step)     the draft's cost ratio (Leviathan's c)
    v = (verify ms ÷ target calls) ÷ (AR ms per target step)      what verifying a block costs vs one step

With mean emitted per call τ, the speedup is about τ ÷ (c·γ̄ + v): a draft that costs c = 0.4 of a target
step needs a long accepted run to pay for itself, and a model-free drafter (c ≈ 0) loses only through v.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

# One name per model: the SmolLM2 traces name the same weights two ways.
ALIASES = {"smollm2-135m-instruct": "smollm2-135m"}
DRAFTER_KINDS = ("lookup", "suffix", "phrase")
# ×AR first: it is what a reader scans the table for (the Run column, pinned, sits before it).
COLUMNS = ["×AR", "Pair", "Drafter", "Policy", "Sampling", "Dtype", "Machine", "Prompts", "Target calls",
           "Emitted / call", "Acceptance", "Tokens/s"]


def model_name(name: str | None) -> str | None:
    return ALIASES.get(name, name) if name else name


def drafter_kind(entry) -> str:
    """'draft model', 'block drafter', 'lookup', 'suffix' … or '—' (autoregressive)."""
    h, draft = entry.trace.header, entry.info.get("draft")
    if not draft:
        return "—"
    d = h.get("drafter")
    if isinstance(d, dict) and d.get("kind"):
        return "block drafter" if d["kind"] == "block" else str(d["kind"])
    kind = str(draft).split(":", 1)[0]
    return kind if kind in DRAFTER_KINDS else "draft model"


def machine_of(info: dict[str, Any]) -> tuple[str, str]:
    """(dtype, machine) from the card context 'date · cpu, float32, 2 threads, torch …'."""
    where = info["context"].split(" · ", 1)[-1]
    parts = [p.strip() for p in where.split(",")]
    dtype = next((p for p in parts if p.startswith(("float", "bfloat", "int", "fp", "bf"))), "—")
    machine = ", ".join(p for p in parts if p != dtype) or "not recorded"
    return dtype, machine


def _run_key(e) -> tuple:
    i = e.info
    return (model_name(i["target"]), i["created"][:10], i["context"].split(" · ", 1)[-1], i["prompts_key"],
            bool(i["demo"]), e.origin == "live")


def _ar_of(label: str, entries: dict) -> str | None:
    """The autoregressive trace of the same run, closest in recording time."""
    e = entries[label]
    key = _run_key(e)
    ars = [k for k, x in entries.items() if not x.info["draft"] and _run_key(x) == key]
    if not ars:
        return None
    return min(ars, key=lambda k: abs(pd.Timestamp(entries[k].info["created"] or 0).value
                                      - pd.Timestamp(e.info["created"] or 0).value))


def _step_ms(s: dict[str, Any]) -> float | None:
    return s["verify_ms"] / s["target_calls"] if s.get("target_calls") and s.get("verify_ms") else None


def cost_ratios(entry, ar) -> tuple[float | None, float | None]:
    """(c, v) of a speculative trace against its run's autoregressive trace (module docstring)."""
    if ar is None or not entry.info["draft"]:
        return None, None
    s, base = entry.info["summary"], _step_ms(ar.info["summary"])
    if not base:
        return None, None
    c = s["draft_ms"] / s["drafted_tokens"] / base if s.get("drafted_tokens") and s.get("draft_ms") is not None else None
    v = _step_ms(s) / base if _step_ms(s) else None
    return c, v


def runs_frame(entries: dict) -> pd.DataFrame:
    """One row per trace, human headers (COLUMNS), plus hidden helper columns: label, ar (the label of
    the run's AR trace), c, v, demo, tasks, speculative."""
    rows = []
    for label, e in entries.items():
        i, s = e.info, e.info["summary"]
        dtype, machine = machine_of(i)
        ar = _ar_of(label, entries) if i["draft"] else None
        base = entries[ar].info["summary"]["tokens_per_s"] if ar else None
        c, v = cost_ratios(e, entries[ar] if ar else None)
        target, draft = model_name(i["target"]), i["draft"]
        rate = s.get("draft_acceptance_rate") if i["draft"] else None
        kind = drafter_kind(e)
        model_free = kind in DRAFTER_KINDS
        rows.append({"Pair": (f"{target} ← {kind}" if model_free else f"{target} ← {draft}") if draft
                     else f"{target} (no draft)",
                     "Drafter": draft if model_free else kind, "Policy": i["policy"], "Sampling": i["sampling"],
                     "Dtype": dtype.replace("float32", "fp32").replace("bfloat16", "bf16"), "Machine": machine,
                     "Prompts": len(i["prompts_key"]) or s.get("requests", 0), "Target calls": s["target_calls"],
                     "Emitted / call": s["mean_emitted_per_call_incl_bonus"], "Acceptance": rate,
                     "Tokens/s": s["tokens_per_s"],
                     "×AR": (s["tokens_per_s"] / base) if base else (1.0 if not i["draft"] else None),
                     "label": label, "ar": ar, "c": c, "v": v, "demo": bool(i["demo"]), "target": target,
                     "tasks": ", ".join(i["tasks"]) or "—", "speculative": bool(i["draft"])})
    return pd.DataFrame(rows, columns=COLUMNS + ["label", "ar", "c", "v", "demo", "target", "tasks", "speculative"])


def _pick_pool(df: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    spec = df[df["speculative"] & df["×AR"].notna()]
    real = spec[~spec["demo"]]
    return (real, False) if len(real) else (spec, True)


def headline_label(df: pd.DataFrame) -> str | None:
    """The trace a page should open on: the fastest speculative run against its own AR (real runs first)."""
    pool, _ = _pick_pool(df)
    return None if pool.empty else str(pool.loc[pool["×AR"].idxmax(), "label"])


def why_slower(r: pd.Series) -> str:
    """Why one speculative run is slower than its AR, and what to try, from its cost ratios."""
    emit = f"{r['Emitted / call']:.2f} tokens per target call"
    if r["c"] is not None and not pd.isna(r["c"]) and r["c"] >= 0.15:
        return (f"the draft costs c = {r['c']:.2f} of a target step, so {emit} do not pay for the drafting — "
                "try a model-free drafter (lookup, suffix) or a shorter window")
    if r["v"] is not None and not pd.isna(r["v"]) and r["v"] > 1.05:
        return (f"verifying a block costs {r['v']:.2f}× a plain target step on this machine and {emit} "
                "do not make up for it — try a shorter window, or a GPU where verification is nearly free")
    return f"{emit} are too few to pay for drafting and verifying here — try a shorter window"


def run_line(r: pd.Series) -> str:
    return (f"**{r['Policy']}** ({r['Drafter']}) on {r['Pair']} at **{r['×AR']:.2f}× AR** "
            f"({r['Dtype']}, {r['Prompts']} prompts: {r['tasks']})")


def conclusion(df: pd.DataFrame) -> str:
    """One or two sentences: the best method and its ×AR with the prompts it rests on; where every
    speculative run of a pair is slower than AR, say so and why."""
    pool, demo = _pick_pool(df)
    if pool.empty:
        if df.empty:
            return "No traces loaded yet: add some to `traces/`, upload one, or record one on the Live page."
        return ("No run here has both a speculative trace and an autoregressive one of the same run, so no "
                "speedup can be stated; target calls and emitted per call below still compare.")
    best = pool.loc[pool["×AR"].idxmax()]
    tag = " (tiny random demo models: the numbers say nothing about real pairs)" if demo else ""
    if best["×AR"] >= 1.05:
        out = f"Fastest here: {run_line(best)}{tag}."
    elif best["×AR"] >= 1:
        out = f"At best speculation breaks even here: {run_line(best)}{tag}."
    else:
        out = (f"Speculation is slower than autoregressive decoding in every run here{tag}: the best is "
               f"{run_line(best)}, because {why_slower(best)}.")
        return out
    losers = [g.loc[g["×AR"].idxmax()] for _, g in pool.groupby("Pair", sort=False) if g["×AR"].max() < 1]
    if losers:
        worst = min(losers, key=lambda r: r["×AR"])
        out += (f" On {worst['Pair']} every speculative run is slower than AR (best {worst['Policy']}, "
                f"{worst['×AR']:.2f}× AR): {why_slower(worst)}.")
    return out


def pair_traces(df: pd.DataFrame, label: str | None, limit: int = 5) -> list[str]:
    """A handful of speculative traces of the same run as `label` (itself first), the fastest first:
    the default series of a chart that would be unreadable with every trace at once."""
    if label is None or label not in set(df["label"]):
        return list(df.loc[df["speculative"], "label"][:limit])
    row = df[df["label"] == label].iloc[0]
    same = df[df["speculative"] & (df["target"] == row["target"]) & (df["Dtype"] == row["Dtype"])
              & (df["Machine"] == row["Machine"]) & (df["demo"] == row["demo"])]
    rest = same[same["label"] != label].sort_values("×AR", ascending=False, na_position="last")
    return [label] + list(rest["label"][: limit - 1])


def trace_conclusion(df: pd.DataFrame, label: str) -> str:
    """One or two sentences on one trace: tokens per target call, and its speed against the same run's AR
    (why it is slower, where it is)."""
    row = df[df["label"] == label]
    if row.empty:
        return ""
    r = row.iloc[0]
    if not r["speculative"]:
        return (f"An autoregressive run of {r['target']}: one token per target call at {r['Tokens/s']:.1f} tokens/s "
                f"({r['Dtype']}, {r['Machine']}) — the baseline every speculative trace of this run is divided by.")
    head = (f"**{r['Policy']}** ({r['Drafter']}) on {r['Pair']} emits **{r['Emitted / call']:.2f} tokens per target "
            f"call** over {r['Prompts']} prompts ({r['tasks']})")
    x = r["×AR"]
    if x is None or pd.isna(x):
        return head + "; this run has no autoregressive trace, so its wall-clock speedup is not known."
    if x >= 1:
        return head + f", **{x:.2f}× AR** on the same machine and dtype."
    return head + f", yet runs at **{x:.2f}× AR**: slower than decoding without a draft, because {why_slower(r)}."


def compare_conclusion(df: pd.DataFrame, a: str, b: str, calls: tuple[int, int], ms: tuple[float, float],
                       shared: int, same_run: bool, mismatch: list[str]) -> str:
    """One or two sentences for Compare: B against A over the shared prompts — target calls (hardware-free)
    and decode time (only when both were timed in the same run), each side's ×AR where known."""
    ra, rb = (df[df["label"] == k].iloc[0] for k in (a, b))
    if not shared:
        return (f"A ({ra['Policy']}) and B ({rb['Policy']}) share no prompts, so only their totals compare"
                + (f" — and they differ in more than the policy ({'; '.join(mismatch)})." if mismatch else "."))
    d_calls = (calls[1] - calls[0]) / calls[0] if calls[0] else 0.0
    out = (f"Over {shared} shared prompts, B (**{rb['Policy']}**, {rb['Drafter']}) needs "
           f"**{abs(d_calls):.0%} {'fewer' if d_calls < 0 else 'more'} target calls** than A (**{ra['Policy']}**)")
    if same_run and ms[0]:
        d_ms = (ms[1] - ms[0]) / ms[0]
        out += f" and takes **{abs(d_ms):.0%} {'less' if d_ms < 0 else 'more'} decode time** on the same machine"
        if (d_calls < 0) != (d_ms < 0):
            out += (" — fewer calls, yet slower: B's drafting costs more than the calls it saves" if d_calls < 0
                    else " — more calls, yet faster: B's calls are cheaper")
    else:
        out += " (timed in different runs: compare the calls, not the clock)"
    xs = [f"{side} {r['×AR']:.2f}× AR" for side, r in (("A", ra), ("B", rb))
          if r["×AR"] is not None and not pd.isna(r["×AR"]) and r["speculative"]]
    out += "." + (f" Against their runs' autoregressive traces: {', '.join(xs)}." if xs else "")
    if mismatch:
        out += f" Not like for like: {'; '.join(mismatch)}."
    return out
