"""Training a block drafter for the Qwen2.5-Coder-1.5B target from feature shards.

    python -m engine dpace train-qwen --objective dpace --alpha 0.5 --max-answer-tokens 100000 --steps 600

One run = <runs_dir>/<tag>/{trace.jsonl, ckpt.json + ckpt-*.safetensors, final.json, drafter/}:
  * data: engine.train.blockdata.dataset.ShardData (checked shards, a budget of answer tokens);
  * the drafter: engine.drafters.block_model (1–2 layers reading the target's features), the target's
    frozen embedding and LM head read straight from its safetensors, a reduced head over the training
    labels (lossless: speculative verification is exact for any draft distribution);
  * the objective: engine.train.dpace.objectives (uniform, DFlash decay, D-PACE and ablations);
  * every `eval_every` steps the offline τ on held-out greedy answers (engine.train.dpace.features);
  * a checkpoint every `ckpt_minutes` of wall time (engine.train.blockdata.checkpoint): a killed run
    resumes from it with the same config; the training trace (engine.train.dpace.training_trace) is
    truncated back to the checkpoint so its records stay in step order.
Steps run under bf16 autocast where bf16 is native (fp32 master weights and optimizer state).
"""

from __future__ import annotations

import json
import math
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.trace.jsonio import write_json_atomic
from engine.train.blockdata.extract import QWEN, QWEN_LAYERS, default_dir
from engine.train.blockdata.shards import FeatureSpec, dataset_spec
from engine.train.dpace.objectives import StepStats, make_objective
from engine.train.loop import train_step, warmup_cosine

MASK_TOKEN = "<|fim_pad|>"  # a FIM control token: never in chat text; its row exists in the frozen embedding


@dataclass(frozen=True)
class QwenTrainConfig:
    data_dir: str = ""  # feature shards; empty = $SPECLAB_CACHE/drafter-data-qwen
    runs_dir: str = ""  # empty = $SPECLAB_CACHE/dpace-runs-qwen
    target: str = QWEN  # the shards and the drafter must be for this target
    target_dir: str = ""  # the target's weights (embedding + head); empty = the installed cache
    target_layers: tuple = QWEN_LAYERS  # must equal the shards' layers
    mask_token_id: int = 151662  # <|fim_pad|> in the Qwen2.5 vocabulary (checked absent from the data)
    objective: str = "dpace"
    alpha: float = 0.5  # D-PACE default (official code)
    gamma: float = 0.0  # 0 = DFlash's γ for the block size
    seed: int = 0  # drafter init + anchors
    data_seed: int = 0  # data order, shared by every seed and objective
    max_answer_tokens: int = 0  # data budget (a prefix of the shards); 0 = every complete shard
    labels: str = "target"  # target (the target's argmax) | data (the answer text); dataset.py
    block_size: int = 16  # DFlash's main setting
    layers: int = 1  # drafter layers: 1 keeps a step ~1 s at 1 thread and the weights < 80 MB in bf16
    heads: int = 12  # the target's attention shape: 12 heads of 128, 2 KV heads
    kv_heads: int = 2
    ffn: int = 4096  # under half the target's 8960: ~36 M trainable weights (72 MB bf16)
    steps: int = 600
    batch: int = 4  # sequences per step
    anchors: int = 16  # random anchors per sequence, all in one forward (block-masked)
    lr: float = 6e-4  # DFlash's learning rate
    warmup: float = 0.04
    clip: float = 1.0
    max_len: int = 0  # drop longer training sequences (0 = keep all; the extractor caps at 640)
    log_every: int = 10
    eval_every: int = 100
    eval_seqs: int = 8  # held-out sequences for the intermediate τ
    eval_stride: int = 4  # every 4th anchor for the intermediate τ
    final_eval_seqs: int = 24  # the whole held-out shard for the final τ
    final_eval_stride: int = 1
    ckpt_minutes: float = 10.0  # the longest work a kill may lose
    autocast: bool = True  # bf16 autocast where native (avx512_bf16/AMX): ~2× a fp32 step
    threads: int = 1

    @property
    def tag(self) -> str:
        o = make_objective(self.objective, self.alpha, self.gamma, self.block_size)
        extra = f"-a{o.alpha:g}" if o.alpha is not None else (f"-g{o.gamma:g}" if o.gamma is not None else "")
        budget = f"-{self.max_answer_tokens // 1000}k" if self.max_answer_tokens else "-all"
        return f"qwen-B{self.block_size}-L{self.layers}-{self.objective}{extra}{budget}-s{self.seed}"


def qwen_runs_dir(cfg: QwenTrainConfig) -> Path:
    from engine.models.smollm import cache_root

    return Path(cfg.runs_dir) if cfg.runs_dir else cache_root() / "dpace-runs-qwen"


def _lr(cfg: QwenTrainConfig, step: int) -> float:
    return warmup_cosine(step, cfg.steps, cfg.lr, cfg.warmup)  # engine.train.loop: the shared schedule


def _target_dir(cfg: QwenTrainConfig) -> Path:
    if cfg.target_dir:
        return Path(cfg.target_dir)
    from engine.models.provision import model_dir

    return Path(model_dir(cfg.target))


def expected_spec(cfg: QwenTrainConfig, tcfg: dict) -> FeatureSpec:
    return FeatureSpec(target=cfg.target, hidden_size=int(tcfg["hidden_size"]),
                       num_layers=int(tcfg["num_hidden_layers"]), vocab_size=int(tcfg["vocab_size"]),
                       layers=tuple(cfg.target_layers))


def _block_hidden(lm, ids: torch.Tensor, feats: torch.Tensor, anchors: torch.Tensor):
    """Final hidden states [b, N, B, D] of every anchor's block (one block-masked forward per batch),
    block positions [b, N, B] and in_range (engine.drafters.block_model.block_logits without the head)."""
    from engine.drafters.block_model import block_attention_mask, block_inputs

    c = lm.config
    b, S = ids.shape
    N, B = anchors.shape[1], c.block_size
    blk, pos, _, in_range = block_inputs(ids, anchors, B, c.mask_token_id)
    ctx_kv = lm.model.context_kv(feats, torch.arange(S)[None].expand(b, S))
    h = lm.model(lm.embed(blk.flatten(1)), pos.flatten(1), ctx_kv, block_attention_mask(anchors, S, B))
    return h.view(b, N, B, -1), pos, in_range


def sub_logits(lm, h: torch.Tensor) -> torch.Tensor:
    """Logits over the reduced head only ([…, V']): scattering them into the full 151,936-token
    vocabulary (as decoding does) would cost 0.6 GB per 1k query positions and dominate a step."""
    return h @ lm._sub_head.T.to(h.dtype)


def block_step(lm, obj, ids, lab, feats, plen, ln, anchors, B, lut: torch.Tensor):
    """(loss, ce, valid, weights) of one batch. lut maps a token id to its reduced-head index (every
    training label is in the head: it was built from them)."""
    h, pos, in_range = _block_hidden(lm, ids, feats, anchors)
    logits = sub_logits(lm, h)
    labels = lab.gather(1, pos.clamp(max=ids.shape[1] - 1).flatten(1)).view_as(pos)
    valid = in_range & (pos >= plen[:, None, None]) & (pos < ln[:, None, None])
    valid[..., 0] = False
    idx = lut[labels]
    ce = F.cross_entropy(logits.flatten(0, 2).float(), idx.clamp_min(0).flatten(), reduction="none").view(idx.shape)
    ce = torch.where(valid, ce, torch.zeros_like(ce))
    loss, w = obj.loss(ce, valid, ids.shape[0])
    return loss, ce, valid, w


@torch.no_grad()
def heldout_tau(lm, data, m: int, stride: int) -> dict:
    """Offline τ (incl. the bonus token) on the first m held-out greedy answers: at every stride-th
    anchor whose block fits, accepted = length of the prefix of argmax drafts equal to the target's
    tokens (engine.train.dpace.features.offline_tau, with the argmax taken over the reduced head)."""
    from engine.train.dpace.features import eval_anchors

    B = lm.config.block_size
    sub = lm.vocab_subset
    accs = []
    for s in data.held[:m]:
        anc = eval_anchors(len(s), s.plen, B)[::stride]
        if len(anc) == 0:
            continue
        ids = s.ids[None]
        h, pos, _ = _block_hidden(lm, ids, s.feats[None].float(), anc[None])
        pred = sub[sub_logits(lm, h).argmax(-1)] if sub is not None else (h @ lm.head_weight.T.to(h.dtype)).argmax(-1)
        ok = pred[..., 1:] == ids.gather(1, pos.flatten(1)).view_as(pos)[..., 1:]
        accs.append(torch.cumprod(ok.int(), -1).sum(-1).flatten())
    acc = torch.cat(accs)
    reach = [(acc >= k).sum().item() for k in range(B)]
    by_pos = [reach[k + 1] / reach[k] if reach[k] else 0.0 for k in range(B - 1)]
    return {"tau_offline": 1.0 + float(acc.double().mean()), "accept_by_pos": [round(x, 5) for x in by_pos],
            "hist": torch.bincount(acc, minlength=B)[:B].tolist(), "n_anchors": int(acc.numel()),
            "tau_se": float(acc.double().std() / math.sqrt(acc.numel())) if acc.numel() > 1 else 0.0}


def train_qwen(cfg: QwenTrainConfig, data=None, progress: bool = True) -> dict:
    """One resumable run (module doc); returns final.json (skips a finished run). One process per run
    directory (checkpoint.RunLock)."""
    from engine.train.blockdata.checkpoint import RunLock

    run = qwen_runs_dir(cfg) / cfg.tag
    if (run / "final.json").is_file():
        return json.loads((run / "final.json").read_text())
    return _train(cfg, data, progress, RunLock)


def _train(cfg: QwenTrainConfig, data, progress: bool, RunLock) -> dict:
    """Data, target embedding/head and a fresh drafter, then the step loop under the run lock."""
    from engine.drafters.block import BlockDrafterConfig, BlockDrafterModel, BlockLM
    from engine.train.blockdata.dataset import ShardData, load_embed_head
    from engine.train.blockdata.shards import check_dataset

    obj = make_objective(cfg.objective, cfg.alpha, cfg.gamma, cfg.block_size)
    run = qwen_runs_dir(cfg) / cfg.tag
    torch.set_num_threads(cfg.threads)
    root = Path(cfg.data_dir) if cfg.data_dir else default_dir()
    embed, head, tcfg = load_embed_head(_target_dir(cfg))
    spec = expected_spec(cfg, tcfg)
    check_dataset(root, spec)  # the directory's description first: other layers / target → one line
    data = data or ShardData(root, spec, cfg.max_answer_tokens, cfg.labels, cfg.max_len)
    data.check_mask(cfg.mask_token_id)
    D = spec.hidden_size
    dc = BlockDrafterConfig(hidden_size=D, target_layer_ids=tuple(cfg.target_layers), mask_token_id=cfg.mask_token_id,
                            vocab_size=spec.vocab_size, block_size=cfg.block_size, num_layers=cfg.layers,
                            num_heads=cfg.heads, num_kv_heads=cfg.kv_heads, head_dim=D // cfg.heads,
                            intermediate_size=cfg.ffn, rope_theta=float((tcfg.get("rope_parameters") or {}).get(
                                "rope_theta", tcfg.get("rope_theta", 10000.0))))
    torch.manual_seed(cfg.seed)
    model = BlockDrafterModel(dc)
    subset = data.vocab_subset()
    lm = BlockLM(model, embed, head, subset)
    lut = torch.full((spec.vocab_size,), -1, dtype=torch.long)
    lut[subset] = torch.arange(subset.numel())
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    run.mkdir(parents=True, exist_ok=True)
    with RunLock(run):
        return _loop(cfg, data, progress, run, root, spec, model, lm, opt, obj, subset, lut)


def _loop(cfg, data, progress, run, root, spec, model, lm, opt, obj, subset, lut) -> dict:
    """Resume from the checkpoint if any, train to cfg.steps, evaluate, export the drafter."""
    from tqdm import tqdm

    from engine.models.load import native_bf16
    from engine.drafters.block import save_block_drafter
    from engine.train.blockdata.checkpoint import load_checkpoint, save_checkpoint
    from engine.train.blockdata.dataset import pad_batch
    from engine.train.dpace.features import sample_anchors
    from engine.train.dpace.training_trace import TrainingTraceWriter

    st = load_checkpoint(run, asdict(cfg), model, opt)
    step, wall, offset = (st["step"], st["wall_s"], st["trace_offset"]) if st else (0, 0.0, None)
    header = {"objective": obj.name, "alpha": obj.alpha, "gamma": obj.gamma, "reduction": obj.reduction,
              "label": obj.label, "seed": cfg.seed, "block_size": cfg.block_size, "steps": cfg.steps,
              "config": asdict(cfg), "target": cfg.target, "data_dir": str(root), "shards": len(data.shards),
              "answer_tokens": data.answer_tokens, "train_sequences": len(data.train),
              "vocab_subset": int(subset.numel()), "drafter_params": sum(p.numel() for p in model.parameters()),
              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tw = TrainingTraceWriter(run / "trace.jsonl", header, resume_offset=offset)
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.autocast and native_bf16() else nullcontext
    B, n = cfg.block_size, len(data.train)

    def evaluate(t: int, full: bool = False) -> dict:
        model.eval()
        with amp():
            r = heldout_tau(lm, data, cfg.final_eval_seqs if full else cfg.eval_seqs,
                            cfg.final_eval_stride if full else cfg.eval_stride)
        model.train()
        rec = {"type": "eval", "step": t, "split": "heldout-full" if full else "heldout", **r,
               "tau_offline": round(r["tau_offline"], 5), "tau_se": round(r["tau_se"], 5)}
        tw.write(rec)
        return rec

    model.train()
    if step == 0:
        evaluate(0)
    acc = StepStats(B)
    bar = tqdm(total=cfg.steps, initial=step, desc=cfg.tag, unit="step", disable=not progress, mininterval=10,
               dynamic_ncols=True)
    t0 = time.perf_counter() - wall
    last_ck = time.perf_counter()
    while step < cfg.steps:
        lr = _lr(cfg, step)
        epoch, j = divmod(step, max(1, n // cfg.batch))
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.data_seed * 7919 + epoch))
        rows = [data.train[int(i)] for i in perm[j * cfg.batch:(j + 1) * cfg.batch]]
        ids, lab, feats, plen, ln = pad_batch(rows, spec.feat_dim)
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)  # the same anchors for every objective
        anchors = sample_anchors(ln, plen, len(rows), cfg.anchors, gen, B)
        with amp():
            loss, ce, valid, w = block_step(lm, obj, ids, lab, feats, plen, ln, anchors, B, lut)
        train_step(opt, loss, model.parameters(), lr, cfg.clip)
        step += 1
        acc.add(ce, valid, w, loss)
        bar.update(1)
        if step % cfg.log_every == 0 or step == cfg.steps:
            rec = acc.record(step, lr, time.perf_counter() - t0)
            tw.write(rec)
            bar.set_postfix(loss=f"{rec['loss']:.3f}", q1=f"{rec['q'][0]:.2f}")
        if step % cfg.eval_every == 0 and step < cfg.steps:
            ev = evaluate(step)
            bar.write(f"step {step}: offline τ {ev['tau_offline']:.3f} (held-out, stride {cfg.eval_stride})",
                      file=sys.stderr)  # stdout carries the final JSON record only
        if step < cfg.steps and (time.perf_counter() - last_ck >= cfg.ckpt_minutes * 60):
            save_checkpoint(run, model, opt, {"step": step, "wall_s": time.perf_counter() - t0,
                                              "trace_offset": tw.offset, "config": asdict(cfg)})
            last_ck = time.perf_counter()
    bar.close()
    train_s = time.perf_counter() - t0
    ev = evaluate(step, full=True)
    final = {"tag": cfg.tag, "objective": obj.name, "label": obj.label, "alpha": obj.alpha, "gamma": obj.gamma,
             "seed": cfg.seed, "block_size": B, "steps": cfg.steps, "answer_tokens": data.answer_tokens,
             "tau_offline": ev["tau_offline"], "tau_se": ev["tau_se"], "accept_by_pos": ev["accept_by_pos"],
             "hist": ev["hist"], "n_anchors": ev["n_anchors"], "train_wall_s": round(train_s, 1),
             "s_per_step": round(train_s / max(1, cfg.steps), 3)}
    tw.write({"type": "footer", "final": final})
    tw.close()
    save_block_drafter(model, run / "drafter", extra={"trained": final, "train_config": asdict(cfg),
                                                      "target": cfg.target}, vocab_subset=subset)
    write_json_atomic(final, run / "final.json")
    for f in list(run.glob("ckpt-*.safetensors")) + [run / "ckpt.json"]:
        f.unlink(missing_ok=True)
    return final
