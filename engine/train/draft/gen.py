"""Phase 1 of draft training: the target's own greedy continuations (self-distillation data).

Batched greedy decoding of SmolLM2 (bf16 where native, else fp32; left padding, KV cache) on ShareGPT first-user-turn
prompts. For every generated position we store the token the target chose and its top-k
log-probabilities (normalised over the full vocabulary), so draft training needs no target
forward at all.

Shard format (safetensors, one file per ``shard_size`` prompts, written atomically):
  ``prompt_ids`` int32 [sum P_i], ``prompt_off`` int64 [n+1]      prompts, concatenated
  ``gen_ids`` int32 [sum G_i], ``gen_off`` int64 [n+1]            greedy tokens (EOS included)
  ``topk_ids`` int32 [sum G_i, k], ``topk_logp`` float16 [sum G_i, k]
  ``prompt_index`` int64 [n]                                      index into the prompt list
Shard ``heldout.safetensors`` holds the held-out prompts; ``train-00000.safetensors`` ... the rest.
Existing shards are skipped, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file as np_load_file
from safetensors.numpy import save_file as np_save_file

from engine.trace.jsonio import atomic_path


@dataclass(frozen=True)
class GenConfig:
    out_dir: str = ""  # where shards go; empty = $SPECLAB_CACHE/draft-data
    seed: int = 0  # fixes the prompt shuffle, hence the held-out/train split
    n_heldout: int = 128  # held-out prompts: ~16k positions, enough for a stable alpha estimate
    batch_size: int = 48  # measured 2 threads bf16: 204 tok/s at 16, 253 at 32, 295 at 64; 48 keeps memory low
    shard_size: int = 96  # two batches per shard: a kill loses at most ~1 min of work
    max_new_tokens: int = 128  # alpha is judged on 64-128-token continuations; longer costs attention time
    max_prompt_tokens: int = 320  # ~80% of ShareGPT first turns; long prompts made prefill ~1/3 of the time
    top_k: int = 20  # the target's top-20 holds nearly all of its probability mass on greedy text
    max_shards: int = 10_000  # stop after this many train shards (or when prompts run out)
    threads: int = 2  # the machine has 2 cores


def default_data_dir() -> Path:
    from engine.models.smollm import cache_root

    return cache_root() / "draft-data"


def save_shard_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with atomic_path(path) as tmp:
        np_save_file(arrays, str(tmp))


def load_shard(path: str | Path) -> dict[str, np.ndarray]:
    return np_load_file(str(path))


@torch.inference_mode()
def greedy_batch(model, prompts: list[list[int]], max_new: int, top_k: int, eos_ids: set[int], pad_id: int):
    """Greedy-decode a batch of prompts; returns per-sequence (gen ids, topk ids, topk logp).

    Rows that reach EOS are dropped from the batch (and from the KV cache) so finished
    sequences cost nothing.
    """
    from transformers import DynamicCache

    B = len(prompts)
    L = max(len(p) for p in prompts)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, L - len(p):] = torch.tensor(p)
        mask[i, L - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True,
                logits_to_keep=1)
    eos = torch.tensor(sorted(eos_ids))
    alive = torch.arange(B)
    rec: list[list[tuple]] = [[] for _ in range(B)]
    for step in range(max_new):
        logp = out.logits[:, -1].float().log_softmax(-1)
        top = logp.topk(top_k, dim=-1)
        nxt = top.indices[:, 0]
        ti, tv = top.indices.to(torch.int32).numpy(), top.values.to(torch.float16).numpy()
        nx = nxt.tolist()
        for r, row in enumerate(alive.tolist()):
            rec[row].append((nx[r], ti[r], tv[r]))
        fin = torch.isin(nxt, eos)
        if step == max_new - 1 or bool(fin.all()):
            break
        if bool(fin.any()):
            keep = (~fin).nonzero()[:, 0]
            cache.batch_select_indices(keep)
            alive, mask, pos, nxt = alive[keep], mask[keep], pos[keep], nxt[keep]
        mask = torch.cat([mask, torch.ones((len(alive), 1), dtype=torch.long)], dim=1)
        pos = pos[:, -1:] + 1
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, past_key_values=cache,
                    use_cache=True)
    res = []
    for r in rec:
        res.append((np.asarray([x[0] for x in r], dtype=np.int32), np.stack([x[1] for x in r]),
                    np.stack([x[2] for x in r])))
    return res


def gen_shard(model, tok_prompts: list[list[int]], index: list[int], cfg: GenConfig, eos_ids, pad_id):
    order = sorted(range(len(tok_prompts)), key=lambda i: len(tok_prompts[i]))  # length buckets: less padding
    seqs: dict[int, tuple] = {}
    for s in range(0, len(order), cfg.batch_size):
        b = order[s:s + cfg.batch_size]
        for i, r in zip(b, greedy_batch(model, [tok_prompts[i] for i in b], cfg.max_new_tokens, cfg.top_k,
                                        eos_ids, pad_id)):
            seqs[i] = r
    P = [np.asarray(tok_prompts[i], dtype=np.int32) for i in range(len(tok_prompts))]
    G = [seqs[i] for i in range(len(tok_prompts))]
    off = lambda xs: np.concatenate([[0], np.cumsum([len(x) for x in xs])]).astype(np.int64)  # noqa: E731
    return {
        "prompt_ids": np.concatenate(P), "prompt_off": off(P),
        "gen_ids": np.concatenate([g[0] for g in G]), "gen_off": off([g[0] for g in G]),
        "topk_ids": np.concatenate([g[1] for g in G]), "topk_logp": np.concatenate([g[2] for g in G]),
        "prompt_index": np.asarray(index, dtype=np.int64),
    }


def answer_eos_ids(tok) -> set[int]:
    """The ids that end a SmolLM2 chat answer (EOS, <|im_end|>, <|endoftext|>)."""
    ids = {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}
    return {int(e) for e in ids if e is not None and e >= 0}


def run(cfg: GenConfig) -> None:
    from tqdm import tqdm

    from engine.models.smollm import load_smollm2
    from engine.models.sharegpt import chat_prompt_ids, first_user_turns, load_sharegpt, split_prompts

    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out_dir) if cfg.out_dir else default_data_dir()
    out.mkdir(parents=True, exist_ok=True)
    from engine.models.load import resolve_dtype

    model, tok = load_smollm2(dtype=resolve_dtype("auto"), verbose=True)  # bf16 only where it is native
    eos_ids = answer_eos_ids(tok)
    pad_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    held, train = split_prompts(first_user_turns(load_sharegpt()), cfg.n_heldout, cfg.seed)

    def encode(texts, base):
        ps, ix = [], []
        for j, t in enumerate(texts):
            p = chat_prompt_ids(tok, t)
            if len(p) <= cfg.max_prompt_tokens:
                ps.append(p)
                ix.append(base + j)
        return ps, ix

    jobs = [("heldout.safetensors", held, 0)]
    n_train_shards = min(cfg.max_shards, (len(train) + cfg.shard_size - 1) // cfg.shard_size)
    for s in range(n_train_shards):
        jobs.append((f"train-{s:05d}.safetensors", train[s * cfg.shard_size:(s + 1) * cfg.shard_size],
                     cfg.n_heldout + s * cfg.shard_size))
    todo = [j for j in jobs if not (out / j[0]).exists()]
    print(f"{len(jobs) - len(todo)} shards present, {len(todo)} to generate in {out}", flush=True)
    bar = tqdm(todo, desc="gen shards", unit="shard", dynamic_ncols=True, mininterval=5)
    t0, ntok = time.perf_counter(), 0
    for name, texts, base in bar:
        ps, ix = encode(texts, base)
        arr = gen_shard(model, ps, ix, cfg, eos_ids, pad_id)
        save_shard_atomic(out / name, arr)
        ntok += len(arr["gen_ids"])
        bar.set_postfix(tok=ntok, tok_s=f"{ntok / (time.perf_counter() - t0):.0f}")
    bar.close()


if __name__ == "__main__":
    import argparse

    from engine.config import add_dataclass_args, dataclass_from_args

    ap = argparse.ArgumentParser(description="Generate the target's greedy continuations for draft distillation.")
    add_dataclass_args(ap, GenConfig)
    run(dataclass_from_args(GenConfig, ap.parse_args()))
