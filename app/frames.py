"""A trace as the dataframes every page draws from, and the Entry the pages share: steps, drafted
positions, requests, the one-line description of a run, titles, run groups and the comparability check.
Pure: a `engine.trace.format.Trace` in, frames and dicts out (no Streamlit, no torch). Where traces come
from is app.traces; their token texts app.token_texts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from app.runs import model_name
from engine.trace.prompts import task_of
from engine.trace.format import Trace


@dataclass
class Entry:
    """One loaded trace and the frames the pages draw from it."""

    label: str
    origin: str  # bundled | uploaded | live
    trace: Trace
    steps: pd.DataFrame
    positions: pd.DataFrame
    info: dict[str, Any] = field(default_factory=dict)


def steps_frame(trace: Trace) -> pd.DataFrame:
    """One row per verify call. `accepted` excludes the bonus/correction token; `emitted` includes it.
    Of the drafted tokens that were not accepted, the first is `rejected` (0 or 1) and the rest are
    `pending` (drafted after the rejection, never checked), as in `draft_fates`. `autoregressive`
    marks a plain target step (nothing drafted): its token is the target's own, not a bonus."""
    cols = ["request_id", "step", "context_len", "window_cap", "window", "accepted", "emitted", "stop_reason",
            "t_draft_ms", "t_verify_ms", "t_prefill_ms", "finished"]
    rows = [{k: s.get(k) for k in cols} | {"has_bonus": s.get("bonus") is not None,
                                           "has_correction": s.get("correction") is not None}
            for s in trace.steps]
    df = pd.DataFrame(rows, columns=cols + ["has_bonus", "has_correction"])
    df["window"] = pd.to_numeric(df["window"])  # NaN where an imported run never recorded it
    df["rejected"] = (df["window"] > df["accepted"]).astype(int)
    df["pending"] = df["window"] - df["accepted"] - df["rejected"]
    df["autoregressive"] = df["window"].eq(0)
    df["t_ms"] = df["t_draft_ms"] + df["t_verify_ms"] + df["t_prefill_ms"]
    g = df.groupby("request_id", sort=False)
    df["cum_emitted"] = g["emitted"].cumsum()
    df["cum_ms"] = g["t_ms"].cumsum()
    return df


def draft_fates(accepted: int, window: int) -> list[str]:
    """Fate of each drafted token under token-level verification: the first `accepted` pass, the
    next one is rejected, and later ones are never checked (shown as pending)."""
    return ["accepted" if i < accepted else "rejected" if i == accepted else "pending" for i in range(window)]


def positions_frame(trace: Trace) -> pd.DataFrame:
    """One row per drafted token: its position in the block (1-based), probabilities and fate."""
    rows = []
    for s in trace.steps:
        if s["draft_tokens"] is None:  # an imported run: no drafted tokens recorded
            continue
        fates = draft_fates(s["accepted"], s["window"])
        for i, tok in enumerate(s["draft_tokens"]):
            rows.append({"request_id": s["request_id"], "step": s["step"], "pos": i + 1, "token": tok,
                         "q_draft": s["q_draft"][i], "p_target": s["p_target"][i],
                         "accept_prob": s["accept_probs"][i], "draft_entropy": s["draft_entropy"][i],
                         "fate": fates[i]})
    cols = ["request_id", "step", "pos", "token", "q_draft", "p_target", "accept_prob", "draft_entropy", "fate"]
    return pd.DataFrame(rows, columns=cols)


def requests_frame(trace: Trace, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per prompt: category, task, the prompt text, and its totals from the steps."""
    agg = steps.groupby("request_id").agg(target_calls=("step", "size"), new_tokens=("emitted", "sum"),
                                          accepted=("accepted", "sum"), drafted=("window", "sum"),
                                          decode_ms=("t_ms", "sum"))
    rows = []
    for rid, r in sorted(trace.requests.items()):
        rows.append({"request_id": rid, "category": r.get("category", ""), "task": task_of(r.get("category", "")),
                     "question_id": r.get("question_id"), "prompt_text": r.get("prompt_text", ""),
                     "prompt_ids": r["prompt_ids"], "finished": (trace.ends.get(rid) or {}).get("finished")})
    df = pd.DataFrame(rows, columns=["request_id", "category", "task", "question_id", "prompt_text", "prompt_ids",
                                     "finished"])
    return df.join(agg, on="request_id").fillna({"target_calls": 0, "new_tokens": 0})


def machine_context(h: dict[str, Any]) -> str:
    """Where and when a trace's timings were taken, from its header: date, device, dtype, threads and
    torch build. Tokens/s are only comparable within one such context."""
    sw, tgt = h.get("software") or {}, h.get("target") or {}
    threads = sw.get("cpu_threads")
    parts = [tgt.get("device"), tgt.get("dtype"),
             f"{threads} thread{'s' if str(threads) != '1' else ''}" if threads else None,
             f"torch {sw['torch']}" if sw.get("torch") else None]
    where = ", ".join(str(x) for x in parts if x) or "machine not recorded"
    return f"{run_date(h) or 'date not recorded'} · {where}"


def run_date(h: dict[str, Any]) -> str:
    """The header's `created` as 'YYYY-MM-DD HH:MM' (UTC), or '' when absent."""
    c = str(h.get("created") or "")
    if c == "unknown":  # an imported report that does not date its run (the import's own time is not the run's)
        return "date unknown"
    return c[:16].replace("T", " ") if c else ""


def sampling_label(h: dict[str, Any]) -> str:
    smp = h.get("sampling") or {}
    t = smp.get("temperature")
    if t is None:
        return "T —"  # the file does not say: never shown as greedy, never as "None"
    label = "greedy" if not t else f"T = {t:g}"
    if t and (smp.get("top_k") or (smp.get("top_p") not in (None, 1.0))):
        label += f" (top-k {smp.get('top_k') or '—'}, top-p {smp.get('top_p')})"
    return label


def draft_label(header: dict[str, Any]) -> str | None:
    """The header's draft name; a draft model that read a context window of the prompt is another drafter, so its
    window follows in the spec's own words: 'qwen2.5-coder-0.5b [ctx:192,sink=64]'. None without a draft."""
    d = header.get("draft") or {}
    if not d.get("name"):
        return None
    ctx = d.get("context")
    window = f" [ctx:{ctx.get('window')},sink={ctx.get('sink')}]" if isinstance(ctx, dict) and ctx.get("window") else ""
    return f"{d['name']}{window}"


def describe(trace: Trace) -> dict[str, Any]:
    """Header facts and the engine's own summary (engine.trace.format.summarize) for cards and pickers.

    `title` (pair · policy · sampling · date) tells traces apart on every page; `context` says where
    and when the timings were taken; `sampling_key` and `prompts_key` decide which traces compare."""
    h = trace.header
    draft = (h.get("draft") or {}).get("name")
    target = model_name((h.get("target") or {}).get("name", "?"))
    tasks = sorted({task_of(p.get("category", "")) for p in h.get("prompts", [])}
                   or {task_of(r.get("category", "")) for r in trace.requests.values()})
    pair = f"{target} ← {draft_label(h)}" if draft else f"{target} (no draft)"
    policy = (h.get("policy") or {}).get("spec", "?")
    smp = h.get("sampling") or {}
    date = run_date(h)
    return {"target": target, "draft": draft, "pair": pair, "policy": policy, "tasks": tasks, "demo": h.get("demo"),
            "verifier": h.get("verifier") or "—", "temperature": smp.get("temperature"),
            "sampling": sampling_label(h),
            "sampling_key": (smp.get("temperature"), smp.get("top_k"), smp.get("top_p")),
            "prompts_key": tuple(sorted(tuple(r["prompt_ids"]) for r in trace.requests.values())),
            "created": date, "context": machine_context(h),
            "title": " · ".join(x for x in (pair, policy, sampling_label(h), date[:10]) if x),
            "complete": trace.complete, "warnings": list(trace.warnings), "command": h.get("command"),
            "summary": trace.summary}


def unique_titles(entries: dict[str, "Entry"]) -> dict[str, str]:
    """label -> a title no other entry shares: pair · policy · sampling · date, then the time of day,
    then the file name for what is still tied (e.g. the same run uploaded twice)."""
    titles = {k: e.info["title"] for k, e in entries.items()}
    for extra in (lambda k, e: e.info["created"][11:16], lambda k, e: k):
        seen: dict[str, int] = {}
        for t in titles.values():
            seen[t] = seen.get(t, 0) + 1
        titles = {k: (f"{t} {extra(k, entries[k])}".rstrip() if seen[t] > 1 else t) for k, t in titles.items()}
    return titles


def run_groups(entries: dict[str, "Entry"]) -> dict[str, dict[tuple, list[str]]]:
    """target -> run -> labels, in first-seen order (real traces before tiny demo ones). A run is what was recorded the same day, with the
    same machine settings (device, dtype, threads, torch) and the same prompts: within one, tokens/s
    compare; across runs they mix hardware and load."""
    out: dict[str, dict[tuple, list[str]]] = {}
    for k, e in sorted(entries.items(), key=lambda kv: bool(kv[1].info["demo"])):  # real pairs first
        i = e.info
        machine = i["context"].split(" · ", 1)[-1]
        run = (i["created"][:10], machine, i["prompts_key"], bool(i["demo"]), e.origin == "live")
        out.setdefault(i["target"], {}).setdefault(run, []).append(k)
    return out


def comparable(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Why two traces' numbers do not compare like for like (empty: they do): a different target, a
    different draft (an autoregressive baseline, with no draft, compares with any draft), different
    sampling, or different prompts."""
    why = []
    if a["target"] != b["target"]:
        why.append(f"different targets ({a['target']} vs {b['target']})")
    if a["draft"] and b["draft"] and a["draft"] != b["draft"]:
        why.append(f"different drafts ({a['draft']} vs {b['draft']})")
    if a["sampling_key"] != b["sampling_key"]:
        why.append(f"different sampling ({a['sampling']} vs {b['sampling']})")
    if a["prompts_key"] != b["prompts_key"]:
        why.append("different prompts")
    return why


def make_entry(label: str, origin: str, trace: Trace) -> Entry:
    steps = steps_frame(trace)
    return Entry(label, origin, trace, steps, positions_frame(trace), describe(trace))
