"""speclab command line: `python -m engine COMMAND ...` (argparse lives only here).

    decode    run speculative (or autoregressive) decoding over a prompts file, write a trace
    validate  print a trace's summary, or its first error
    export    convert a trace to Parquet (OUT.parquet), Perfetto step timings (OUT.perfetto.json) or a
              Spec-Bench answer file (OUT.specbench.jsonl)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _add_decode(sub) -> None:
    p = sub.add_parser("decode", help="decode prompts and write a per-step trace")
    p.add_argument("--target", required=True, help="bundled name (smollm2-135m), local dir, or cached hub id")
    p.add_argument("--draft", default=None,
                   help="draft model, or a model-free drafter (lookup:n=10,ngram=2 | suffix:n=16,depth=32,p=0.1), or "
                        "a draft model plus phrases (phrase:model=DRAFT,n=4,k=1,ngram=2); omit for autoregressive decoding")
    p.add_argument("--policy", default="fixed:4",
                   help="window policy, e.g. fixed:4, heuristic, confidence:0.4, pacer, oracle (greedy hindsight)")
    p.add_argument("--verifier", default="token",
                   help="token | block | rrs | kseq | rbv | kbv | spectr-gbv-published | onehot-tree (phrase k > 1)")
    p.add_argument("--k", type=int, default=1, help="i.i.d. drafts per step (multi-draft verifiers need K ≥ 1)")
    p.add_argument("--prompts", required=True, help="JSONL: Spec-Bench ('turns') or {'prompt': ...} lines")
    p.add_argument("--limit", type=int, default=None, help="first N prompts")
    p.add_argument("--per-category", type=int, default=None, help="first N prompts of each task")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="auto", help="fp32 | bf16 | fp16 | auto (bf16)")
    p.add_argument("--device", default="auto", help="cpu | cuda | auto")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--no-chat", action="store_true", help="do not apply the tokenizer's chat template")
    p.add_argument("--out", required=True, help="trace path (.jsonl)")


def cmd_decode(a) -> int:
    from engine.cli.checks import check_decode_args

    check_decode_args(a)  # every number in range before a model loads or a file is opened
    import torch

    from engine.decode import DecodeConfig
    from engine.drafters.modelfree import is_model_free, make_model_free
    from engine.drafters.phrase import is_phrase, load_phrase_drafter
    from engine.core.load import check_pair, eos_token_ids, load_model
    from engine.policies.base import parse_policy
    from engine.trace.prompts import encode, load_prompts
    from engine.run import Request, run_requests
    from engine.core.sampling import SamplingConfig
    from engine.verify import MULTI_DRAFT

    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = DecodeConfig(max_new_tokens=a.max_new_tokens, verifier=a.verifier,
                       sampling=SamplingConfig(a.temperature, a.top_k, a.top_p, a.seed))
    prompts = load_prompts(a.prompts, limit=a.limit, per_category=a.per_category)
    oracle = bool(a.draft) and a.policy == "oracle"
    if oracle and (cfg.verifier in MULTI_DRAFT or not cfg.sampling.greedy):
        raise ValueError("--policy oracle is the greedy hindsight window: use --temperature 0 and a K = 1 verifier")
    if oracle:
        from engine.policies.oracle import HindsightOracle

        policy = HindsightOracle([], [])  # names the rule in the header; each request gets its own
    else:
        policy = parse_policy(a.policy) if a.draft else None
    target = load_model(a.target, a.dtype, a.device, role="target")
    draft = None
    if is_model_free(a.draft):  # lookup / suffix: no weights, only the target's vocabulary
        if cfg.verifier in MULTI_DRAFT or a.k != 1:
            raise ValueError(f"--draft {a.draft} proposes one deterministic block: use a K = 1 verifier")
        if oracle:
            raise ValueError("--policy oracle replays a draft model; model-free drafts have none")
    elif is_phrase(a.draft):  # a draft model extended with phrases: (target LM, drafter)
        if oracle:
            raise ValueError("--policy oracle replays a plain draft model; the phrase drafter is not one")
        phrase = load_phrase_drafter(a.draft, target, a.dtype, a.device, bool(policy and policy.needs_hidden),
                                     cfg.verifier)
    elif a.draft:
        draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target,
                           want_hidden=bool(policy and policy.needs_hidden))
        check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    target_lm, draft_lm = target.lm, draft.lm if draft else None
    if is_model_free(a.draft):
        draft_lm = make_model_free(a.draft, target.lm.vocab_size)
    if is_phrase(a.draft):
        target_lm, draft_lm = phrase
    if draft is not None and cfg.verifier in MULTI_DRAFT:
        from engine.drafters.multi import MultiDraftConfig, MultiDrafter
        from engine.core.tree import TreeTarget

        target_lm, draft_lm = TreeTarget(target.lm), MultiDrafter(draft.lm, MultiDraftConfig(k=a.k))
    elif a.k != 1:
        raise ValueError(f"--k {a.k} needs a multi-draft verifier (rrs, kseq, rbv, kbv, spectr-gbv-published)")
    tok = target.tokenizer
    if tok is None:
        raise ValueError(f"target {a.target!r} has no tokenizer; cannot encode text prompts")
    requests = [Request(encode(tok, p.text, chat=not a.no_chat), p.text, p.category, p.question_id) for p in prompts]
    eos = eos_token_ids(target)
    policy_for = (lambda r: HindsightOracle.for_prompt(target_lm, draft_lm, r.prompt_ids, cfg.max_new_tokens, eos)
                  ) if oracle else None
    summary = run_requests(target_lm, draft_lm, policy, cfg, requests, a.out, eos_ids=eos,
                           decode_text=lambda ids: tok.decode(ids), policy_for=policy_for,
                           header_extra={"command": " ".join(["python -m engine", *sys.argv[1:]]),
                                         "prompts_file": str(a.prompts)})
    _print_summary(summary, a.out)
    return 0


def _print_summary(s: dict, path) -> None:
    print(f"{path}: {s['requests']} requests, {s['target_calls']} target calls, {s['new_tokens']} new tokens")
    rate = s["draft_acceptance_rate"]  # None: an imported run that never recorded its drafts
    print(f"  mean emitted per call (incl. bonus) {s['mean_emitted_per_call_incl_bonus']:.3f}   "
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
        s = t.summary
        h = t.header
        state = "complete" if t.complete else "INCOMPLETE (no footer)"
        print(f"OK {path}: {state}; policy {h['policy']['spec']}; target {h['target']['name']}; "
              f"draft {(h.get('draft') or {}).get('name')}")
        _print_summary(s, path)
        for w in t.warnings:
            print(f"  warning: {w}")
        if a.json:
            print(json.dumps(s, indent=1))
    return status


def cmd_export(a) -> int:
    """The output's suffix picks the format: .parquet (a trace again, loadable everywhere), .json
    (e.g. OUT.perfetto.json: step timings as Chrome/Perfetto trace events, engine.trace.perfetto) or
    .specbench.jsonl (a Spec-Bench answer file that speed.py reads, engine.interop.specbench)."""
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
    elif dst.suffix == ".json":
        from engine.trace.perfetto import to_perfetto

        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(json.dumps(to_perfetto(t)), encoding="utf-8")
    else:
        raise ValueError(f"{dst.name}: export writes Parquet (.parquet), Perfetto trace events (.json, e.g. "
                         f"OUT.perfetto.json) or a Spec-Bench answer file (OUT.specbench.jsonl); JSONL is the "
                         f"engine's native output")
    print(f"wrote {dst} ({len(t.steps)} steps)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    _add_decode(sub)
    v = sub.add_parser("validate", help="validate traces and print their summary")
    v.add_argument("traces", nargs="+")
    v.add_argument("--json", action="store_true", help="also print the summary as JSON")
    e = sub.add_parser("export", help="convert a trace to Parquet (.parquet), Perfetto step timings (.json) or Spec-Bench (.specbench.jsonl)")
    e.add_argument("src")
    e.add_argument("dst")
    for name, mod in EXTRA_COMMANDS.items():
        __import__(mod, fromlist=["add_parser"]).add_parser(sub)
    return ap


# Commands contributed by other modules: each provides add_parser(sub) that sets `func`.
EXTRA_COMMANDS: dict[str, str] = {
    "sweep": "engine.bench.sweep",
    "bench": "engine.bench.bench",
    "audit": "engine.bench.audit",
    "multibench": "engine.bench.multibench",
    "costs": "engine.cli.costs",
    "analysis": "engine.cli.analysis",
    "pacer": "engine.cli.pacer",
    "dpace": "engine.cli.dpace",
    "import": "engine.cli.interop",
    "models": "engine.cli.models",
}

COMMANDS = {"decode": cmd_decode, "validate": cmd_validate, "export": cmd_export}


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        fn = COMMANDS.get(a.cmd) or a.func
        return fn(a)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # disk full, permissions: one line naming the file, not a traceback
        print(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the trace so far is valid (no footer)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
