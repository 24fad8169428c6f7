"""How good and how fast a draft is: the per-position match rate alpha and the emitted-per-call it
implies (teacher-forced on the target's greedy continuation), on the held-out phase-1 sequences or
on Spec-Bench dev prompts (evaluation only, never trained on), and the forward times of the target,
the draft with its full head and the draft with its reduced head.

  python -m engine.train.draft.fit eval  ...   # alpha / emitted-per-call on Spec-Bench dev prompts
  python -m engine.train.draft.fit bench ...   # draft/target forward times, full vs reduced head
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from engine.measure import median_ms
from engine.paths import SPEC_BENCH_DEV
from engine.train.draft.gen import load_shard
from engine.train.draft.model import draft_hidden, head_logits


def accept_lengths(match: np.ndarray, gamma: int) -> list[int]:
    """Consecutive-match simulation: from position j the draft's run of matches is A(j); a target
    call with window gamma emits min(A(j), gamma) + 1 tokens (the +1 is the target's own token)."""
    n = len(match)
    run = np.zeros(n + 1, dtype=np.int64)
    for j in range(n - 1, -1, -1):
        run[j] = run[j + 1] + 1 if match[j] else 0
    out, j = [], 0
    while j < n:
        e = int(min(run[j], gamma)) + 1
        out.append(e)
        j += e
    return out


def summarize_matches(matches: list[np.ndarray], gammas=(1, 2, 4, 8)) -> dict:
    allm = np.concatenate(matches) if matches else np.zeros(0, bool)
    res = {"alpha": float(allm.mean()) if len(allm) else float("nan"), "positions": int(len(allm))}
    for g in gammas:
        steps = [e for m in matches for e in accept_lengths(m, g)]
        res[f"emitted_per_call_g{g}"] = float(np.mean(steps)) if steps else float("nan")
    return res


@torch.inference_mode()
def match_vectors(draft, seqs: list[dict], subset: torch.LongTensor | None, batch_tokens: int = 4096) -> list[np.ndarray]:
    """Per sequence: does the draft's greedy token equal the target's, teacher-forced on the
    target's greedy continuation (exactly the per-position event that alpha counts)."""
    out = []
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]["prompt"]) + len(seqs[i]["gen"]))
    res: dict[int, np.ndarray] = {}
    i = 0
    while i < len(order):
        L = len(seqs[order[i]]["prompt"]) + len(seqs[order[i]]["gen"])
        n = max(1, batch_tokens // max(L, 1))
        b = order[i:i + n]
        # lengths grow within the sorted order; recompute the padded size with the last one
        while len(b) > 1 and len(b) * (len(seqs[b[-1]]["prompt"]) + len(seqs[b[-1]]["gen"])) > batch_tokens:
            b = b[:-1]
        batch = [seqs[k] for k in b]
        T = max(len(s["prompt"]) + len(s["gen"]) - 1 for s in batch)
        ids = torch.full((len(batch), T), 2, dtype=torch.long)
        for r, s in enumerate(batch):
            x = np.concatenate([s["prompt"], s["gen"][:-1]]).astype(np.int64)
            ids[r, :len(x)] = torch.from_numpy(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = draft_hidden(draft, ids)
        for r, s in enumerate(batch):
            P, G = len(s["prompt"]), len(s["gen"])
            hh = h[r, P - 1:P - 1 + G]
            lg = head_logits(draft, hh, subset).float()
            pred = lg.argmax(-1)
            if subset is not None:
                pred = subset[pred]
            res[b[r]] = (pred.numpy() == s["gen"].astype(np.int64))
        i += len(b)
    for k in range(len(seqs)):
        out.append(res[k])
    return out


# ----------------------------------------------------------------------------------------------------
# Evaluation on Spec-Bench dev prompts (evaluation only; never used for training)


def specbench_eval(per_category: int = 3, max_new_tokens: int = 64, draft_dir: str = "", out: str = "",
                   threads: int = 2) -> dict:
    from engine.models.smollm import draft_vocab_subset, load_smollm2, load_smollm2_draft
    from engine.models.sharegpt import chat_prompt_ids
    from engine.train.draft.gen import greedy_batch

    torch.set_num_threads(threads)
    qpath = SPEC_BENCH_DEV
    from engine.trace.parse import read_jsonl

    rows = read_jsonl(qpath)  # the one JSONL reader
    picked, seen = [], {}
    for r in rows:
        c = r["category"]
        if seen.get(c, 0) < per_category:
            seen[c] = seen.get(c, 0) + 1
            picked.append(r)
    from engine.models.smollm import cache_root
    from engine.train.draft.gen import save_shard_atomic

    target, tok = load_smollm2(dtype=torch.bfloat16)
    ddir = draft_dir or None
    draft = load_smollm2_draft(dtype=torch.float32, target=target, draft_dir=ddir)
    subset = draft_vocab_subset(ddir)
    eos = {int(tok.eos_token_id)}
    # the target's continuations do not depend on the draft: cache them (evaluation data, never trained on)
    cpath = cache_root() / f"specbench-dev-greedy-{per_category}x{max_new_tokens}.safetensors"
    cats = [r["category"] for r in picked]
    if cpath.is_file():
        d = load_shard(cpath)
        po, go = d["prompt_off"], d["gen_off"]
        seqs = [{"prompt": d["prompt_ids"][po[i]:po[i + 1]], "gen": d["gen_ids"][go[i]:go[i + 1]]}
                for i in range(len(picked))]
    else:
        seqs = []
        with torch.inference_mode():
            for r in picked:  # batch 1: the same greedy path a real decode would follow
                p = chat_prompt_ids(tok, r["turns"][0])
                g, _, _ = greedy_batch(target, [p], max_new_tokens, 1, eos, 2)[0]
                seqs.append({"prompt": np.asarray(p, np.int32), "gen": g})
        off = lambda xs: np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)  # noqa: E731
        P, G = [s["prompt"] for s in seqs], [s["gen"] for s in seqs]
        save_shard_atomic(cpath, {"prompt_ids": np.concatenate(P), "prompt_off": off(P), "gen_ids": np.concatenate(G),
                                  "gen_off": off(G), "question_id": np.asarray([r["question_id"] for r in picked])})
    res = {}
    for name, sub in (("subset_head", subset), ("full_head", None)):
        mv = match_vectors(draft, seqs, sub)
        d = {"overall": summarize_matches(mv)}
        for c in dict.fromkeys(cats):
            d[c] = summarize_matches([m for m, cc in zip(mv, cats) if cc == c])
        sub_of = lambda c: c if c in ("translation", "summarization", "qa", "math_reasoning", "rag") else "mt_bench"  # noqa: E731
        d["by_subtask"] = {t: summarize_matches([m for m, cc in zip(mv, cats) if sub_of(cc) == t])
                           for t in dict.fromkeys(sub_of(c) for c in cats)}
        res[name] = d
        if subset is None:
            break
    res["prompts"] = [r["question_id"] for r in picked]
    res["max_new_tokens"] = max_new_tokens
    if out:
        Path(out).write_text(json.dumps(res, indent=2) + "\n")
    return res


@torch.inference_mode()
def bench(ctx: int = 256, reps: int = 30, threads: int = 2, draft_dir: str = "") -> dict:
    """Median ms of one cached forward of k=1 token: target, draft full head, draft reduced head."""
    from transformers import DynamicCache

    from engine.models.smollm import draft_vocab_subset, load_smollm2, load_smollm2_draft

    torch.set_num_threads(threads)
    target, _ = load_smollm2(dtype=torch.bfloat16)
    draft = load_smollm2_draft(dtype=torch.bfloat16, target=target, draft_dir=draft_dir or None)
    subset = draft_vocab_subset(draft_dir or None)
    ids = torch.randint(100, 40000, (1, ctx))

    def time_model(fwd):
        """Median ms of a 1-token forward after a `ctx`-token prefill (3 warm-up calls, then `reps`).
        Each call crops the cache back, so every one sees the same context; the crop (a slice of each
        layer's cache, microseconds) is inside the timed call, the forward is milliseconds."""
        cache = DynamicCache()
        fwd(ids, cache)
        x = ids[:, -1:]

        def one() -> None:
            fwd(x, cache)
            cache.crop(-1)

        return median_ms(one, repeats=reps, warmup=3, device=target)

    def full(m):
        return lambda x, c: m(input_ids=x, past_key_values=c, use_cache=True, logits_to_keep=1).logits.argmax(-1)

    W_sub = draft.model.embed_tokens.weight[subset].contiguous() if subset is not None else None  # gathered once

    def reduced(x, c):
        h = draft.model(input_ids=x, past_key_values=c, use_cache=True).last_hidden_state[:, -1]
        return subset[(h @ W_sub.t()).argmax(-1)]

    def body(x, c):
        return draft.model(input_ids=x, past_key_values=c, use_cache=True).last_hidden_state[:, -1]

    res = {"ctx": ctx, "target_ms": time_model(full(target)), "draft_full_head_ms": time_model(full(draft))}
    res["draft_no_head_ms"] = time_model(body)
    if subset is not None:
        res["draft_subset_head_ms"] = time_model(reduced)
        res["subset_rows"] = int(len(subset))
    return res
