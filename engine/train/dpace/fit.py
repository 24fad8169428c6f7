"""Block-drafter training objectives (uniform CE, DFlash decay, D-PACE and its ablations) and runs.

Position weights (k = 1 … B−1 is the block position, position 0 the anchor; ce = −log q):

  uniform      w_k = 1                                              weighted mean
  dflash       w_k = exp(−(k−1)/γ), γ = 7 / 5 / 4 for B = 16 / 10 / 8   weighted mean    (DFlash Eq. 4)
  dpace        w̄_j = Σ_{m≥j} Π_{i≤m} q̃_i,  q̃ = (1−α) q + α,  detached   Σ ce·w̄ / batch (official)
  dpace-mean   the same weights, weighted mean Σ ce·w̄ / Σ w̄ (normalisation control)
  dpace-cum    cumulative-confidence only  w = Π_{i≤j} q̃_i               Σ / batch
  dpace-cont   continuation value only     w = w̄_j / Π_{i≤j} q̃_i        Σ / batch

Invalid positions (the anchor slot, past the sequence end, outside the response) get q̃ = 1 inside
the product and weight 0, as in the official code (Lucas-TY/D-PACE, SpecForge `_dpace_weight`).
Reductions: "mean" = Σ ce·w / Σ w; "sum" = Σ ce·w / batch_size (number of sequences).

Special cases (tests/test_dpace.py): α = 1 makes q̃ ≡ 1, so full D-PACE weights become the fixed
linear schedule w̄_j = (#valid positions ≥ j) = B − j for a full block, and the official loss is
Σ_j (B − j)·ce_j / batch — a linearly decaying, *summed* CE, not a uniform one; the cumulative-only
variant at α = 1 is the uniform (summed) CE. α = 0 is gradient ascent on the surrogate S̃.

`python -m engine dpace ...` (see docs/dpace.md): prepare | train | sweep | online | report.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.train.dpace.training_trace import OBJECTIVES, TrainingTraceWriter

DFLASH_GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}


def dflash_gamma(block_size: int) -> float:
    """DFlash's recommended decay constant for a block size (7/5/4 for 16/10/8; else interpolate B/2.2)."""
    return DFLASH_GAMMA.get(block_size, round(block_size / 2.2, 2))


# ------------------------------------------------------------------ weights


def dflash_weights(block_size: int, gamma: float) -> torch.Tensor:
    """[B] with w_0 = 0 (anchor) and w_k = exp(−(k−1)/γ) for k ≥ 1."""
    k = torch.arange(block_size, dtype=torch.float32)
    w = torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def dpace_weights(ce: torch.Tensor, valid: torch.Tensor, alpha: float, variant: str = "full") -> torch.Tensor:
    """Detached D-PACE weights from per-position CE [..., B] and a validity mask [..., B].

    variant: "full" (w̄ = suffix sum of prefix products), "cumulative" (prefix product),
    "continuation" (w̄ / prefix product). Invalid positions get weight 0.
    """
    with torch.no_grad():
        v = valid.to(ce.dtype)
        q = torch.exp(-ce.detach())
        s = torch.where(valid, (1.0 - alpha) * q + alpha, torch.ones_like(q))
        prefix = torch.cumprod(s, dim=-1)
        suffix = torch.flip(torch.cumsum(torch.flip(prefix * v, [-1]), -1), [-1])
        if variant == "full":
            w = suffix
        elif variant == "cumulative":
            w = prefix
        elif variant == "continuation":
            w = suffix / prefix.clamp_min(1e-30)
        else:
            raise ValueError(f"unknown D-PACE variant {variant!r}")
        return (w * v).detach()


def surrogate(q: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """S = Σ_k Π_{i≤k} q_i per block (invalid positions: factor 1, not summed). q, valid [..., B]."""
    v = valid.to(q.dtype)
    p = torch.cumprod(torch.where(valid, q, torch.ones_like(q)), -1)
    return (p * v).sum(-1)


@dataclass(frozen=True)
class Objective:
    name: str  # one of OBJECTIVES
    alpha: float | None = None  # D-PACE smoothing
    gamma: float | None = None  # DFlash decay

    @property
    def reduction(self) -> str:
        return "mean" if self.name in ("uniform", "dflash", "dpace-mean") else "sum"

    @property
    def label(self) -> str:
        if self.name == "dflash":
            return f"dflash(γ={self.gamma:g})"
        if self.name.startswith("dpace"):
            return f"{self.name}(α={self.alpha:g})"
        return self.name

    def weights(self, ce: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if self.name == "uniform":
            return valid.to(ce.dtype)
        if self.name == "dflash":
            return dflash_weights(ce.shape[-1], self.gamma).to(ce.dtype) * valid.to(ce.dtype)
        variant = {"dpace": "full", "dpace-mean": "full", "dpace-cum": "cumulative",
                   "dpace-cont": "continuation"}[self.name]
        return dpace_weights(ce, valid, self.alpha, variant)

    def loss(self, ce: torch.Tensor, valid: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, detached weights). ce [b, N, B] with grad; valid [b, N, B] bool."""
        w = self.weights(ce, valid)
        tot = (ce * w).sum()
        if self.reduction == "mean":
            return tot / w.sum().clamp_min(1e-12), w
        return tot / batch_size, w


def make_objective(name: str, alpha: float = 0.5, gamma: float = 0.0, block_size: int = 8) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
    if name == "dflash":
        return Objective(name, gamma=gamma or dflash_gamma(block_size))
    if name.startswith("dpace"):
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        return Objective(name, alpha=alpha)
    return Objective(name)


# ------------------------------------------------------------------ config


@dataclass(frozen=True)
class BlockTrainConfig:
    target: str = "tiny"  # "tiny" (byte-level T-tiny) or "smollm2" (the demo target); see for_target()
    data_dir: str = ""  # data directory; empty = $SPECLAB_CACHE/dpace-tiny or dpace-smollm2
    runs_dir: str = ""  # where runs go; empty = $SPECLAB_CACHE/dpace-runs (tiny) or dpace-runs-smollm2
    objective: str = "dpace"
    alpha: float = 0.5  # D-PACE default (official CLI / SpecForge)
    gamma: float = 0.0  # 0 = DFlash default for the block size
    seed: int = 0  # drafter init + anchor RNG; the data order is shared by all seeds (data_seed)
    data_seed: int = 0
    block_size: int = 8
    layers: int = 1
    target_layers: tuple = (1, 2, 3)  # 0-indexed outputs of the 4-layer tiny target
    heads: int = 4
    ffn: int = 384
    steps: int = 400
    batch: int = 4  # sequences per step
    anchors: int = 16  # random anchors per sequence (all in one forward, block-masked)
    lr: float = 2e-3
    warmup: float = 0.04
    clip: float = 1.0
    weight_decay: float = 0.0
    log_every: int = 20
    eval_every: int = 100
    eval_seqs: int = 24  # held-out sequences for intermediate τ (every full-block anchor)
    final_eval_seqs: int = 96  # held-out sequences for the final τ
    ckpt_every: int = 100
    eval_stride: int = 1  # score every k-th anchor in offline τ (SmolLM2: 2 halves the eval cost)
    threads: int = 1

    @classmethod
    def for_target(cls, target: str) -> "BlockTrainConfig":
        """The defaults for a target. SmolLM2 (30 layers, d = 576, 9 heads): features from layers
        1, 14, 27 (DFlash's uniform choice from 1 to L−3), 9 heads of 64, FFN 768 (half the target's:
        a run must fit a few CPU-minutes), B = 16 (DFlash's main setting) with 8 anchors per sequence,
        lr 1e-3 (a DFlash probe of 400 steps: offline τ 1.170 at 1e-3, 1.097 at 3e-3), 400 steps as for the
        tiny target; offline τ on every 2nd anchor of the held-out answers."""
        if target == "tiny":
            return cls()
        if target == "smollm2":
            return cls(target="smollm2", target_layers=(1, 14, 27), heads=9, ffn=768, block_size=16, anchors=8,
                       lr=1e-3, steps=400, eval_every=100, ckpt_every=50, eval_seqs=16, final_eval_seqs=64,
                       eval_stride=2)
        raise ValueError(f"unknown target {target!r}; choose tiny or smollm2")

    @property
    def tag(self) -> str:
        o = make_objective(self.objective, self.alpha, self.gamma, self.block_size)
        extra = f"-a{o.alpha:g}" if o.alpha is not None else (f"-g{o.gamma:g}" if o.gamma is not None else "")
        return f"B{self.block_size}-{self.objective}{extra}-s{self.seed}"


def tiny_dir(cfg: BlockTrainConfig) -> Path:
    """The data directory of cfg's target (kept under its historical name: it is the tiny one by default)."""
    if cfg.data_dir:
        return Path(cfg.data_dir)
    if cfg.target == "smollm2":
        from engine.train.dpace.targets import smollm2_dir

        return smollm2_dir()
    from engine.train.dpace.tiny_target import default_dir

    return default_dir()


def runs_dir(cfg: BlockTrainConfig) -> Path:
    from engine.core.smollm import cache_root

    if cfg.runs_dir:
        return Path(cfg.runs_dir)
    return cache_root() / ("dpace-runs" if cfg.target == "tiny" else f"dpace-runs-{cfg.target}")


# ------------------------------------------------------------------ data


class FeatureData:
    """Token ids + cached target features (fp16) of a target's self-distillation data.

    Every row has its own prompt length and length (`engine.train.dpace.targets.BlockData`); for
    the tiny target they are the same for all rows."""

    def __init__(self, root: Path, layer_ids: tuple[int, ...], threads: int = 1) -> None:
        from engine.train.dpace.targets import load_block_data, load_target_model

        torch.set_num_threads(threads)
        self.root = root
        d = load_block_data(root)
        self.train_ids, self.held_ids = d.train_ids, d.held_ids
        self.train_plen, self.train_len, self.held_plen, self.held_len = d.train_plen, d.train_len, d.held_plen, d.held_len
        self.vocab_subset = d.vocab_subset
        self.uniform = d.uniform
        self.prompt_len = int(d.train_plen[0])  # the shared prompt length when `uniform`
        self.layer_ids = tuple(layer_ids)
        cache = root / f"feats-{'-'.join(map(str, layer_ids))}.pt"
        if cache.is_file():
            f = torch.load(cache, weights_only=True)
            self.train_feats, self.held_feats = f["train"], f["held"]
        else:
            target = load_target_model(root)
            self.train_feats = self._feats(target, self.train_ids, "train")
            self.held_feats = self._feats(target, self.held_ids, "held-out")
            tmp = cache.with_name(cache.name + ".tmp")
            torch.save({"train": self.train_feats, "held": self.held_feats}, tmp)
            os.replace(tmp, cache)

    def _feats(self, target, ids: torch.Tensor, what: str = "") -> torch.Tensor:
        from tqdm import tqdm

        from engine.drafters.block import target_features

        # Right padding is harmless: the target is causal, so positions < length never see it.
        step = 64 if ids.shape[1] <= 256 else 16
        return torch.cat([target_features(target, ids[i:i + step], self.layer_ids).half()
                          for i in tqdm(range(0, len(ids), step), desc=f"target features ({what})", unit="batch",
                                        mininterval=5)])

    def valid(self, rows: torch.Tensor, pos: torch.Tensor, held: bool = False) -> torch.Tensor:
        """Loss mask of block positions pos [b, N, B] of `rows`: inside the answer of that row."""
        plen = (self.held_plen if held else self.train_plen)[rows]
        ln = (self.held_len if held else self.train_len)[rows]
        return (pos >= plen[:, None, None]) & (pos < ln[:, None, None])


def sample_anchors(S, prompt_len, batch: int, n: int, gen: torch.Generator, block_size: int) -> torch.Tensor:
    """[batch, n] sorted anchors a with x_{a+1} a response token (a ≥ prompt_len − 1), a ≤ S − 2,
    drawn without replacement per sequence (blocks may overlap and run past the end, as in DFlash).

    S and prompt_len are ints (every row alike) or [batch] tensors (per-row length and prompt
    length). A row with fewer than n candidate anchors repeats its last one (its block is then
    counted twice; SmolLM2 answers are kept ≥ 24 tokens, so with ≤ 24 anchors it never happens there)."""
    S = torch.as_tensor(S).expand(batch) if not torch.is_tensor(S) or S.dim() == 0 else S
    P = torch.as_tensor(prompt_len).expand(batch) if not torch.is_tensor(prompt_len) or prompt_len.dim() == 0 \
        else prompt_len
    rows = []
    for b in range(batch):
        lo, hi = int(P[b]) - 1, int(S[b]) - 2
        r = torch.randperm(hi - lo + 1, generator=gen)[:n] + lo
        if len(r) < n:
            r = torch.cat([r, r[-1:].expand(n - len(r))])
        rows.append(r)
    return torch.stack(rows).sort(-1).values


def eval_anchors(S: int, prompt_len: int, block_size: int) -> torch.Tensor:
    """Every anchor whose whole block lies inside the sequence (τ is then exact for a full block)."""
    return torch.arange(prompt_len - 1, S - block_size + 1)


# ------------------------------------------------------------------ evaluation


@torch.no_grad()
def offline_tau(lm, ids: torch.Tensor, feats: torch.Tensor, prompt_len, seqs_per_batch: int = 4,
                lengths: torch.Tensor | None = None, stride: int = 1) -> dict:
    """Exact greedy acceptance on held-out target-greedy sequences: at every anchor draft one block,
    accepted = length of the prefix of argmax drafts equal to the target's tokens.

    prompt_len: an int (all rows alike, batched) or a [M] tensor with `lengths` [M] (one row per
    forward, anchors from prompt_len − 1 to length − B). stride > 1 scores every stride-th anchor."""
    from engine.drafters.block import block_logits

    B = lm.config.block_size
    S = ids.shape[1]
    accs = []
    if not torch.is_tensor(prompt_len):
        anc = eval_anchors(S, prompt_len, B)[::stride]
        for i in range(0, len(ids), seqs_per_batch):
            x, f = ids[i:i + seqs_per_batch], feats[i:i + seqs_per_batch].float()
            a = anc[None].expand(len(x), -1)
            logits, labels, _ = block_logits(lm, x, f, a)
            ok = (logits[..., 1:, :].argmax(-1) == labels[..., 1:])
            accs.append(torch.cumprod(ok.int(), -1).sum(-1).flatten())
    else:
        for i in range(len(ids)):
            ln = int(lengths[i])
            anc = eval_anchors(ln, int(prompt_len[i]), B)[::stride]
            if len(anc) == 0:
                continue
            logits, labels, _ = block_logits(lm, ids[i:i + 1, :ln], feats[i:i + 1, :ln].float(), anc[None])
            ok = (logits[..., 1:, :].argmax(-1) == labels[..., 1:])
            accs.append(torch.cumprod(ok.int(), -1).sum(-1).flatten())
    acc = torch.cat(accs)
    hist = torch.bincount(acc, minlength=B)[:B]
    reach = torch.tensor([(acc >= k).sum().item() for k in range(B)], dtype=torch.float64)
    by_pos = [float(reach[k + 1] / reach[k]) if reach[k] > 0 else 0.0 for k in range(B - 1)]
    return {"tau_offline": 1.0 + float(acc.double().mean()), "accept_by_pos": [round(x, 5) for x in by_pos],
            "hist": hist.tolist(), "n_anchors": int(acc.numel()),
            "tau_se": float(acc.double().std() / math.sqrt(acc.numel()))}


# ------------------------------------------------------------------ training


def _lr(cfg: BlockTrainConfig, step: int) -> float:
    w = max(1, int(cfg.warmup * cfg.steps))
    if step < w:
        return cfg.lr * (step + 1) / w
    p = (step - w) / max(1, cfg.steps - w)
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * p))


def build_drafter(cfg: BlockTrainConfig, hidden: int, vocab: int, mask_id: int):
    from engine.drafters.block import BlockDrafterConfig, BlockDrafterModel

    dc = BlockDrafterConfig(hidden_size=hidden, target_layer_ids=tuple(cfg.target_layers), mask_token_id=mask_id,
                            vocab_size=vocab, block_size=cfg.block_size, num_layers=cfg.layers,
                            num_heads=cfg.heads, num_kv_heads=cfg.heads, head_dim=hidden // cfg.heads,
                            intermediate_size=cfg.ffn)
    torch.manual_seed(cfg.seed)
    return BlockDrafterModel(dc)


def _atomic_torch_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_run(cfg: BlockTrainConfig, data: FeatureData | None = None, progress: bool = True) -> dict:
    """One training run → runs_dir/<tag>/{trace.jsonl, ckpt.pt, final.json, drafter/}. Resumable;
    returns final.json's content (skips the run when it already exists)."""
    from tqdm import tqdm

    from engine.drafters.block import BlockLM, block_logits, save_block_drafter
    from engine.train.dpace.targets import load_target_model, mask_token_id

    obj = make_objective(cfg.objective, cfg.alpha, cfg.gamma, cfg.block_size)
    run = runs_dir(cfg) / cfg.tag
    final_p = run / "final.json"
    if final_p.is_file():
        return json.loads(final_p.read_text())
    run.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    root = tiny_dir(cfg)
    data = data or FeatureData(root, tuple(cfg.target_layers), cfg.threads)
    target = load_target_model(root)
    model = build_drafter(cfg, target.config.hidden_size, target.config.vocab_size, mask_token_id(root))
    lm = BlockLM.from_target(model, target, vocab_subset=data.vocab_subset)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    ck = run / "ckpt.pt"
    step, wall, offset = 0, 0.0, None
    if ck.is_file():
        st = torch.load(ck, weights_only=True)
        if st["config"] != asdict(cfg):
            raise ValueError(f"{ck}: checkpoint was written with a different config; delete the run directory")
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, wall, offset = st["step"], st["wall_s"], st["trace_offset"]
    header = {"objective": obj.name, "alpha": obj.alpha, "gamma": obj.gamma, "reduction": obj.reduction,
              "label": obj.label, "seed": cfg.seed, "block_size": cfg.block_size, "steps": cfg.steps,
              "config": asdict(cfg), "target": cfg.target if cfg.target != "tiny" else str(root / "target"),
              "drafter_params": sum(p.numel() for p in model.parameters()),
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tw = TrainingTraceWriter(run / "trace.jsonl", header, resume_offset=offset)
    n_train, S = data.train_ids.shape
    B = cfg.block_size
    ev_ids, ev_feats = data.held_ids[:cfg.eval_seqs], data.held_feats[:cfg.eval_seqs]

    def batch_ids(t: int) -> torch.Tensor:
        per = n_train // cfg.batch
        epoch, j = divmod(t, per)
        perm = torch.randperm(n_train, generator=torch.Generator().manual_seed(cfg.data_seed * 7919 + epoch))
        return perm[j * cfg.batch:(j + 1) * cfg.batch]

    def evaluate(t: int, full: bool = False) -> dict:
        model.eval()
        m = cfg.final_eval_seqs if full else cfg.eval_seqs
        ids, fe = (data.held_ids[:m], data.held_feats[:m]) if full else (ev_ids, ev_feats)
        if data.uniform:
            r = offline_tau(lm, ids, fe, data.prompt_len, stride=cfg.eval_stride)
        else:
            r = offline_tau(lm, ids, fe, data.held_plen[:m], lengths=data.held_len[:m], stride=cfg.eval_stride)
        model.train()
        rec = {"type": "eval", "step": t, "split": "heldout-full" if full else "heldout", **r}
        rec["tau_offline"] = round(rec["tau_offline"], 5)
        rec["tau_se"] = round(rec["tau_se"], 5)
        tw.write(rec)
        return rec

    model.train()
    if step == 0:
        evaluate(0)
    acc = {"q": torch.zeros(B), "nq": torch.zeros(B), "w": torch.zeros(B), "S": 0.0, "nS": 0, "loss": 0.0, "n": 0}
    bar = tqdm(total=cfg.steps, initial=step, desc=cfg.tag, unit="step", disable=not progress, mininterval=5,
               dynamic_ncols=True)
    t0 = time.perf_counter() - wall
    while step < cfg.steps:
        lr = _lr(cfg, step)
        for g in opt.param_groups:
            g["lr"] = lr
        idx = batch_ids(step)
        # Rows are right-padded to the longest sequence of the data; cut the batch to its own longest
        # row (positions past every row's length are invalid anyway, and context costs per position).
        Sb = S if data.uniform else int(data.train_len[idx].max())
        ids = data.train_ids[idx, :Sb]
        feats = data.train_feats[idx, :Sb].float()
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)  # anchors: same for every objective
        if data.uniform:
            anchors = sample_anchors(S, data.prompt_len, cfg.batch, cfg.anchors, gen, B)
        else:
            anchors = sample_anchors(data.train_len[idx], data.train_plen[idx], cfg.batch, cfg.anchors, gen, B)
        logits, labels, in_range = block_logits(lm, ids, feats, anchors)
        pos = anchors[..., None] + torch.arange(B)
        valid = in_range & data.valid(idx, pos)
        valid[..., 0] = False
        ce = F.cross_entropy(logits.flatten(0, 2).float(), labels.flatten(), reduction="none").view(labels.shape)
        # Labels of prompt / padding positions may lie outside a reduced head (CE = inf there); where()
        # instead of ce·valid keeps inf·0 = nan out of the loss. Answer labels are always in the head.
        ce = torch.where(valid, ce, torch.zeros_like(ce))
        loss, w = obj.loss(ce, valid, cfg.batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        step += 1
        with torch.no_grad():
            q = torch.exp(-ce.detach()) * valid
            acc["q"] += q.sum((0, 1))
            acc["nq"] += valid.sum((0, 1))
            acc["w"] += w.sum((0, 1))
            has = valid[..., 1]
            acc["S"] += float(surrogate(torch.exp(-ce.detach()), valid)[has].sum())
            acc["nS"] += int(has.sum())
            acc["loss"] += float(loss)
            acc["n"] += 1
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            qm = (acc["q"] / acc["nq"].clamp_min(1))[1:]
            ws = acc["w"][1:] / acc["w"][1:].sum().clamp_min(1e-30)
            tw.write({"type": "log", "step": step, "loss": round(acc["loss"] / acc["n"], 6), "lr": round(lr, 8),
                      "q": [round(float(x), 5) for x in qm], "weight_share": [round(float(x), 5) for x in ws],
                      "surrogate": round(acc["S"] / max(1, acc["nS"]), 5),
                      "wall_s": round(time.perf_counter() - t0, 2)})
            bar.set_postfix(loss=f"{acc['loss'] / acc['n']:.3f}", S=f"{acc['S'] / max(1, acc['nS']):.2f}")
            acc = {k: (v.zero_() if torch.is_tensor(v) else 0) for k, v in acc.items()}
        if step % cfg.eval_every == 0 and step < cfg.steps:
            evaluate(step)
        if step % cfg.ckpt_every == 0 and step < cfg.steps:
            _atomic_torch_save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                                "wall_s": time.perf_counter() - t0, "trace_offset": tw.offset,
                                "config": asdict(cfg)}, ck)
    bar.close()
    train_s = time.perf_counter() - t0
    ev = evaluate(step, full=True)
    final = {"tag": cfg.tag, "objective": obj.name, "label": obj.label, "alpha": obj.alpha, "gamma": obj.gamma,
             "seed": cfg.seed, "block_size": B, "steps": cfg.steps, "tau_offline": ev["tau_offline"],
             "tau_se": ev["tau_se"], "accept_by_pos": ev["accept_by_pos"], "hist": ev["hist"],
             "n_anchors": ev["n_anchors"], "train_wall_s": round(train_s, 1)}
    tw.write({"type": "footer", "final": final})
    tw.close()
    save_block_drafter(model, run / "drafter", extra={"trained": final, "train_config": asdict(cfg)},
                       vocab_subset=data.vocab_subset)
    tmp = final_p.with_name("final.json.tmp")
    tmp.write_text(json.dumps(final, indent=1))
    os.replace(tmp, final_p)
    if ck.is_file():
        ck.unlink()
    return final


# ------------------------------------------------------------------ sweep

MAIN = [("uniform", None), ("dflash", None), ("dpace", 0.5), ("dpace-mean", 0.5), ("dpace-cum", 0.5),
        ("dpace-cont", 0.5)]
ALPHAS = (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)


def sweep_configs(base: BlockTrainConfig, seeds: tuple[int, ...], which: str = "all") -> list[BlockTrainConfig]:
    out = []
    for s in seeds:
        if which in ("all", "main"):
            for name, a in MAIN:
                out.append(replace(base, objective=name, alpha=a if a is not None else base.alpha, seed=s))
        if which in ("all", "alpha"):
            for a in ALPHAS:
                if a != 0.5:
                    out.append(replace(base, objective="dpace", alpha=a, seed=s))
    return out
