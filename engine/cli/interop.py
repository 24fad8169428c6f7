"""`python -m engine import specbench FILE [--questions Q.jsonl] --out T.jsonl [--baseline B.jsonl --tokenizer DIR]`

Writes the answer file as a trace (engine.interop.specbench) and, given the baseline's answer file,
prints Spec-Bench's speed.py table (engine.interop.speed) for the pair.
"""

from __future__ import annotations

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("import", help="import another tool's run as a trace (Spec-Bench answer files)")
    p.add_argument("format", choices=["specbench"], help="the source format")
    p.add_argument("file", help="Spec-Bench answer file (data/spec_bench/model_answer/<model-id>.jsonl)")
    p.add_argument("--questions", default=None, help="Spec-Bench question.jsonl: prompt texts for the trace")
    p.add_argument("--out", default=None, help="trace path (.jsonl)")
    p.add_argument("--baseline", default=None,
                   help="the baseline's answer file: print speed.py's per-task tok/s and speedup for the pair")
    p.add_argument("--tokenizer", default=None,
                   help="local tokenizer directory for speed.py's baseline recount (len(input_ids) − 1 per turn); "
                        "without it the baseline's own new_tokens are used, which speed.py does not do")
    p.set_defaults(func=cmd_import)


def cmd_import(a) -> int:
    from engine.interop import specbench, speed
    from engine.metrics import EMITTED_PER_CALL, LABELS

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
