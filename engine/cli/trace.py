"""`python -m engine validate TRACE…` and `python -m engine export SRC DST`: a trace's summary (the
names of engine.metrics), or its first error; a trace converted to Parquet, Perfetto step timings or a
Spec-Bench answer file.
"""

from __future__ import annotations

import json
from pathlib import Path


def add_parser(sub) -> None:
    v = sub.add_parser("validate", help="validate traces and print their summary")
    v.add_argument("traces", nargs="+")
    v.add_argument("--json", action="store_true", help="also print the summary as JSON")
    v.set_defaults(func=cmd_validate)
    e = sub.add_parser("export", help="convert a trace to Parquet (.parquet), Perfetto step timings (.json), "
                                      "Spec-Bench (.specbench.jsonl) or Prometheus text with vLLM's names (.prom)")
    e.add_argument("src")
    e.add_argument("dst")
    e.set_defaults(func=cmd_export)


def print_summary(s: dict, path) -> None:
    from engine.metrics import ACCEPTANCE_RATE, EMITTED_PER_CALL, LABELS

    print(f"{path}: {s['requests']} requests, {s['target_calls']} target calls, {s['new_tokens']} new tokens")
    rate = s[ACCEPTANCE_RATE]  # None: an imported run that never recorded its drafts
    print(f"  mean {LABELS[EMITTED_PER_CALL]} {s[EMITTED_PER_CALL]:.3f}   "
          f"draft acceptance rate {'n/a' if rate is None else f'{rate:.3f}'}   tokens/s {s['tokens_per_s']:.1f}")


def cmd_validate(a) -> int:
    from engine.trace.format import TraceError, load_trace

    status = 0
    for path in a.traces:
        try:
            t = load_trace(path)
        except TraceError as e:
            print(f"INVALID {e}")
            status = 1
            continue
        h = t.header
        state = "complete" if t.complete else "INCOMPLETE (no footer)"
        print(f"OK {path}: {state}; policy {h['policy']['spec']}; target {h['target']['name']}; "
              f"draft {(h.get('draft') or {}).get('name')}")
        print_summary(t.summary, path)
        for w in t.warnings:
            print(f"  warning: {w}")
        if a.json:
            print(json.dumps(t.summary, indent=1))
    return status


def cmd_export(a) -> int:
    """The output's suffix picks the format: .parquet (a trace again, loadable everywhere), .json
    (e.g. OUT.perfetto.json: step timings as Chrome/Perfetto trace events, engine.trace.perfetto) or
    .specbench.jsonl (a Spec-Bench answer file that speed.py reads, engine.interop.specbench) or .prom
    (Prometheus text exposition with vLLM's counter names, engine.interop.prometheus)."""
    from engine.trace.format import TraceError, load_trace, to_parquet

    try:
        t = load_trace(a.src)
    except TraceError as e:
        raise ValueError(str(e)) from None
    dst = Path(a.dst)
    if dst.name.endswith(".specbench.jsonl"):
        from engine.interop.specbench import trace_answers, write_answers

        write_answers(trace_answers(t), dst)
    elif dst.suffix == ".parquet":
        to_parquet(t, dst)
    elif dst.suffix == ".prom":
        from engine.interop.prometheus import to_prometheus
        from engine.trace.jsonio import write_text_atomic

        write_text_atomic(to_prometheus(t), dst)
    elif dst.suffix == ".json":
        from engine.trace.jsonio import write_json_atomic
        from engine.trace.perfetto import to_perfetto

        write_json_atomic(to_perfetto(t), dst, indent=None)
    else:
        raise ValueError(f"{dst.name}: export writes Parquet (.parquet), Perfetto trace events (.json, e.g. "
                         f"OUT.perfetto.json) a Spec-Bench answer file (OUT.specbench.jsonl) or Prometheus text "
                         f"(OUT.prom); JSONL is the engine's native output")
    print(f"wrote {dst} ({len(t.steps)} steps)")
    return 0
