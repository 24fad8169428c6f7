"""Distil a small SmolLM2-architecture draft from the target's own greedy outputs.

Two phases (both resumable, both seeded):

  python -m engine.train.draft.fit gen   ...   # phase 1: target greedy continuations + top-k log-probs
  python -m engine.train.draft.fit train ...   # phase 2: train the draft on them (no target forward)
  python -m engine.train.draft.fit eval  ...   # alpha / emitted-per-call on Spec-Bench dev prompts
  python -m engine.train.draft.fit bench ...   # draft/target forward times, full vs reduced head

The draft is a LlamaForCausalLM with the target's config but only a few layers, initialised from
chosen target layers; embedding and final norm are copied from the target, the embedding is frozen
and tied to the LM head. The head scores only a reduced vocabulary (the most frequent tokens of
the target's outputs), which removes most of the draft's cost; verification stays lossless since
the target checks every drafted token.

Every ``ckpt_every_s`` seconds training writes, atomically, a resumable checkpoint to ``run_dir``
and the deployable files to ``export_dir`` (``models/smollm2-draft`` by default): the draft's
non-embedding weights in bf16, a standard full-vocabulary LlamaConfig, the vocabulary subset and
the training log. An early checkpoint is therefore always usable.

Where things live: the data and batches engine/train/draft/batches.py, the model and its files
engine/train/draft/model.py, alpha and forward times engine/train/draft/evaluate.py, phase 1
engine/train/draft/gen.py; this module is the training loop and the command line.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from engine.paths import REPO_ROOT
from engine.trace.parse import read_jsonl
from engine.train.draft.batches import (Batcher, choose_vocab_subset, collate, load_sequences,
                                        sharegpt_assistant_counts, train_shards)
from engine.train.draft.evaluate import bench, match_vectors, specbench_eval, summarize_matches
from engine.train.draft.gen import GenConfig, default_data_dir
from engine.train.loop import train_step
from engine.train.draft.model import (build_draft_from_target, draft_hidden, export, head_logits, load_checkpoint,
                                      save_checkpoint)


@dataclass(frozen=True)
class DraftConfig:
    data_dir: str = ""  # shards from phase 1; empty = $SPECLAB_CACHE/draft-data
    run_dir: str = ""  # resumable checkpoint + log; empty = $SPECLAB_CACHE/runs/smollm2-draft
    export_dir: str = ""  # deployable files; empty = models/smollm2-draft in the repo
    keep_layers: tuple = (0, 1, 2, 29)  # first layers carry token/position features, the last one maps to logits
    vocab_subset: int = 16384  # reduced head rows (0 = all 49152): covers ~96.6% of held-out target tokens, 1/3 of the head cost
    subset_prior_chars: int = 0  # ShareGPT text as a frequency prior for the subset: measured no coverage gain, off
    lr: float = 5e-4  # AdamW; the 15-min pruned-draft run used 5e-4 and was still improving
    min_lr_frac: float = 0.1  # cosine decays to 10% of lr
    warmup_steps: int = 30  # short: the layers start from trained weights
    weight_decay: float = 0.0  # tiny data/time budget: no regulariser needed
    grad_clip: float = 1.0  # guards the first steps after pruning (large initial loss)
    batch_tokens: int = 3072  # padded tokens per step (~1.2k scored positions): ~5 s/step on one shared core; more, smaller steps
    max_seq_tokens: int = 768  # longest prompt+continuation in a batch (prompts are <= 512 tokens)
    kl_weight: float = 1.0  # soft cross-entropy to the target's renormalised top-k distribution
    ce_weight: float = 0.5  # plus cross-entropy on the target's greedy token (what alpha measures)
    time_budget_s: float = 4500.0  # wall-clock budget; the LR schedule follows elapsed time, so it ends on time
    max_steps: int = 1_000_000  # step cap (the time budget normally ends the run first)
    ckpt_every_s: float = 240.0  # checkpoint + export every 4 minutes
    eval_every_s: float = 720.0  # held-out alpha is ~3 training steps of compute: every 12 min, plus at the end
    eval_max_seqs: int = 128  # held-out sequences for alpha at each checkpoint (all of them by default)
    refresh_every: int = 50  # re-scan data_dir for new shards every N steps (phase 1 may still be running)
    seed: int = 0  # model-independent randomness: batch order
    threads: int = 2  # the machine has 2 cores
    init_from: str = ""  # optional: start from an exported draft dir instead of pruned target layers


def _repo_root() -> Path:
    return REPO_ROOT


def resolve_dirs(cfg: DraftConfig) -> tuple[Path, Path, Path]:
    from engine.models.smollm import cache_root

    data = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
    run = Path(cfg.run_dir) if cfg.run_dir else cache_root() / "runs" / "smollm2-draft"
    exp = Path(cfg.export_dir) if cfg.export_dir else _repo_root() / "models" / "smollm2-draft"
    return data, run, exp


# ----------------------------------------------------------------------------------------------------
# Training


def lr_at(cfg: DraftConfig, step: int, progress: float) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p = min(max(progress, 0.0), 1.0)
    return cfg.lr * (cfg.min_lr_frac + (1 - cfg.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def loss_fn(draft, ids, flat, sidx, tlp, tgt_s, subset, cfg: DraftConfig):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = draft_hidden(draft, ids)
        h = h.reshape(-1, h.shape[-1])[flat]
        logits = head_logits(draft, h, subset)
    logq = logits.float().log_softmax(-1)
    valid = sidx >= 0
    tl = tlp.masked_fill(~valid, float("-inf"))
    p = tl.softmax(-1).nan_to_num(0.0)  # teacher top-k, renormalised over tokens inside the subset
    soft = -(p * logq.gather(1, sidx.clamp(min=0))).sum(-1)
    row_ok = valid.any(-1)
    kl = soft[row_ok].mean() if row_ok.any() else soft.sum() * 0
    ok = tgt_s >= 0
    ce = -logq.gather(1, tgt_s.clamp(min=0)[:, None])[:, 0][ok].mean() if ok.any() else kl * 0
    loss = cfg.kl_weight * kl + cfg.ce_weight * ce
    with torch.no_grad():
        pred = logits.argmax(-1)
        acc = ((pred == tgt_s) & ok).float().mean()
    return loss, float(kl.detach()), float(ce.detach()), float(acc)


def train(cfg: DraftConfig, resume: bool = False, overwrite: bool = False, target=None, tok=None,
          stop_after_steps: int | None = None) -> dict:
    """Run (or resume) phase 2. ``target``/``tok`` default to SmolLM2; tests pass a tiny random model.

    ``stop_after_steps`` simulates a kill (stops without the final evaluation/export).
    """
    from tqdm import tqdm

    from engine.models.smollm import load_smollm2

    torch.set_num_threads(cfg.threads)
    data_dir, run_dir, exp_dir = resolve_dirs(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt, log_path = run_dir / "checkpoint.safetensors", run_dir / "train_log.jsonl"
    if ckpt.exists() and not resume and not overwrite:
        raise SystemExit(f"{ckpt} exists: pass --resume to continue or --overwrite to start again")
    if overwrite and not resume:
        for p in (ckpt, log_path):
            p.unlink(missing_ok=True)

    if target is None:
        target, tok = load_smollm2(dtype=torch.float32)
    _tok = tok
    if cfg.init_from:
        from engine.models.smollm import load_smollm2_draft

        draft = load_smollm2_draft(dtype=torch.float32, target=target, draft_dir=cfg.init_from)
    else:
        draft = build_draft_from_target(target, cfg.keep_layers)
    vocab = draft.config.vocab_size
    del target
    draft.model.embed_tokens.weight.requires_grad_(False)
    draft.train()
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)

    held = load_sequences([data_dir / "heldout.safetensors"])[: cfg.eval_max_seqs]
    shards = train_shards(data_dir)
    if not shards:
        raise SystemExit(f"no training shards in {data_dir}: run `python -m engine.train.draft.fit gen` first")
    seqs = load_sequences(shards)

    state = {"step": 0, "tokens": 0, "positions": 0, "elapsed_s": 0.0, "epoch": 0, "batches_in_epoch": 0,
             "resumes": 0}
    subset = None
    if resume and ckpt.exists():
        subset, state = load_checkpoint(ckpt, draft, opt)
        state["resumes"] = state.get("resumes", 0) + 1
        print(f"resumed from {ckpt} at step {state['step']} ({state['elapsed_s']:.0f} s trained)", flush=True)
    elif cfg.vocab_subset and cfg.vocab_subset < vocab:
        from engine.models.sharegpt import first_user_turns, load_sharegpt, split_prompts

        held_prompts, _ = split_prompts(first_user_turns(load_sharegpt()), GenConfig().n_heldout, GenConfig().seed)
        extra = sharegpt_assistant_counts(_tok, vocab, set(held_prompts), cfg.subset_prior_chars) \
            if cfg.subset_prior_chars > 0 else None
        subset = choose_vocab_subset(seqs, cfg.vocab_subset, vocab, extra)
    vmap = torch.full((vocab,), -1, dtype=torch.long)
    if subset is not None:
        vmap[subset] = torch.arange(len(subset))
    else:
        vmap = torch.arange(vocab)
    cover = float(np.mean([(vmap[torch.from_numpy(s["gen"].astype(np.int64))] >= 0).float().mean().item() for s in held]))
    print(f"{len(seqs)} train sequences ({sum(len(s['gen']) for s in seqs)} target tokens) from {len(shards)} shards; "
          f"{len(held)} held-out; head {len(subset) if subset is not None else vocab} rows "
          f"(held-out greedy-token coverage {cover:.4f})", flush=True)

    batcher = Batcher(seqs, cfg.batch_tokens, cfg.max_seq_tokens, cfg.seed, epoch=state.get("epoch", 0))
    if state.get("batches_in_epoch", 0):  # exact continuation of the interrupted epoch (same data pool)
        batcher.epoch = state["epoch"] - 1
        batcher._new_epoch()
        for _ in range(state["batches_in_epoch"]):
            batcher.queue.pop()
        batcher.consumed = state["batches_in_epoch"]

    def evaluate() -> dict:
        draft.eval()
        m = summarize_matches(match_vectors(draft, held, subset))
        draft.train()
        return m

    def summary(ev: dict) -> dict:
        return {"config": asdict(cfg), "state": state, "heldout": ev, "train_sequences": len(seqs),
                "train_target_tokens": int(sum(len(s["gen"]) for s in seqs)), "train_shards": len(shards),
                "heldout_sequences": len(held), "heldout_subset_coverage": cover,
                "gen_config": asdict(GenConfig())}

    def checkpoint(ev: dict | None) -> None:
        save_checkpoint(ckpt, draft, opt, subset, state)
        if ev is None:  # no fresh evaluation: keep the last one in the summary
            export(draft, subset, exp_dir, log_path, summary(last_ev))
            return
        last_ev.clear()
        last_ev.update(ev)
        with open(log_path, "a") as f:
            f.write(json.dumps({"step": state["step"], "event": "eval", "elapsed_s": round(state["elapsed_s"], 1),
                                "tokens": state["tokens"], "train_positions": state["positions"], **ev}) + "\n")
        export(draft, subset, exp_dir, log_path, summary(ev))

    last_ev: dict = {}
    if log_path.is_file():  # on resume: the last evaluation so far
        for r in read_jsonl(log_path):  # the one JSONL reader: a line cut by a kill is dropped
            if r.get("event") == "eval":
                last_ev = {k: v for k, v in r.items() if k not in ("step", "event", "elapsed_s", "tokens", "train_positions")}
    if state["step"] == 0:
        ev = evaluate()
        print(f"step 0 held-out: {ev}", flush=True)
        checkpoint(ev)

    t_start = time.perf_counter() - state["elapsed_s"]
    last_ck = last_ev_t = time.perf_counter()
    budget = cfg.time_budget_s
    bar = tqdm(total=int(budget), initial=int(state["elapsed_s"]), unit="s", desc="train (time budget)",
               dynamic_ncols=True, mininterval=10, bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}s [{elapsed}<{remaining}]{postfix}")
    ema = None
    log_f = open(log_path, "a")
    while state["step"] < cfg.max_steps and state["elapsed_s"] < budget:
        if state["step"] % cfg.refresh_every == 0 and state["step"] > 0:
            tf = run_dir / "threads"  # lets a long run take over the cores when phase 1 stops
            if tf.is_file():
                try:
                    n = int(tf.read_text().strip())
                    if n > 0 and n != torch.get_num_threads():
                        torch.set_num_threads(n)
                        bar.write(f"step {state['step']}: now using {n} threads")
                except ValueError:
                    pass
            new = train_shards(data_dir)
            if len(new) > len(shards):
                seqs = seqs + load_sequences(new[len(shards):])
                shards = new
                batcher.set_pool(seqs)
        lr = lr_at(cfg, state["step"], max(state["elapsed_s"] / budget, state["step"] / cfg.max_steps))
        ids, flat, sidx, tlp, tgt_s, _ = collate(batcher.next(), vmap)
        state["epoch"], state["batches_in_epoch"] = batcher.epoch, batcher.consumed
        loss, kl, ce, acc = loss_fn(draft, ids, flat, sidx, tlp, tgt_s, subset, cfg)
        gn = float(train_step(opt, loss, params, lr, cfg.grad_clip))  # engine.train.loop: the shared step
        state["step"] += 1
        state["tokens"] += int(ids.numel())
        state["positions"] += int(len(flat))
        now = time.perf_counter()
        prev = state["elapsed_s"]
        state["elapsed_s"] = now - t_start
        bar.update(int(state["elapsed_s"]) - int(prev))
        lv = float(loss.detach())
        ema = lv if ema is None else 0.95 * ema + 0.05 * lv
        bar.set_postfix(step=state["step"], loss=f"{ema:.3f}", acc=f"{acc:.3f}", lr=f"{lr:.1e}", refresh=False)
        if state["step"] % 10 == 0:
            log_f.write(json.dumps({"step": state["step"], "loss": round(lv, 4), "kl": round(kl, 4),
                                    "ce": round(ce, 4), "train_acc": round(acc, 4), "lr": lr, "grad_norm": round(gn, 3),
                                    "tokens": state["tokens"], "positions": state["positions"],
                                    "elapsed_s": round(state["elapsed_s"], 1), "train_sequences": len(seqs)}) + "\n")
            log_f.flush()
        if now - last_ck >= cfg.ckpt_every_s:
            log_f.flush()
            ev = None
            if now - last_ev_t >= cfg.eval_every_s:
                ev = evaluate()
                last_ev_t = time.perf_counter()
                bar.write(f"step {state['step']}: held-out alpha {ev['alpha']:.4f}, "
                          f"emitted/call@4 {ev['emitted_per_call_g4']:.3f}")
            checkpoint(ev)
            last_ck = time.perf_counter()
            t_start += last_ck - now  # evaluation/checkpoint time is not training time
        if stop_after_steps is not None and state["step"] >= stop_after_steps:
            save_checkpoint(ckpt, draft, opt, subset, state)
            log_f.close()
            return {}
    bar.close()
    log_f.close()
    ev = evaluate()
    if subset is not None:  # same weights, head over all 49152 rows: what the reduced head costs in alpha
        draft.eval()
        ev["full_head"] = summarize_matches(match_vectors(draft, held, None))
        draft.train()
    print(f"final step {state['step']}: held-out {ev}", flush=True)
    checkpoint(ev)
    return ev


def main(argv=None) -> None:
    import argparse

    from engine.config import add_dataclass_args, dataclass_from_args
    from engine.train.draft import gen as gen_mod

    ap = argparse.ArgumentParser(prog="python -m engine.train.draft.fit", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen", help="phase 1: target greedy continuations + top-k log-probs (resumable)")
    add_dataclass_args(g, GenConfig)
    t = sub.add_parser("train", help="phase 2: distil the draft (resumable, time-budgeted)")
    add_dataclass_args(t, DraftConfig)
    t.add_argument("--resume", action="store_true", help="continue from run_dir/checkpoint.safetensors")
    t.add_argument("--overwrite", action="store_true", help="discard an existing checkpoint and start again")
    e = sub.add_parser("eval", help="alpha and emitted/call on a few Spec-Bench dev prompts per category")
    e.add_argument("--per-category", type=int, default=3)
    e.add_argument("--max-new-tokens", type=int, default=64)
    e.add_argument("--draft-dir", default="")
    e.add_argument("--out", default="")
    e.add_argument("--threads", type=int, default=2)
    b = sub.add_parser("bench", help="forward ms: target, draft full head, draft reduced head")
    b.add_argument("--ctx", type=int, default=256)
    b.add_argument("--reps", type=int, default=30)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--draft-dir", default="")
    a = ap.parse_args(argv)
    if a.cmd == "gen":
        gen_mod.run(dataclass_from_args(GenConfig, a))
    elif a.cmd == "train":
        train(dataclass_from_args(DraftConfig, a), resume=a.resume, overwrite=a.overwrite)
    elif a.cmd == "eval":
        print(json.dumps(specbench_eval(a.per_category, a.max_new_tokens, a.draft_dir, a.out, a.threads), indent=2))
    elif a.cmd == "bench":
        print(json.dumps(bench(a.ctx, a.reps, a.threads, a.draft_dir), indent=2))


if __name__ == "__main__":
    main()
