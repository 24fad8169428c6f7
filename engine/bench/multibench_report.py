"""Multibench tables: the BE / SR grid per temperature, per-call component times, the paper-shaped
summary next to the SpecTr-GBV paper's Table 1, and the dated markdown section (engine.bench.multibench
runs the grid). BE = mean_emitted_per_call_incl_bonus (engine.metrics), SR = speedup.
"""

from __future__ import annotations

from pathlib import Path

import torch

from engine.bench.multibench import METHODS, aggregate, method_of
from engine.metrics import EMITTED_PER_CALL, canonical_row

LABELS = {"token": "token (SD)", "block": "block (BV, Sun et al.)", "rrs": "RRS", "kseq": "SpecTr K-SEQ",
          "spectr-gbv-published": "SpecTr-GBV (published code)", "rbv": "RBV (ours, lossless)",
          "kbv": "KBV: K-SEQ + BV tail (ours, lossless)"}
# Table 1 averages of the SpecTr-GBV paper (via a secondary summary; project notes §5.2): BE, SR, keyed by
# verifier name (`spectr-gbv-published@1`: their GBV at K = 1).
PAPER = {"DeepSeek-33B/1.3B": {"token": (7.64, 1.64), "kseq": (8.39, 1.96), "spectr-gbv-published@1": (7.83, 1.67),
                               "spectr-gbv-published": (8.59, 2.12)},
         "DeepSeek-6.7B/1.3B": {"token": (6.13, 1.05), "kseq": (6.69, 1.11), "spectr-gbv-published@1": (6.27, 1.06),
                                "spectr-gbv-published": (6.84, 1.20)}}


def paper_summary(cell, where: str, K: int, sr_label: str = "ours SR") -> list[str]:
    """Our BE and SR next to the paper's Table 1 for each verifier it reports; `cell(method, k)` → (BE, SR or
    None) or None."""
    lines = [f"\nPaper-shaped summary ({where})\n",
             f"| method | ours BE | {sr_label} | " + " | ".join(f"{p} BE | {p} SR" for p in PAPER) + " |",
             "|---|---|---|" + "---|---|" * len(PAPER)]
    gbv = "spectr-gbv-published"
    for label, m, k, pk in (("token (SD)", "token", 1, "token"), ("block (BV, Sun et al.)", "block", 1, None),
                            ("SpecTr (K-SEQ)", "kseq", K, "kseq"), ("GBV (published code, K = 1)", gbv, 1, gbv + "@1"),
                            ("SpecTr-GBV (published code)", gbv, K, gbv), ("RRS", "rrs", K, None),
                            ("RBV (ours)", "rbv", K, None), ("KBV (ours)", "kbv", K, None)):
        c = cell(m, k)
        ours = "– | –" if c is None else f"{c[0]:.2f} | " + ("–" if c[1] is None else f"{c[1]:.2f}×")
        paper = " | ".join(f"{PAPER[p][pk][0]:.2f} | {PAPER[p][pk][1]:.2f}×" if pk else "– | –" for p in PAPER)
        lines.append(f"| {label} | {ours} | {paper} |")
    return lines


def section_head(result: dict, command: str, machine: str, title: str, details: str) -> str:
    """The dated markdown heading with command, machine and versions every multi-draft section starts with."""
    import platform

    import transformers

    return (f"\n## {result['created'][:10]} — {title}: `{result['target']}` + `{result['draft']}` ({result['dtype']})\n\n"
            f"- command: `{command}`\n- machine: {machine}; Python {platform.python_version()}, torch "
            f"{torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads\n"
            f"{details}- SpecTr-GBV (published code) is NOT lossless for K ≥ 2 (docs/audit.md): its BE/SR are not those "
            f"of a valid sampler\n")


def _grid_tables(rows: list[dict]) -> list[str]:
    lines: list[str] = []
    temps = sorted({r["temperature"] for r in rows})
    ls = sorted({r["L"] for r in rows if r["L"]})
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    ks = sorted({r["k"] for r in rows if r["method"] != "ar"})
    for temp in temps:
        lines += [f"\nT = {temp}: BE = emitted per call (incl. bonus) / SR (speedup vs autoregressive)\n",
                  "| method | K | " + " | ".join(f"L = {L}" for L in ls) + " |", "|---|---|" + "---|" * len(ls)]
        for m in methods:
            for k in ks:
                cells = []
                for L in ls:
                    r = next((r for r in rows if (r["temperature"], r["method"], r["k"], r["L"]) == (temp, m, k, L)), None)
                    cells.append("–" if r is None else f"{r[EMITTED_PER_CALL]:.2f} / {r['speedup']:.2f}×")
                if any(c != "–" for c in cells):
                    lines.append(f"| {LABELS[m]} | {k} | " + " | ".join(cells) + " |")
    for temp in temps:
        lines += [f"\nT = {temp}: per target call, ms — drafting / verify call (target pass + rule) / rule alone "
                  "(– where the run predates rule timing)\n",
                  "| method | K | " + " | ".join(f"L = {L}" for L in ls) + " |", "|---|---|" + "---|" * len(ls)]
        for m in ["ar"] + methods:
            for k in ks if m != "ar" else [1]:
                cells = []
                for L in ls if m != "ar" else [0]:
                    r = next((r for r in rows if (r["temperature"], r["method"], r["k"], r["L"]) == (temp, m, k, L)), None)
                    if r is None or "verify_ms_per_call" not in r:
                        cells.append("–")
                    else:
                        rule = "–" if r.get("rule_ms_per_call") is None else f"{r['rule_ms_per_call']:.1f}"
                        cells.append(f"{r['draft_ms_per_call']:.0f} / {r['verify_ms_per_call']:.0f} / {rule}")
                if any(c != "–" for c in cells):
                    label = "autoregressive" if m == "ar" else LABELS[m]
                    lines.append(f"| {label} | {k} | " + " | ".join(cells) + (" |" if m != "ar" else
                                                                               " |" + " |" * (len(ls) - 1)))
    # Paper-shaped comparison at the paper's main setting (T = 0.4, K = 3, L = 8 or the closest run).
    temp = 0.4 if 0.4 in temps else temps[len(temps) // 2]
    L = 8 if 8 in ls else ls[-1]
    K = 3 if 3 in ks else ks[-1]

    def pick(m, k):
        return next((r for r in rows if (r["temperature"], r["method"], r["k"], r["L"]) == (temp, m, k, L)), None)

    def cell(m, k):
        r = pick(m, k)
        return None if r is None else (r[EMITTED_PER_CALL], r["speedup"])

    lines += paper_summary(cell, f"T = {temp}, L = {L}, K = {K}; paper: Table 1 averages, notes §5.2", K)
    return lines


def format_tables(result: dict) -> str:
    if result.get("runs"):  # re-aggregate so older result files get the newer per-call columns and names
        result = dict(result, rows=aggregate(result["runs"]))
    else:
        result = dict(result, rows=[canonical_row(r) | {"method": method_of(r["method"])} for r in result["rows"]])
    lines = _grid_tables(result["rows"]) if result["rows"] else []
    if result.get("modes"):
        lines += ["\nOne step's cost, median ms on the first prompt (T = 0.4): K-way drafting batched vs sequential, "
                  "and the target pass as a token tree vs a batch of K (K = 1: one block, one extend)\n",
                  "| L | K | draft batch | draft sequential | target tree | target batch-K | tree nodes |",
                  "|---|---|---|---|---|---|---|"]

        def f(r, key):
            return f"{r[key]:.1f}" if key in r else "–"

        for r in result["modes"]:
            lines.append(f"| {r['L']} | {r['k']} | {f(r, 'draft_batch_ms')} | {f(r, 'draft_sequential_ms')} | "
                         f"{f(r, 'target_tree_ms')} | {f(r, 'target_batch_ms')} | {r.get('tree_nodes', '–')} |")
    return "\n".join(lines)


def append_markdown(result: dict, path: Path, command: str, machine: str) -> None:
    c = result["config"]
    details = (f"- Spec-Bench dev subset: {len(result['prompts'])} prompts ({c['per_category']} per task, question ids "
               f"{', '.join(str(p['question_id']) for p in result['prompts'])}), {c['max_new_tokens']} new tokens max; "
               f"grid K ∈ {c['ks']}, L ∈ {c['ls']}, T ∈ {c['temps']}; configurations interleaved per prompt with "
               f"autoregressive decoding\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(section_head(result, command, machine, "multi-draft and block verification", details)
                + format_tables(result) + "\n")
