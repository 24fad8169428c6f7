"""Tables of the paired multi-draft grid (engine.bench.paired): BE and modelled SR per (verifier, K, L)
at each T, the model's inputs, and the check of paired against real runs.
"""

from __future__ import annotations

from pathlib import Path

from engine.bench.multibench import METHODS
from engine.bench.multibench_report import LABELS, paper_summary, section_head
from engine.bench.paired import paired_diff, paired_rows, real_rows


def _pick(rows, temp, L, m, k):
    return next((r for r in rows if (r["temperature"], r["L"], r["method"], r["k"]) == (temp, L, m, k)), None)


def format_paired(result: dict) -> str:
    rows, real = paired_rows(result), real_rows(result)
    cfg = result["config"]
    ls, ks, lines = cfg["ls"], sorted(cfg["ks"]), []
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    for temp in cfg["temps"]:
        lines += [f"\nT = {temp}: BE (paired, emitted per call incl. bonus) / SR (modelled from anchored per-call costs, "
                  "prefill excluded)\n",
                  "| method | K | " + " | ".join(f"L = {L}" for L in ls) + " |", "|---|---|" + "---|" * len(ls)]
        for m in methods:
            for k in ks:
                cells = [_pick(rows, temp, L, m, k) for L in ls]
                if any(cells):
                    txt = ["–" if r is None else f"{r['be']:.2f} / " + ("–" if r["sr_model"] is None else
                                                                        f"{r['sr_model']:.2f}×") for r in cells]
                    lines.append(f"| {LABELS[m]} | {k} | " + " | ".join(txt) + " |")
    # Per-prompt spread of the headline cells: how much of a method difference is the prompts, not the method.
    lines += ["\nPer-prompt BE, mean ± sd, at L = 4 (or the middle L): SD, BV, and each multi-draft rule at K = max\n",
              "| T | " + " | ".join(LABELS[m] for m in methods) + " |", "|---|" + "---|" * len(methods)]
    L0 = 4 if 4 in ls else ls[len(ls) // 2]
    for temp in cfg["temps"]:
        cells = []
        for m in methods:
            r = _pick(rows, temp, L0, m, 1 if m in ("token", "block") else max(ks))
            cells.append("–" if r is None else f"{r['be_prompt_mean']:.2f} ± {r['be_prompt_sd']:.2f}")
        lines.append(f"| {temp} | " + " | ".join(cells) + " |")
    # Paired differences: the comparisons the papers make, with their per-prompt uncertainty.
    K = max(ks)
    pairs = [(("block", 1), ("token", 1)), (("rbv", K), ("token", 1)), (("rrs", K), ("token", 1)),
             (("kseq", K), ("token", 1)), (("rbv", K), ("block", 1))]
    pairs += [(("spectr-gbv-published", k), ("kseq", k)) for k in ks if k > 1]
    pairs += [(("spectr-gbv-published", k), ("spectr-gbv-published", 1)) for k in ks if k > 1]
    lines += ["\nPaired differences: BE ratio (pooled), and per-prompt BE difference mean ± 2 se (prompts where the "
              "first is higher / all)\n", "| T | L | comparison | ratio | difference ± 2 se | higher on |",
              "|---|---|---|---|---|---|"]
    for temp in cfg["temps"]:
        for L in ls:
            for a, b in pairs:
                d = paired_diff(rows, temp, L, a, b)
                if d is None:
                    continue
                lines.append(f"| {temp} | {L} | {LABELS[a[0]]} K = {a[1]} vs {LABELS[b[0]]} K = {b[1]} | "
                             f"{d['ratio']:.3f} | {d['diff_mean']:+.2f} ± {2 * d['diff_se']:.2f} | "
                             f"{d['wins']} / {d['n']} |")
    if result.get("costs"):
        temps = cfg["temps"]
        lines += ["\nModel inputs: one step's ms, draft / verify (draft: K-way batched drafting of L tokens, K = 1 "
                  "sequential; verify: one tree pass). Probe: medians on one short context; used: the probe anchored "
                  "to the real runs' per-call times at K = 1 and K = K_max (engine.bench.paired.anchored_costs)\n",
                  "| L | K | probe | " + " | ".join(f"used, T = {t}" for t in temps) + " |",
                  "|---|---|---|" + "---|" * len(temps)]
        for c in result["costs"]:
            d = c.get("draft_batch_ms", c.get("draft_sequential_ms")) if c["k"] > 1 else c["draft_sequential_ms"]
            used = []
            for t in temps:
                u = next((r for r in rows if (r["temperature"], r["L"], r["k"]) == (t, c["L"], c["k"])
                          and r["draft_ms"] is not None), None)
                used.append("–" if u is None else f"{u['draft_ms']:.0f} / {u['verify_ms']:.0f}")
            lines.append(f"| {c['L']} | {c['k']} | {d:.0f} / {c['target_tree_ms']:.0f} | " + " | ".join(used) + " |")
        for temp in cfg["temps"]:
            r = next((r for r in rows if r["temperature"] == temp), None)
            if r:
                loops = ", ".join(f"L = {x['L']}: {x['loop_ms_per_call']:.0f}" for x in rows
                                  if x["temperature"] == temp and (x["method"], x["k"]) == (r["method"], r["k"]))
                lines.append(f"\nT = {temp}: AR {r['ar_ms_per_token']:.0f} ms per token (decode only); per-call loop "
                             f"time outside draft and verify, ms: {loops}.")
    lines += ["\nPaired vs real: the same configuration as a shadow of the driver run and as its own run, same prompts\n",
              "| T | configuration | BE paired | BE real | SR model | SR real |", "|---|---|---|---|---|---|"]
    for r in real:
        p = _pick(rows, r["temperature"], r["L"], r["method"], r["k"])
        if p is None:
            continue
        sm = "–" if p["sr_model"] is None else f"{p['sr_model']:.2f}×"
        lines.append(f"| {r['temperature']} | {LABELS[r['method']]}, K = {r['k']}, L = {r['L']} | {p['be']:.2f} | "
                     f"{r['be']:.2f} | {sm} | {r['sr']:.2f}× |")
    # The paper's Table-1 shape at T = 0.4, K = 3 (their main setting) and our middle L.
    temp = 0.4 if 0.4 in cfg["temps"] else cfg["temps"][0]
    K = 3 if 3 in ks else max(ks)

    def cell(m, k):
        r = _pick(rows, temp, L0, m, k)
        return None if r is None else (r["be"], r["sr_model"])

    lines += paper_summary(cell, f"T = {temp}, L = {L0}, K = {K}; paper: Table 1 averages on a GPU", K, "ours SR (model)")
    return "\n".join(lines)


def append_paired_markdown(result: dict, path: Path, command: str, machine: str) -> None:
    c = result["config"]
    details = (f"- Spec-Bench dev subset: {len(result['prompts'])} prompts ({c['per_category']} per task), "
               f"{c['max_new_tokens']} new tokens max; driver {c['driver']} at K = {max(c['ks'])}, shadows "
               f"{', '.join(result['shadows'])}; L ∈ {c['ls']}, T ∈ {c['temps']}\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(section_head(result, command, machine, "multi-draft grid by paired verification", details)
                + format_paired(result) + "\n")
