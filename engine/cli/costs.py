"""`python -m engine costs`: what acceptance a draft/target pair needs on this machine.

Measures, side by side in one run, the target's forward time for k = 1..γ_max+1 tokens and the
draft's time per token (`engine.offline.reference.measure_timings`, round-robin over k), for each thread
count asked for. From them: c = t_draft / t_target(1) and v(γ) = t_target(γ+1) / t_target(1), and
per fixed window γ the i.i.d. acceptance α needed for a speedup of 1× (break-even) and of each
target S (`engine.offline.costmodel.required_alpha`). Compare with the pair's measured α (trace summaries,
`python -m engine validate`) to see whether the draft or the hardware is the limit.

Worked example: `python -m engine costs --threads 1,2 --dtype fp32 --speedups 1,1.3` prints one table
per thread count; `--markdown docs/benchmarks.md` appends them with the machine and versions.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

from engine.cli import common

PROMPT = ("Explain, step by step, how a small draft model can speed up text generation by a larger "
          "model without changing its output distribution.")  # any realistic context length works


def run_costs(target, draft, tokenizer, threads: list[int], max_window: int, repeats: int,
              gammas: list[int], speedups: list[float], more_paths: tuple = ()) -> dict:
    """Per thread count (and per weights path: `more_paths` = further (target, draft) pairs, measured
    after the first path at each thread count) the timings, c and the acceptance table."""
    import torch

    from engine.offline.costmodel import CostModel, requirements
    from engine.trace.prompts import encode
    from engine.offline.reference import measure_timings

    ids = encode(tokenizer, PROMPT)
    out = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "target": target.name,
           "draft": draft.name, "dtype": str(target.dtype).replace("torch.", ""), "context_len": len(ids),
           "by_threads": []}
    for n in threads:
        torch.set_num_threads(n)
        for t_lm, d_lm in ((target, draft), *more_paths):
            t = measure_timings(t_lm, d_lm, ids, max_tokens=max_window + 1, repeats=repeats)
            cm = CostModel.from_timings(t)
            table = requirements(cm, gammas, speedups)
            from engine.bench.bench import path_label

            out["by_threads"].append({"threads": n, "weights": path_label(t_lm, d_lm), "timings": t,
                                      "target_weights": getattr(t_lm, "weights", "dense"),
                                      "draft_weights": getattr(d_lm, "weights", "dense"),
                                      "c": cm.c, "rows": json.loads(table.to_json(orient="records"))})
    return out


def format_costs(result: dict) -> str:
    lines = []
    for block in result["by_threads"]:
        t = block["timings"]
        rows = block["rows"]
        keys = [k for k in rows[0] if k.startswith("alpha_for_")]
        tw, dw = block.get("target_weights", block.get("weights", "dense")), block.get("draft_weights")
        lines += [f"\n{block['threads']} thread(s), {block.get('weights', 'dense')} weights: target forward "
                  f"{t['target_ms_by_tokens'][0]:.1f} ms (1 token, {tw}), draft {t['draft_ms_per_token']:.1f} ms/token"
                  f"{f' ({dw})' if dw else ''}, c = {block['c']:.3f}\n",
                  "| γ | v(γ) = t(γ+1)/t(1) | cost(γ) = γc + v | ceiling (γ+1)/cost | "
                  + " | ".join(f"α for {k[len('alpha_for_'):]}" for k in keys) + " |",
                  "|---|---|---|---|" + "---|" * len(keys)]
        for r in rows:
            cells = ["unreachable" if r[k] is None or (isinstance(r[k], float) and math.isnan(r[k]))
                     else f"{r[k]:.2f}" for k in keys]
            lines.append(f"| {r['gamma']} | {r['v']:.2f} | {r['cost']:.2f} | {r['ceiling']:.2f}× | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("costs", help="measure c and v(γ) on this machine; the acceptance each window needs")
    common.add_target(p)
    common.add_draft(p)
    common.add_device(p, threads_flag=False)
    common.add_weights(p, several=True)
    p.add_argument("--threads", default="1", help="comma-separated thread counts, measured one after another")
    p.add_argument("--max-window", type=int, default=8)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--speedups", default="1,1.3", help="target speedups S to solve α for")
    common.add_out(p, "write the result as JSON")
    p.add_argument("--markdown", default=None, help="append a dated section (e.g. docs/benchmarks.md)")
    p.add_argument("--machine", default=None, help="machine description (default: CPU model, cores and flags)")
    p.set_defaults(func=cmd_costs)


def cmd_costs(a) -> int:
    import platform

    import torch
    import transformers

    from engine.models.load import check_pair, load_model, machine_description

    threads = list(common.ints(a.threads, "--threads"))
    speedups = list(common.floats(a.speedups, "--speedups"))
    if any(n < 1 for n in threads):
        raise ValueError(f"--threads must be positive integers, got {a.threads!r}")
    if not 1 <= a.max_window <= 64:
        raise ValueError(f"--max-window must be in [1, 64], got {a.max_window}")
    if any(s <= 0 for s in speedups):
        raise ValueError(f"--speedups must be positive, got {a.speedups!r}")
    import os

    if max(threads) > (os.cpu_count() or 1):
        raise ValueError(f"--threads {max(threads)} is more than this machine's {os.cpu_count()} cores")
    paths = common.weights_list(a.weights)
    from engine.bench.roofline_record import check_pair_paths

    check_pair_paths(paths, a.draft, a.dtype, a.device)  # refusals and fallbacks, before any load
    pairs, tokenizer = [], None
    for pw in paths:  # each model on its own path (a mixed pair: engine.models.pair_weights)
        target = load_model(a.target, a.dtype, a.device, role="target", weights=pw.target)
        draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target, weights=pw.draft)
        check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
        pairs.append((target.lm, draft.lm))
        tokenizer = tokenizer or target.tokenizer
    gammas = [g for g in (1, 2, 3, 4, 6, 8, 12, 16) if g <= a.max_window]
    (t0, d0), more = pairs[0], tuple(pairs[1:])
    result = run_costs(t0, d0, tokenizer, threads, a.max_window, a.repeats, gammas, speedups, more)
    result["command"] = common.command_line()
    text = format_costs(result)
    print(text)
    if a.out:
        from engine.trace.jsonio import write_json_atomic

        write_json_atomic(result, a.out)
    if a.markdown:
        head = (f"\n## {result['created'][:10]} — what acceptance `{result['target']}` + `{result['draft']}` needs "
                f"here ({result['dtype']})\n\n- command: `{result['command']}`\n- machine: {a.machine or machine_description()}; Python "
                f"{platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}\n"
                f"- i.i.d. acceptance α that a fixed window γ needs for each speedup, with the measured c and "
                f"v(γ) (`engine.offline.costmodel.required_alpha`); compare with the pair's measured α\n")
        with open(a.markdown, "a", encoding="utf-8") as f:
            f.write(head + text + "\n")
    return 0
