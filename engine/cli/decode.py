"""`python -m engine decode`: decode prompts (speculatively, or autoregressively without --draft) and
write a per-step trace (engine.run.run_requests → engine.trace.format.TraceWriter).

Worked example (one bundled trace, `make traces`):
    python -m engine decode --target smollm2-135m --draft smollm2-draft --policy fixed:4 --per-task 1 \\
        --max-new-tokens 48 --threads 1 --out traces/smollm2-fixed-4.jsonl
"""

from __future__ import annotations

from engine.cli import common


def add_parser(sub) -> None:
    p = sub.add_parser("decode", help="decode prompts and write a per-step trace")
    common.add_target(p, default=None)
    common.add_draft(p, default=None,
                     help="draft model, or a model-free drafter (lookup:n=10,ngram=2 | suffix:n=16,depth=32,p=0.1), or "
                          "a draft model plus phrases (phrase:model=DRAFT,n=4,k=1,ngram=2), or a saved block drafter "
                          "(block:PATH, e.g. block:models/block-drafter-smollm2); omit for autoregressive decoding")
    p.add_argument("--policy", default="fixed:4",
                   help="window policy, e.g. fixed:4, heuristic, confidence:0.4, pacer, oracle (greedy hindsight)")
    p.add_argument("--verifier", default="token",
                   help="engine.verify.VERIFIERS name: token | block | rrs | kseq | rbv | kbv | spectr-gbv-published | "
                        "onehot-tree (phrase k > 1)")
    p.add_argument("--k", type=int, default=1, help="i.i.d. drafts per step (multi-draft verifiers need K ≥ 1)")
    p.add_argument("--draft-context", default=None, metavar="W[,sink=S]",
                   help="the draft model reads only the prompt's first S (default 64) and last W tokens: a long "
                        "prompt's draft prefill costs S + W tokens; still exact, acceptance may fall")
    common.add_prompts(p)
    common.add_max_new_tokens(p, 128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    common.add_seed(p)
    common.add_device(p)
    common.add_weights(p)
    p.add_argument("--no-chat", action="store_true", help="do not apply the tokenizer's chat template")
    common.add_out(p, "trace path (.jsonl)", required=True)
    p.set_defaults(func=cmd_decode)


def cmd_decode(a) -> int:
    from engine.cli.checks import check_decode_args
    from engine.cli.trace import print_summary

    spec = check_decode_args(a)  # every refusal (engine.spec.RunSpec.check) before a model loads or a file opens
    from engine.models.load import eos_token_ids, load_model
    from engine.trace.prompts import encode, load_prompts
    from engine.run import Request, run_requests

    from engine.models.pair_weights import announce

    for w in dict.fromkeys((spec.weights, spec.draft_weights or spec.weights)):
        announce(w, a.dtype, a.device)  # a fallback kernel said in one line, before a model loads
    common.set_threads(a.threads)
    prompts = load_prompts(a.prompts, limit=a.limit, per_category=a.per_task)
    target = load_model(a.target, a.dtype, a.device, role="target", weights=spec.weights)
    run = spec.build(target)
    tok = target.tokenizer
    if tok is None:
        raise ValueError(f"target {a.target!r} has no tokenizer; cannot encode text prompts")
    requests = [Request(encode(tok, p.text, chat=not a.no_chat), p.text, p.category, p.question_id) for p in prompts]
    summary = run_requests(run.target, run.draft, run.policy, run.cfg, requests, a.out, eos_ids=eos_token_ids(target),
                           decode_text=lambda ids: tok.decode(ids),
                           header_extra={"command": common.command_line(), "prompts_file": str(a.prompts)})
    print_summary(summary, a.out)
    return 0
