"""Block-drafter training runs: the run configuration, one resumable run (`train_run`: a training
trace, checkpoints, the held-out offline τ and the exported drafter), and the objective sweep.

The objectives are engine/train/dpace/objectives.py; the data, anchors and offline τ
engine/train/dpace/features.py; online evaluation engine/train/dpace/eval.py; the report over runs
engine/train/dpace/report.py.

`python -m engine dpace ...` (see docs/dpace.md): prepare | train | sweep | online | report.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.trace.jsonio import atomic_path, write_json_atomic
from engine.train.dpace.features import FeatureData, offline_tau, sample_anchors
from engine.train.dpace.objectives import StepStats, make_objective
from engine.train.dpace.training_trace import TrainingTraceWriter
from engine.train.loop import train_step, warmup_cosine

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
    from engine.models.smollm import cache_root

    if cfg.runs_dir:
        return Path(cfg.runs_dir)
    return cache_root() / ("dpace-runs" if cfg.target == "tiny" else f"dpace-runs-{cfg.target}")


# ------------------------------------------------------------------ training


def _lr(cfg: BlockTrainConfig, step: int) -> float:
    return warmup_cosine(step, cfg.steps, cfg.lr, cfg.warmup)  # engine.train.loop: the shared schedule


def build_drafter(cfg: BlockTrainConfig, hidden: int, vocab: int, mask_id: int):
    from engine.drafters.block import BlockDrafterConfig, BlockDrafterModel

    dc = BlockDrafterConfig(hidden_size=hidden, target_layer_ids=tuple(cfg.target_layers), mask_token_id=mask_id,
                            vocab_size=vocab, block_size=cfg.block_size, num_layers=cfg.layers,
                            num_heads=cfg.heads, num_kv_heads=cfg.heads, head_dim=hidden // cfg.heads,
                            intermediate_size=cfg.ffn)
    torch.manual_seed(cfg.seed)
    return BlockDrafterModel(dc)


def _atomic_torch_save(obj, path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


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
    acc = StepStats(B)
    bar = tqdm(total=cfg.steps, initial=step, desc=cfg.tag, unit="step", disable=not progress, mininterval=5,
               dynamic_ncols=True)
    t0 = time.perf_counter() - wall
    while step < cfg.steps:
        lr = _lr(cfg, step)
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
        train_step(opt, loss, model.parameters(), lr, cfg.clip)
        step += 1
        acc.add(ce, valid, w, loss)
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            rec = acc.record(step, lr, time.perf_counter() - t0)
            tw.write(rec)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", S=f"{rec['surrogate']:.2f}")
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
    write_json_atomic(final, final_p)
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
