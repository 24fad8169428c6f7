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
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from engine.paths import REPO_ROOT, SPEC_BENCH_DEV
from engine.train.draft.gen import GenConfig, default_data_dir, load_shard

EMBED_KEY = "model.embed_tokens.weight"


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
    from engine.core.smollm import cache_root

    data = Path(cfg.data_dir) if cfg.data_dir else default_data_dir()
    run = Path(cfg.run_dir) if cfg.run_dir else cache_root() / "runs" / "smollm2-draft"
    exp = Path(cfg.export_dir) if cfg.export_dir else _repo_root() / "models" / "smollm2-draft"
    return data, run, exp


# ----------------------------------------------------------------------------------------------------
# Data


def load_sequences(paths: list[Path]) -> list[dict]:
    """Flatten shards into per-sequence dicts of numpy arrays."""
    seqs = []
    for p in paths:
        d = load_shard(p)
        po, go = d["prompt_off"], d["gen_off"]
        for i in range(len(po) - 1):
            g0, g1 = int(go[i]), int(go[i + 1])
            if g1 - g0 < 2:
                continue
            seqs.append({
                "prompt": d["prompt_ids"][po[i]:po[i + 1]],
                "gen": d["gen_ids"][g0:g1],
                "tid": d["topk_ids"][g0:g1],
                "tlp": d["topk_logp"][g0:g1],
            })
    return seqs


def train_shards(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob("train-*.safetensors"))


def choose_vocab_subset(seqs: list[dict], n: int, vocab: int, extra_counts: np.ndarray | None = None,
                        always: tuple = (0, 1, 2)) -> torch.LongTensor:
    """The ``n`` tokens the target emits most often, plus special tokens; sorted ascending.

    Greedy tokens count 1; the target's other top-k entries count 1e-3 each (they break ties among
    rare tokens); ``extra_counts`` (token frequencies of ShareGPT assistant text, rescaled to the
    same total) adds a prior that covers tokens the still-small generated set has not shown yet.
    """
    cnt = np.zeros(vocab, dtype=np.float64)
    for s in seqs:
        np.add.at(cnt, s["gen"], 1.0)
        np.add.at(cnt, s["tid"][:, 1:].reshape(-1), 1e-3)
    if extra_counts is not None and extra_counts.sum() > 0:
        cnt += 0.25 * extra_counts * (cnt.sum() / extra_counts.sum())
    cnt[list(always)] = np.inf
    ids = np.argsort(-cnt, kind="stable")[:n]
    return torch.from_numpy(np.sort(ids)).long()


def sharegpt_assistant_counts(tok, vocab: int, exclude_prompts: set[str], max_chars: int = 8_000_000) -> np.ndarray:
    """Token counts over ShareGPT assistant turns (conversations whose first turn is held out are skipped)."""
    from engine.train.data import load_sharegpt

    cnt = np.zeros(vocab, dtype=np.float64)
    used = 0
    texts = []
    for c in load_sharegpt():
        turns = c.get("conversations") or []
        if turns and (turns[0].get("value") or "").strip() in exclude_prompts:
            continue
        for t in turns:
            if t.get("from") == "gpt" and t.get("value"):
                texts.append(t["value"])
                used += len(t["value"])
        if used >= max_chars:
            break
    for i in range(0, len(texts), 256):
        for ids in tok(texts[i:i + 256], add_special_tokens=False)["input_ids"]:
            np.add.at(cnt, np.asarray(ids, dtype=np.int64), 1.0)
    return cnt


class Batcher:
    """Length-bucketed batches of whole sequences under a padded-token budget, reshuffled per epoch."""

    def __init__(self, seqs: list[dict], batch_tokens: int, max_seq_tokens: int, seed: int, epoch: int = 0):
        self.batch_tokens, self.max_seq, self.seed, self.epoch = batch_tokens, max_seq_tokens, seed, epoch
        self.set_pool(seqs)

    def set_pool(self, seqs: list[dict]) -> None:
        self.seqs = [s for s in seqs if len(s["prompt"]) + len(s["gen"]) - 1 <= self.max_seq]
        self.queue: list[list[int]] = []
        self.consumed = 0

    @property
    def n_batches(self) -> int:
        return len(self.queue)

    def _new_epoch(self) -> None:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        order = rng.permutation(len(self.seqs))
        # bucket: sort chunks of 256 by length, cut into budgeted batches, then shuffle batches
        batches = []
        for c in range(0, len(order), 256):
            chunk = sorted(order[c:c + 256], key=lambda i: len(self.seqs[i]["prompt"]) + len(self.seqs[i]["gen"]))
            cur, cur_max = [], 0
            for i in chunk:
                L = len(self.seqs[i]["prompt"]) + len(self.seqs[i]["gen"]) - 1
                if cur and max(cur_max, L) * (len(cur) + 1) > self.batch_tokens:
                    batches.append(cur)
                    cur, cur_max = [], 0
                cur.append(int(i))
                cur_max = max(cur_max, L)
            if cur:
                batches.append(cur)
        rng.shuffle(batches)
        self.queue = batches
        self.consumed = 0

    def next(self) -> list[dict]:
        if not self.queue:
            self._new_epoch()
        self.consumed += 1
        return [self.seqs[i] for i in self.queue.pop()]


def collate(batch: list[dict], vmap: torch.LongTensor, pad_id: int = 2):
    """Right-padded inputs (causal attention needs no mask) and flat loss targets.

    Returns input_ids [B, T], flat positions into [B*T], teacher subset ids/logp [M, k] and the
    greedy token's subset index [M] (-1 when outside the subset).
    """
    B = len(batch)
    T = max(len(s["prompt"]) + len(s["gen"]) - 1 for s in batch)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    flat, tid, tlp, tgt = [], [], [], []
    for b, s in enumerate(batch):
        x = np.concatenate([s["prompt"], s["gen"][:-1]]).astype(np.int64)
        ids[b, :len(x)] = torch.from_numpy(x)
        P, G = len(s["prompt"]), len(s["gen"])
        flat.append(torch.arange(P - 1, P - 1 + G) + b * T)
        tid.append(torch.from_numpy(s["tid"].astype(np.int64)))
        tlp.append(torch.from_numpy(s["tlp"].astype(np.float32)))
        tgt.append(torch.from_numpy(s["gen"].astype(np.int64)))
    tid = torch.cat(tid)
    return ids, torch.cat(flat), vmap[tid], torch.cat(tlp), vmap[torch.cat(tgt)], torch.cat(tgt)


# ----------------------------------------------------------------------------------------------------
# Model


def build_draft_from_target(target, keep_layers: tuple):
    """Pruned copy of the target: chosen layers, embedding and final norm copied; tied head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    d = target.config.to_dict()
    d["num_hidden_layers"] = len(keep_layers)
    d.pop("layer_types", None)
    d["tie_word_embeddings"] = True
    d.pop("_name_or_path", None)
    d.pop("_model_name_or_path", None)
    cfg = LlamaConfig(**{k: v for k, v in d.items() if k not in ("architectures", "transformers_version")})
    cfg.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    draft = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight.float())
        draft.model.norm.load_state_dict({k: v.float() for k, v in target.model.norm.state_dict().items()})
        for i, j in enumerate(keep_layers):
            draft.model.layers[i].load_state_dict({k: v.float() for k, v in target.model.layers[j].state_dict().items()})
    draft.tie_weights()
    return draft


def head_logits(draft, hidden: torch.Tensor, subset: torch.LongTensor | None) -> torch.Tensor:
    """Logits over the subset rows of the tied embedding (or all rows)."""
    W = draft.model.embed_tokens.weight
    if subset is not None:
        W = W[subset]
    return hidden @ W.to(hidden.dtype).t()


def draft_hidden(draft, ids: torch.Tensor) -> torch.Tensor:
    return draft.model(input_ids=ids, use_cache=False).last_hidden_state


def trainable_state(draft) -> dict[str, torch.Tensor]:
    return {k: v for k, v in draft.state_dict().items() if k not in (EMBED_KEY, "lm_head.weight")}


# ----------------------------------------------------------------------------------------------------
# Metrics


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
        vmap = torch.zeros(1, dtype=torch.long)  # unused
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
        del vmap
        i += len(b)
    for k in range(len(seqs)):
        out.append(res[k])
    return out


# ----------------------------------------------------------------------------------------------------
# Checkpoints


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path, metadata: dict | None = None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp),
              metadata={k: (v if isinstance(v, str) else json.dumps(v)) for k, v in (metadata or {}).items()})
    os.replace(tmp, path)


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_checkpoint(path: Path, draft, opt, subset, state: dict) -> None:
    t = {f"model.{k}": v for k, v in trainable_state(draft).items()}
    names = [n for n, p in draft.named_parameters() if p.requires_grad]
    params = dict(draft.named_parameters())
    for n in names:
        st = opt.state.get(params[n], {})
        for k in ("exp_avg", "exp_avg_sq"):
            if k in st:
                t[f"opt.{n}.{k}"] = st[k]
        if "step" in st:
            t[f"opt.{n}.step"] = torch.as_tensor(st["step"], dtype=torch.float32).reshape(1)
    t["vocab_subset"] = subset if subset is not None else torch.zeros(0, dtype=torch.long)
    t["rng.torch"] = torch.get_rng_state()
    _atomic_save(t, path, {"state": state})


def load_checkpoint(path: Path, draft, opt) -> tuple[torch.LongTensor | None, dict]:
    from safetensors import safe_open

    t = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        state = json.loads(f.metadata()["state"])
    msd = {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}
    missing, unexpected = draft.load_state_dict(msd, strict=False)
    assert not unexpected and set(missing) <= {EMBED_KEY, "lm_head.weight"}, (missing, unexpected)
    params = dict(draft.named_parameters())
    for n, p in params.items():
        if not p.requires_grad or f"opt.{n}.exp_avg" not in t:
            continue
        opt.state[p] = {"exp_avg": t[f"opt.{n}.exp_avg"].clone(), "exp_avg_sq": t[f"opt.{n}.exp_avg_sq"].clone(),
                        "step": t[f"opt.{n}.step"].reshape(()).clone()}
    torch.set_rng_state(t["rng.torch"])
    sub = t["vocab_subset"]
    return (sub if sub.numel() else None), state


def export(draft, subset, exp_dir: Path, log_path: Path | None, summary: dict) -> None:
    """Write the deployable draft: non-embedding weights (bf16, shards under 20 MB), full-vocab config,
    vocab subset."""
    from engine.core.smollm import save_draft_state

    exp_dir.mkdir(parents=True, exist_ok=True)
    if subset is not None:
        _atomic_save({"ids": subset.long()}, exp_dir / "vocab_subset.safetensors")
    save_draft_state({k: v.to(torch.bfloat16) for k, v in trainable_state(draft).items()}, exp_dir,
                     {"format": "pt", "note": "embedding omitted: it is the target's (frozen, tied); see engine/core/smollm.py"})
    cj = draft.config.to_dict()
    cj["dtype"] = "bfloat16"
    cj.pop("_name_or_path", None)
    _atomic_write_text(exp_dir / "config.json", json.dumps(cj, indent=2, sort_keys=True) + "\n")
    if log_path is not None and log_path.is_file():
        tmp = exp_dir / "train_log.jsonl.tmp"
        shutil.copyfile(log_path, tmp)
        os.replace(tmp, exp_dir / "train_log.jsonl")
    _atomic_write_text(exp_dir / "training_summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")


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

    from engine.core.smollm import load_smollm2

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
        from engine.core.smollm import load_smollm2_draft

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
        from engine.train.data import first_user_turns, load_sharegpt, split_prompts

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
        for line in log_path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
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
        for g in opt.param_groups:
            g["lr"] = lr
        ids, flat, sidx, tlp, tgt_s, _ = collate(batcher.next(), vmap)
        state["epoch"], state["batches_in_epoch"] = batcher.epoch, batcher.consumed
        loss, kl, ce, acc = loss_fn(draft, ids, flat, sidx, tlp, tgt_s, subset, cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip))
        opt.step()
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


# ----------------------------------------------------------------------------------------------------
# Evaluation on Spec-Bench dev prompts (evaluation only; never used for training)


def specbench_eval(per_category: int = 3, max_new_tokens: int = 64, draft_dir: str = "", out: str = "",
                   threads: int = 2) -> dict:
    from engine.core.smollm import load_smollm2, load_smollm2_draft, draft_vocab_subset
    from engine.train.data import chat_prompt_ids
    from engine.train.draft.gen import greedy_batch

    torch.set_num_threads(threads)
    qpath = SPEC_BENCH_DEV
    rows = [json.loads(line) for line in qpath.read_text().splitlines() if line.strip()]
    picked, seen = [], {}
    for r in rows:
        c = r["category"]
        if seen.get(c, 0) < per_category:
            seen[c] = seen.get(c, 0) + 1
            picked.append(r)
    from engine.core.smollm import cache_root
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

    from engine.core.smollm import draft_vocab_subset, load_smollm2, load_smollm2_draft

    torch.set_num_threads(threads)
    target, _ = load_smollm2(dtype=torch.bfloat16)
    draft = load_smollm2_draft(dtype=torch.bfloat16, target=target, draft_dir=draft_dir or None)
    subset = draft_vocab_subset(draft_dir or None)
    ids = torch.randint(100, 40000, (1, ctx))

    def time_model(fwd):
        cache = DynamicCache()
        fwd(ids, cache)
        x = ids[:, -1:]
        ts = []
        for i in range(reps + 3):
            t = time.perf_counter()
            fwd(x, cache)
            ts.append(time.perf_counter() - t)
            cache.crop(-1)
        return float(np.median(ts[3:]) * 1000)

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


def main(argv=None) -> None:
    import argparse

    from engine.train.draft import gen as gen_mod
    from engine.cli.dataclass_args import add_dataclass_args, dataclass_from_args

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
