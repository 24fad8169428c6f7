"""`python -m engine advise TRACE...`: one answer per pair and task (engine.offline.advise).

Any mix of decode traces (ours or imported, .jsonl or .parquet) and reference runs of one pair:

    $ python -m engine advise traces/qwen-*-t0.jsonl traces/ref-qwen-greedy.jsonl
    qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b: use K = 0 (plain autoregressive: no window beats AR); …

then one row per task. A trace without timings gets its advice in hardware-free units (flat verify,
c = --c or 0.1) with a one-line note; a bad --c or --max-k is one error line before anything loads.
`--against RESULT.json` checks the advice: the advised K's measured speedup in a bench result that ran
fixed:K, beside the predicted one.
"""

from __future__ import annotations

import math


def add_parser(sub) -> None:
    p = sub.add_parser("advise", help="which window K to use for a pair, per task, and what the oracle leaves")
    p.add_argument("traces", nargs="+", help="decode traces and/or reference runs (.jsonl / .parquet)")
    p.add_argument("--c", type=float, default=None,
                   help="draft ÷ target cost per token, flat verify (default: the traces' own timings)")
    p.add_argument("--max-k", type=int, default=8, help="longest window advised (default 8)")
    p.add_argument("--against", default=None, metavar="RESULT.json",
                   help="a bench result holding fixed:K runs: print the advised K's measured speedup beside the "
                        "predicted one (the advice's error)")
    p.add_argument("--temperature", type=float, default=0.0, help="the --against rows' temperature (default 0)")
    p.set_defaults(func=cmd_advise)


def cmd_advise(a) -> int:
    if a.c is not None and not (math.isfinite(a.c) and a.c > 0):
        raise ValueError(f"--c must be a positive cost ratio, got {a.c:g}")
    if not 1 <= a.max_k <= 64:
        raise ValueError(f"--max-k must be in [1, 64], got {a.max_k}")
    from engine.offline.advise import advise
    from engine.offline.analysis import load_any

    result = None
    if a.against is not None:  # read before any trace: a bad result file is one line, nothing else done
        import json
        from pathlib import Path

        try:
            result = json.loads(Path(a.against).read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"--against {a.against}: not a readable bench result ({type(e).__name__})") from None
        if not isinstance(result, dict) or not isinstance(result.get("rows"), list):
            raise ValueError(f"--against {a.against}: not a bench result (no 'rows' list)")
    adv = advise([load_any(p)[1] for p in a.traces], c=a.c, max_k=a.max_k)
    print(f"{adv.pair}: {adv.line()}")
    if adv.note:
        print(f"note: {adv.note}")
    print("| task | best K | speedup vs AR |")
    print("|---|---|---|")
    for task, (k, s) in sorted(adv.per_task.items()):
        print(f"| {task} | {k} | {s:.2f}× |")
    if result is not None:
        from engine.offline.advise import check_against

        chk = check_against(adv, result, a.temperature)
        mod = "" if chk["modelled"] is None else f", modelled {chk['modelled']:.2f}×"
        print(f"against {a.against} (T = {a.temperature:g}): predicted {chk['predicted']:.2f}× for "
              f"{chk['config']}, measured {chk['measured']:.2f}×{mod}: error {100 * chk['error']:+.1f} %")
    return 0
