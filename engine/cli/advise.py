"""`python -m engine advise TRACE...`: one answer per pair and task (engine.offline.advise).

Any mix of decode traces (ours or imported, .jsonl or .parquet) and reference runs of one pair:

    $ python -m engine advise traces/qwen-*-t0.jsonl traces/ref-qwen-greedy.jsonl
    qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b: use K = 0 (plain autoregressive: no window beats AR); …

then one row per task. A trace without timings gets its advice in hardware-free units (flat verify,
c = --c or 0.1) with a one-line note; a bad --c or --max-k is one error line before anything loads.
"""

from __future__ import annotations

import math


def add_parser(sub) -> None:
    p = sub.add_parser("advise", help="which window K to use for a pair, per task, and what the oracle leaves")
    p.add_argument("traces", nargs="+", help="decode traces and/or reference runs (.jsonl / .parquet)")
    p.add_argument("--c", type=float, default=None,
                   help="draft ÷ target cost per token, flat verify (default: the traces' own timings)")
    p.add_argument("--max-k", type=int, default=8, help="longest window advised (default 8)")
    p.set_defaults(func=cmd_advise)


def cmd_advise(a) -> int:
    if a.c is not None and not (math.isfinite(a.c) and a.c > 0):
        raise ValueError(f"--c must be a positive cost ratio, got {a.c:g}")
    if not 1 <= a.max_k <= 64:
        raise ValueError(f"--max-k must be in [1, 64], got {a.max_k}")
    from engine.offline.advise import advise
    from engine.offline.analysis import load_any

    adv = advise([load_any(p)[1] for p in a.traces], c=a.c, max_k=a.max_k)
    print(f"{adv.pair}: {adv.line()}")
    if adv.note:
        print(f"note: {adv.note}")
    print("| task | best K | speedup vs AR |")
    print("|---|---|---|")
    for task, (k, s) in sorted(adv.per_task.items()):
        print(f"| {task} | {k} | {s:.2f}× |")
    return 0
