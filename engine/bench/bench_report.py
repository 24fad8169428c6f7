"""The bench's rows and tables: its RunResults aggregated per (temperature, task, configuration), where each row's
wall time went, and the markdown table (engine.bench.bench runs the configurations; the metric names are
engine.metrics', the row fields are listed in engine.bench.bench's module doc).

    aggregate(results, costs) -> rows      ratio-of-means speedups, the per-call rates, the modelled speedup
                                           (engine.bench.modelled), the non-model share, and wall_split's two
                                           shares: prefill_share and draft_catchup_share
    format_table(result) -> str            the CLI's markdown, one table per temperature
    append_markdown(result, path, …)       a dated section of that table appended to a file
"""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path
from typing import Any

import torch

from engine.bench.modelled import modelled_speedup, own_drafter
from engine.bench.runner import DEFAULT_CONFIGS, RunResult
from engine.cost import probe_ms
from engine.metrics import ACCEPTANCE_RATE, EMITTED_PER_CALL, MODELLED_SPEEDUP, canonical_row, rates


def aggregate(results: list[RunResult], costs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows per (temperature, task, config); with the run's `costs`, each row also carries
    MODELLED_SPEEDUP (engine.bench.modelled: the run's counts priced at its own median costs)."""
    rows = []
    keys = sorted({(r.temperature, r.config) for r in results}, key=lambda k: (k[0], DEFAULT_CONFIGS.index(k[1])
                                                                                if k[1] in DEFAULT_CONFIGS else 99))
    paths = list(dict.fromkeys(r.weights for r in results))
    tasks = sorted({r.task for r in results}) + ["overall"]
    for temp, task, w in itertools.product(sorted({r.temperature for r in results}), tasks, paths):
        sel = [r for r in results if r.temperature == temp and r.weights == w and (task == "overall" or r.task == task)]
        base = [r for r in sel if r.config == "ar"]
        base_tps = statistics.mean(r.new_tokens / r.wall_s for r in base) if base else float("nan")
        base_dec = statistics.mean(_decode_tps(r) for r in base) if base else float("nan")
        # with several weights paths, every row is also priced against the dense path's AR
        dense = [r for r in results if r.temperature == temp and r.weights == "dense" and r.config == "ar"
                 and (task == "overall" or r.task == task)]
        dense_tps = statistics.mean(r.new_tokens / r.wall_s for r in dense) if dense and len(paths) > 1 else None
        for t, conf in keys:
            if t != temp:
                continue
            rs = [r for r in sel if r.config == conf]
            if not rs:
                continue
            tps = statistics.mean(r.new_tokens / r.wall_s for r in rs)
            tok = sum(r.new_tokens for r in rs)
            calls = sum(r.target_calls for r in rs)
            drafted = sum(r.drafted for r in rs)
            wasted = drafted - sum(r.accepted for r in rs) + sum(r.dropped for r in rs)
            dec = statistics.mean(_decode_tps(r) for r in rs)
            extra = {} if len(paths) == 1 and w == "dense" else {"weights": w}
            if dense_tps is not None:
                extra["speedup_vs_dense_ar"] = tps / dense_tps
            path_costs = (costs or {}).get("by_weights", {}).get(w, costs) if costs else costs
            rows.append({"temperature": temp, "task": task, "config": conf, "prompts": len(rs), **extra,
                         "tokens_per_s": tps, "speedup_vs_ar": tps / base_tps,
                         MODELLED_SPEEDUP: modelled_speedup(rs, base, path_costs),
                         "decode_tokens_per_s": dec, "decode_speedup_vs_ar": dec / base_dec,
                         **rates(tok, calls, sum(r.accepted for r in rs), drafted or None),
                         "target_calls": calls, "new_tokens": tok,
                         # rejected + dropped drafts (HF runs: unknown, their drafts are not counted)
                         "wasted_drafts": None if conf.startswith("hf:") else wasted,
                         # wall time outside the models' forward calls: sampling, verification,
                         # cache bookkeeping, Python — per target call and as a share of wall time
                         "non_model_ms_per_call": 1e3 * sum(r.wall_s - r.model_s for r in rs) / calls,
                         "non_model_share": 1 - sum(r.model_s for r in rs) / sum(r.wall_s for r in rs),
                         **wall_split(rs, path_costs)})
    return rows


def wall_split(rs: list[RunResult], costs: dict[str, Any] | None) -> dict[str, float | None]:
    """Where a row's wall time went, as shares of it: the target's prompt prefill (timed; speculation cannot
    shorten it, so it bounds the row's speedup: a row with a prefill share s is at most 1/s × AR's rate over
    the same prompts) and the draft model's catch-ups (its lazy prompt prefill and long catch-ups: the time they
    took, timed in the run; for runs that did not time them, the row's draft-prefill tokens priced at the probe's
    per-token draft prefill, which misprices short catch-ups — a prefill's cost per token falls with its length;
    None without either, and for HF's runs, whose draft caches are its own). Example: 95.7 s of AR with 33.2 s of
    prefill → prefill_share 0.35."""
    wall, conf = sum(r.wall_s for r in rs), rs[0].config
    if own_drafter(conf):  # a model-free, block or EAGLE drafter: no draft model to catch up
        tp = 0.0
    else:
        tp = probe_ms(costs, "t_draft_prefill_ms") if costs and not conf.startswith("hf:") else float("nan")
    if any(getattr(r, "draft_prefill_s", 0.0) > 0 for r in rs):  # timed in the run
        catch = sum(r.draft_prefill_s for r in rs)
    else:
        catch = sum(r.draft_prefill_tokens for r in rs) * tp / 1e3 if math.isfinite(tp) else None
    return {"prefill_share": sum(r.prefill_s for r in rs) / wall if wall > 0 else None,
            "draft_catchup_share": catch / wall if catch is not None and wall > 0 else None}


def _split_cell(r: dict[str, Any]) -> str:
    """'35 % · 12 %' (prefill · draft catch-up shares of the row's wall time); '–' where a result predates them."""
    pre, cat = r.get("prefill_share"), r.get("draft_catchup_share")
    if pre is None:
        return "–"
    return f"{100 * pre:.0f} % · " + ("–" if cat is None else f"{100 * cat:.0f} %")


def _decode_tps(r: RunResult) -> float:
    """New tokens per second of wall time after the prompt's prefill."""
    return r.new_tokens / max(r.wall_s - r.prefill_s, 1e-9)


def format_table(result: dict[str, Any], tasks: bool = True) -> str:
    """Markdown tables per temperature; rows of result files written before engine.metrics are read
    under their new names (canonical_row)."""
    lines = []
    all_rows = [canonical_row(r) for r in result["rows"]]
    for temp in sorted({r["temperature"] for r in all_rows}):
        rows = [r for r in all_rows if r["temperature"] == temp and (tasks or r["task"] == "overall")]
        lines.append(f"\nT = {temp} ({'greedy' if temp == 0 else 'sampling'})\n")
        lines.append("| task | config | tok/s | speedup vs AR | speedup excl. prefill | modelled speedup "
                     "| emitted/call (incl. bonus) | acceptance rate | target calls | wasted drafts | non-model share "
                     "| wall in prefill · draft catch-up |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        multi = len(result.get("weights", [])) > 1
        for r in rows:
            acc = "–" if r.get(ACCEPTANCE_RATE) is None else f"{r[ACCEPTANCE_RATE]:.3f}"
            wasted = r.get("wasted_drafts")
            dsp = f"{r['decode_speedup_vs_ar']:.2f}×" if "decode_speedup_vs_ar" in r else "–"
            share = f"{100 * r['non_model_share']:.1f} %" if "non_model_share" in r else "–"
            mod = f"{r[MODELLED_SPEEDUP]:.2f}×" if r.get(MODELLED_SPEEDUP) is not None else "–"
            conf = r["config"] + (f" [{r['weights']}]" if multi else "")
            vs = f"{r['speedup_vs_ar']:.2f}×" + (f" ({r['speedup_vs_dense_ar']:.2f}× dense AR)"
                                                  if r.get('speedup_vs_dense_ar') is not None else "")
            lines.append(f"| {r['task']} | {conf} | {r['tokens_per_s']:.1f} | {vs} | {dsp} | "
                         f"{mod} | {r[EMITTED_PER_CALL]:.2f} | {acc} | {r['target_calls']} | "
                         f"{'–' if wasted is None else wasted} | {share} | {_split_cell(r)} |")
    for w, c in result["costs"].get("by_weights", {"": result["costs"]}).items():
        growth = ", ".join(f"t({k})/t(1)={v:.2f}" for k, v in c["verify_growth"].items())
        t1 = c["t_target_ms"].get(1, c["t_target_ms"].get("1"))  # int keys in memory, str keys after JSON
        lines.append(f"\nCost ratio{f' ({w})' if w else ''} c = draft {c['t_draft_ms']:.2f} ms / target {t1:.2f} ms = "
                     f"{c['c']:.3f}; verify cost {growth}")
    if result["greedy_mismatches"]:
        lines.append(f"\nGreedy outputs differing from autoregressive: {', '.join(result['greedy_mismatches'])}")
    else:
        lines.append("\nEvery greedy run of our engine reproduced the autoregressive output exactly.")
    return "\n".join(lines)


def append_markdown(result: dict[str, Any], path: Path, command: str, machine: str) -> None:
    import platform

    import transformers

    head = (f"\n## {result['created'][:10]} — `{result['target']}` + `{result['draft']}` ({result['dtype']})\n\n"
            f"- command: `{command}`\n- machine: {machine}; Python {platform.python_version()}, torch "
            f"{torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads\n"
            f"- {result['config']['prompts']} prompts ({result['config']['per_category']} per task), "
            f"{result['config']['max_new_tokens']} new tokens max, configurations interleaved per prompt\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(head + format_table(result) + "\n")
