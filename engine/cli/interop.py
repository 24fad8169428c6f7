"""`python -m engine import specbench FILE [--questions Q.jsonl] --out T.jsonl [--baseline B.jsonl --tokenizer DIR]`
`python -m engine import {vllm,vllm-prom,llamacpp,sglang} FILE -o T.jsonl`
`python -m engine diagnose TRACE [--c C] [--ar FILE] [--ours DIR]`

Import writes the answer file as a trace (engine.interop.specbench) and, given the baseline's answer
file, prints Spec-Bench's speed.py table (engine.interop.speed) for the pair; a serving engine's report
becomes a trace that says what it lacks (engine.interop.formats). Diagnose prints per-position
acceptance, the fitted acceptance α, the window the cost model recommends and the accepted-length
bound (engine.interop.diagnose); an imported run is also set beside the lab's own runs of the same
pair (engine.interop.same_pair).
"""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="import another tool's run as a trace (Spec-Bench answers, vLLM, llama.cpp, "
                                      "SGLang reports)")
    p.add_argument("format", choices=["specbench", *peer_formats()], help="the source format")
    p.add_argument("file", help="Spec-Bench answer file (data/spec_bench/model_answer/<model-id>.jsonl), or a vLLM / "
                                "llama.cpp / SGLang report (docs/interop.md)")
    p.add_argument("--questions", default=None, help="Spec-Bench question.jsonl: prompt texts for the trace")
    p.add_argument("-o", "--out", default=None, help="trace path (.jsonl)")
    p.add_argument("--baseline", default=None,
                   help="the baseline's answer file: print speed.py's per-task tok/s and speedup for the pair")
    p.add_argument("--tokenizer", default=None,
                   help="local tokenizer directory for speed.py's baseline recount (len(input_ids) − 1 per turn); "
                        "without it the baseline's own new_tokens are used, which speed.py does not do")
    p.add_argument("--before", default=None,
                   help="vllm-prom: the scrape taken just before the run; the run is the difference (a single "
                        "scrape counts everything since the server started)")
    p.add_argument("--model", default=None, help="vllm-prom: the model_name to read from a multi-model scrape")
    p.add_argument("--ar", default=None, help="the same engine's run without speculation (a report of the same "
                                              "format, or a trace): print the run's ×AR from both files' timings")
    p.set_defaults(func=cmd_import)
    d = sub.add_parser("diagnose", help="per-position acceptance, fitted α, recommended window and the "
                                        "accepted-length bound of a trace (imported or our own)")
    d.add_argument("trace")
    d.add_argument("--c", type=float, default=None,
                   help="draft ÷ target cost per token (default: from the trace's timings, else the lab's measured "
                        "costs of the same pair; without either there is no recommended window until c is given)")
    d.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    d.add_argument("--ar", default=None, help="the same engine's run without speculation (a trace or an engine's "
                                              "report): the run's ×AR from both files' timings")
    d.add_argument("--ours", default=None,
                   help="folder of the lab's own traces to set an imported run beside (same target and draft "
                        "models, names normalised; default traces/)")
    d.set_defaults(func=cmd_diagnose)


def peer_formats() -> tuple[str, ...]:
    """The serving-engine formats `import` takes: the readers' registry itself (engine.interop.formats.READERS)."""
    from engine.interop.formats import READERS

    return tuple(READERS)


def cmd_import(a) -> int:
    from engine.interop import specbench, speed
    from engine.metrics import EMITTED_PER_CALL, LABELS

    if a.format in peer_formats():
        return import_peer(a)
    if not a.out and not a.baseline:
        raise ValueError("nothing to do: give --out (write a trace) and/or --baseline (print the speedup)")
    method = specbench.read_answers(a.file)
    if a.out:
        if not str(a.out).endswith(".jsonl"):
            raise ValueError(f"--out {a.out}: import writes a JSONL trace (then `python -m engine export` for Parquet)")
        specbench.import_answers(a.file, a.out, a.questions, command=" ".join(["python -m engine", *sys.argv[1:]]))
        from engine.trace.format import load_trace

        t = load_trace(a.out)
        s = t.summary
        print(f"wrote {a.out}: {s['requests']} questions, {s['target_calls']} steps, {s['new_tokens']} tokens; "
              f"mean accepted tokens τ = {LABELS[EMITTED_PER_CALL]} {s[EMITTED_PER_CALL]:.3f}, "
              f"tok/s mean over questions {s['tokens_per_s_mean_over_requests']:.2f}")
        print(f"  imported from Spec-Bench: no draft tokens, probabilities, windows or token ids; "
              f"{t.header['imported']['timing']}")
        for note in t.header["imported"]["notes"][:10]:
            print(f"  note: {note}")
    if a.baseline:
        base = specbench.read_answers(a.baseline)
        counter = speed.hf_token_counter(a.tokenizer) if a.tokenizer else None
        if counter is None:
            print("warning: no --tokenizer: baseline tokens are the file's new_tokens, not speed.py's recount "
                  "from text", file=sys.stderr)
        print(speed.format_table(speed.speed_table(method, base, counter)))
    return 0


def import_peer(a) -> int:
    from engine.interop.formats import import_peer as run
    from engine.metrics import ACCEPTANCE_RATE, EMITTED_PER_CALL, LABELS
    from engine.trace.format import TraceError

    if not a.out or not str(a.out).endswith(".jsonl"):
        raise ValueError("give -o OUT.jsonl: import writes a JSONL trace")
    if a.baseline or a.questions or a.tokenizer:
        raise ValueError("--baseline, --questions and --tokenizer are for Spec-Bench answer files")
    try:
        t = run(a.format, a.file, a.out, command=" ".join(["python -m engine", *sys.argv[1:]]),
                before=getattr(a, "before", None), model=getattr(a, "model", None))
    except TraceError as e:
        raise ValueError(str(e)) from None
    s, imp = t.summary, t.header["imported"]
    rate = s[ACCEPTANCE_RATE]
    toks = (f"output length not in the file (its verify steps emitted {s['new_tokens']} tokens)"
            if "output length" in imp["lacks"] else f"{s['new_tokens']} tokens")
    print(f"wrote {a.out}: {s['requests']} requests, {s['target_calls']} target calls, {toks}; "
          f"{LABELS[EMITTED_PER_CALL]} {s[EMITTED_PER_CALL]:.3f}, acceptance rate "
          f"{'n/a' if rate is None else f'{rate:.3f}'}")
    from engine.interop.diagnose import LENGTH_NAMES, acceptance_lengths

    al = acceptance_lengths(t)
    if al["token_weighted"] is not None:
        print(f"  {LENGTH_NAMES['per_request_mean']} {al['per_request_mean']:.4f} over {al['requests']} requests; "
              f"{LENGTH_NAMES['token_weighted']} {al['token_weighted']:.4f}")
    print(f"  imported from {a.format}: lacks {', '.join(imp['lacks'])}")
    print(f"  timing: {imp['timing']}")
    for note in imp["notes"][:10]:
        print(f"  note: {note}")
    if getattr(a, "ar", None):
        for line in _ar_lines(t, a.ar):
            print(line)
    return 0


def _load_any(path: str):
    """A trace file, or an engine's report (detected) imported in memory."""
    from pathlib import Path

    from engine.interop import formats
    from engine.trace.format import load_trace

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p.name}: no such file")
    data = p.read_bytes()
    return formats.loads_peer(data, p.name) if formats.detect(data) else load_trace(p)


def _ar_lines(t, ar_path: str) -> list[str]:
    from pathlib import Path

    from engine.interop.baseline import BaselineError, times_ar
    from engine.trace.format import TraceError

    try:
        x = times_ar(t, _load_any(ar_path), Path(ar_path).name)
    except (BaselineError, TraceError) as e:
        raise ValueError(str(e)) from None
    if x["x_ar"] is None:
        return [f"  ×AR: none — {x['why_none']}"]
    out = [f"  ×AR {x['x_ar']:.3f} against {x['baseline']} ({x['tokens_per_s']:.2f} vs {x['ar_tokens_per_s']:.2f} "
           f"tokens/s; basis: {x['basis_text']})"]
    if x["shared"]:
        out.append(f"  ×AR over the {x['shared']['requests']} requests both runs share: {x['shared']['x_ar']:.3f}")
    return out


def cmd_diagnose(a) -> int:
    import json

    from engine.interop.diagnose import diagnose, format_diagnosis
    from engine.trace.format import TraceError, load_trace

    try:
        t = load_trace(a.trace)
    except TraceError as e:
        raise ValueError(str(e)) from None
    from engine.interop.baseline import format_why, why_low

    d = diagnose(t, a.c)
    w = why_low(t)
    beside = None
    if t.header.get("imported"):  # an engine's run: set beside the lab's own runs of the same pair
        from pathlib import Path

        from engine.interop.same_pair import beside_ours, format_beside, own_runs, pair_key

        if getattr(a, "ours", None) and not Path(a.ours).is_dir():
            raise ValueError(f"--ours {a.ours}: no such folder")
        beside = beside_ours(t, own_runs(pair_key(t), getattr(a, "ours", None)), Path(a.trace).name)
    if a.json:
        print(json.dumps({**d, "why_low": w, **({"beside_ours": beside} if beside else {})}, indent=1))
    else:
        print(format_diagnosis(d, a.trace))
        print("\n".join(format_why(w)))
        if beside:
            print("\n".join(format_beside(beside)))
    if getattr(a, "ar", None):
        print("\n".join(_ar_lines(t, a.ar)))
    return 0
