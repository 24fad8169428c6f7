"""Training the EAGLE-style head (engine.drafters.eagle_model) for the Qwen2.5-Coder-1.5B target.

    python -m engine eagle train --tag main --max-tokens 0 --epochs 2

One run = <runs_dir>/<tag>/{trace.jsonl, ckpt.json + ckpt-*.safetensors, final.json, curve.json, head/}:
  * data: engine.train.eagle.data (the feature shards made by `eagle features` in the same session:
    nothing of them needs to outlive the machine);
  * the head: fuse + fc + one decoder layer (from the target's last layer, or random), the target's
    frozen embedding and its LM-head rows of the 32k draft vocabulary (read from the target, never stored);
  * the loss: cross-entropy to the target's own argmax, averaged over U unrolled steps (EAGLE-3's
    training-time test, `unroll`);
  * learning rate: linear warm-up, then constant, then a linear decay over the last `decay` share —
    so an evaluation at an earlier budget is a fair point of an anytime curve (no schedule cut short);
  * offline τ at K = 4 on the held-out greedy answers at each budget in `curve` (training positions seen)
    and at the end: τ = 1 + E[leading correct drafts] (the bonus token included);
  * a checkpoint every `ckpt_minutes` of wall time (weights, AdamW moments, the data cursor): a killed run
    resumes from it (engine.train.blockdata.checkpoint; another config is refused in one line).
Progress: tqdm over training positions with tokens/s, CPU-hours and the ETA.
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
from engine.train.eagle.data import IGNORE, EagleData, batches, pad
from engine.train.loop import train_step

QWEN = "qwen2.5-coder-1.5b"


@dataclass(frozen=True)
class EagleTrainConfig:
    data_dir: str = ""  # feature shards; empty = $SPECLAB_CACHE/features-qwen-eagle
    runs_dir: str = ""  # empty = $SPECLAB_CACHE/eagle-runs-qwen
    tag: str = "main"  # the run's folder under runs_dir
    target: str = QWEN  # the shards and the head must be for this target
    target_dir: str = ""  # the target's weights (embedding, head, last layer); empty = the installed cache
    vocab_file: str = ""  # the draft vocabulary; empty = models/qwen2.5-coder/draft-vocab.safetensors
    target_layers: tuple = (1, 13, 25)  # EAGLE-3's low/mid/high; (27,) is EAGLE-1's top feature
    init: str = "target"  # target: the layer starts as the target's last layer (MLP pruned); random
    intermediate_size: int = 4096  # keeps the head ≤ 80 MB in bf16
    unroll: int = 1  # training-time-test steps (1 = plain teacher forcing)
    max_tokens: int = 0  # training positions (a prefix of the shard stream); 0 = every complete shard
    max_shards: int = 0  # 0 = all
    epochs: float = 1.0  # passes over the data (fractions allowed)
    batch_tokens: int = 3072  # rows × padded length per step
    lr: float = 3e-4
    warmup: float = 0.03  # share of the steps
    decay: float = 0.15  # share of the steps with a linear decay to 10 % at the end
    clip: float = 1.0
    seed: int = 0  # head init (random) and data order
    curve: tuple = tuple(25_000 * 2 ** i for i in range(6))  # positions seen (25k … 800k) → offline τ
    eval_seqs: int = 24  # held-out sequences (the whole greedy shard)
    eval_k: int = 4  # the draft length of the offline τ
    ckpt_minutes: float = 10.0  # the longest work a kill may lose
    autocast: bool = True  # bf16 autocast where native (avx512_bf16 / AMX)
    threads: int = 2


def runs_dir(cfg: EagleTrainConfig) -> Path:
    from engine.models.smollm import cache_root

    return Path(cfg.runs_dir) if cfg.runs_dir else cache_root() / "eagle-runs-qwen"


def data_dir(cfg: EagleTrainConfig) -> Path:
    from engine.models.smollm import cache_root

    return Path(cfg.data_dir) if cfg.data_dir else cache_root() / "features-qwen-eagle"


def lr_at(cfg: EagleTrainConfig, step: int, total: int) -> float:
    w = max(1, int(cfg.warmup * total))
    d0 = int((1 - cfg.decay) * total)
    if step < w:
        return cfg.lr * (step + 1) / w
    if step < d0:
        return cfg.lr
    return cfg.lr * (1 - 0.9 * (step - d0) / max(1, total - d0))


class Frozen:
    """The target's frozen embedding and the LM-head rows of the draft vocabulary (bf16)."""

    def __init__(self, embed: torch.Tensor, head: torch.Tensor, subset: torch.Tensor, norm_f=None) -> None:
        self.embed = embed.detach().to(torch.bfloat16)
        self.sub_head = head.detach()[subset].to(torch.bfloat16).contiguous()
        self.subset = subset


def step_loss(head, fr: Frozen, ids, feats, lab, unroll: int):
    """Mean cross-entropy over the unrolled steps, and per-step top-1 accuracy on labelled positions."""
    b, S = ids.shape
    nxt = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], 1)  # x_{t+1}
    dt = head.fc.weight.dtype  # bf16 inputs; autocast (where on) casts the matmuls back down
    emb = F.embedding(nxt, fr.embed).to(dt)
    pos = torch.arange(S)[None].expand(b, S)
    outs = head.unrolled(emb, feats.to(dt), pos, unroll)
    losses, accs = [], []
    for j, h in enumerate(outs, start=1):
        y = lab.clone()
        if j > 1:
            y[:, : j - 1] = IGNORE
        m = y != IGNORE
        logits = head.norm_f(h[m]) @ fr.sub_head.T.to(h.dtype)
        losses.append(F.cross_entropy(logits.float(), y[m]))
        accs.append(float((logits.argmax(-1) == y[m]).float().mean()) if m.any() else 0.0)
    return torch.stack(losses).mean(), accs


@torch.no_grad()
def offline_tau(head, fr: Frozen, seqs, K: int) -> dict:
    """τ at draft length K on greedy answers (see module doc): for each answer start t (t ≥ plen − 1),
    the leading run of j = 1 … K with step j's argmax at t + j − 1 equal to the label there."""
    head.eval()
    runs, first = [], [0] * K
    reach = [0] * K
    for s in seqs:
        ids, feats, lab = s.ids[None], s.feats[None], s.labels[None]
        S = ids.shape[1]
        nxt = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], 1)
        dt = head.fc.weight.dtype
        outs = head.unrolled(F.embedding(nxt, fr.embed).to(dt), feats.to(dt), torch.arange(S)[None], K)
        pred = torch.stack([(head.norm_f(h[0]) @ fr.sub_head.T.to(h.dtype)).argmax(-1) for h in outs])  # [K, S]
        ok = pred == lab[0][None]
        for t in range(max(0, s.plen - 1), S - 2):
            n = 0
            for j in range(K):
                if t + j >= S - 1 or lab[0, t + j] == IGNORE:
                    break
                reach[j] += 1
                if not bool(ok[j, t + j]):
                    break
                first[j] += 1
                n += 1
            runs.append(n)
    head.train()
    acc = [first[j] / reach[j] if reach[j] else 0.0 for j in range(K)]
    mean = sum(runs) / max(1, len(runs))
    var = sum((r - mean) ** 2 for r in runs) / max(1, len(runs) - 1)
    return {"tau": 1 + mean, "tau_se": math.sqrt(var / max(1, len(runs))), "accept_by_pos": acc,
            "n_starts": len(runs), "K": K}


def build(cfg: EagleTrainConfig, data: EagleData | None = None):
    """(head, frozen, data, target info): loads the target's embedding/head (and last layer for
    init = target) from its safetensors, the draft vocabulary, then the data."""
    from engine.models.vocab_subset import load_subset
    from engine.drafters.eagle_model import EagleConfig, EagleHead, init_from_target
    from engine.train.blockdata.dataset import load_embed_head

    from engine.models.provision import model_dir

    tdir = Path(cfg.target_dir) if cfg.target_dir else Path(model_dir(cfg.target))
    embed, lm_head, tcfg = load_embed_head(tdir)
    subset = load_subset(Path(cfg.vocab_file)) if cfg.vocab_file else load_subset()
    if subset is None:
        raise FileNotFoundError(f"{cfg.vocab_file or 'models/qwen2.5-coder/draft-vocab.safetensors'}: the draft "
                                "vocabulary is missing")
    data = data or EagleData(data_dir(cfg), cfg.target, tuple(cfg.target_layers), subset, cfg.max_tokens,
                             cfg.max_shards)
    sp = data.spec
    if (sp.hidden_size, sp.vocab_size) != (int(tcfg["hidden_size"]), int(tcfg["vocab_size"])):
        from engine.train.blockdata.shards import ShardError

        raise ShardError(f"{data.root}/dataset.json: features of hidden size {sp.hidden_size} and {sp.vocab_size} "
                         f"tokens; the target at {tdir} has {tcfg['hidden_size']} and {tcfg['vocab_size']}")
    rope = (tcfg.get("rope_parameters") or {}).get("rope_theta", tcfg.get("rope_theta", 10000.0))
    ec = EagleConfig(hidden_size=int(tcfg["hidden_size"]), target_layers=tuple(cfg.target_layers),
                     num_heads=int(tcfg["num_attention_heads"]), num_kv_heads=int(tcfg["num_key_value_heads"]),
                     intermediate_size=cfg.intermediate_size, rope_theta=float(rope),
                     rms_eps=float(tcfg.get("rms_norm_eps", 1e-6)), vocab_size=int(tcfg["vocab_size"]),
                     draft_vocab=int(subset.numel()), target=cfg.target)
    torch.manual_seed(cfg.seed)
    head = EagleHead(ec)
    info = {"init": "random"}
    if cfg.init == "target":
        info = init_from_target(head, _LastLayer(tdir, tcfg), -1)
    elif cfg.init != "random":
        raise ValueError(f"init must be target or random, got {cfg.init!r}")
    return head, Frozen(embed, lm_head, subset), data, info


class _LastLayer:
    """Just the target's last decoder layer and final norm, read from its safetensors (no full load)."""

    def __init__(self, tdir: Path, tcfg: dict) -> None:
        from types import SimpleNamespace

        from safetensors import safe_open

        L = int(tcfg["num_hidden_layers"]) - 1
        pre = f"model.layers.{L}."
        t: dict[str, torch.Tensor] = {}
        for f in sorted(tdir.glob("*.safetensors")):
            with safe_open(str(f), "pt") as h:
                for k in h.keys():
                    if k.startswith(pre) or k == "model.norm.weight":
                        t[k] = h.get_tensor(k)

        def lin(name, bias=False):
            return SimpleNamespace(weight=t[pre + name + ".weight"], bias=t.get(pre + name + ".bias") if bias else None)

        layer = SimpleNamespace(
            self_attn=SimpleNamespace(q_proj=lin("self_attn.q_proj", True), k_proj=lin("self_attn.k_proj", True),
                                      v_proj=lin("self_attn.v_proj", True), o_proj=lin("self_attn.o_proj")),
            mlp=SimpleNamespace(gate_proj=lin("mlp.gate_proj"), up_proj=lin("mlp.up_proj"), down_proj=lin("mlp.down_proj")),
            input_layernorm=SimpleNamespace(weight=t[pre + "input_layernorm.weight"]),
            post_attention_layernorm=SimpleNamespace(weight=t[pre + "post_attention_layernorm.weight"]))
        self.model = SimpleNamespace(layers=[layer] * (L + 1), norm=SimpleNamespace(weight=t["model.norm.weight"]))


def train(cfg: EagleTrainConfig, data: EagleData | None = None, progress: bool = True) -> dict:
    """One resumable run (module doc); returns final.json (a finished run is not retrained)."""
    from engine.train.blockdata.checkpoint import RunLock

    run = runs_dir(cfg) / cfg.tag
    if (run / "final.json").is_file():
        return json.loads((run / "final.json").read_text())
    torch.set_num_threads(cfg.threads)
    head, fr, data, info = build(cfg, data)
    run.mkdir(parents=True, exist_ok=True)
    with RunLock(run):
        return _loop(cfg, head, fr, data, info, run, progress)


def _loop(cfg, head, fr, data, info, run: Path, progress: bool) -> dict:
    from tqdm import tqdm

    from engine.models.load import machine_description, native_bf16
    from engine.drafters.eagle import save_eagle
    from engine.train.blockdata.checkpoint import load_checkpoint, save_checkpoint

    opt = torch.optim.AdamW([p for p in head.parameters() if p.requires_grad], lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    st = load_checkpoint(run, asdict(cfg), head, opt)
    step, seen, wall, cpu0 = (st["step"], st["seen"], st["wall_s"], st["cpu_s"]) if st else (0, 0, 0.0, 0.0)
    curve = list(st["curve"]) if st else []
    amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cfg.autocast and native_bf16() else nullcontext
    gen = torch.Generator().manual_seed(cfg.seed)
    plan: list[list[int]] = []
    e = 0
    while len(plan) < 1 or e < math.ceil(cfg.epochs):
        plan += batches(data.train, cfg.batch_tokens, gen)
        e += 1
    total = max(1, int(len(plan) * cfg.epochs / e))
    plan = plan[:total]
    total_tokens = sum(sum(len(data.train[i]) for i in b) for b in plan)
    fd = head.config.feat_dim
    if st:  # drop what was logged after the checkpoint: the resumed steps log it again
        with open(run / "trace.jsonl", "r+b") as fh:
            fh.truncate(st["trace_offset"])
    log = open(run / "trace.jsonl", "a" if st else "w")
    if not st:
        log.write(json.dumps({"type": "header", "config": asdict(cfg), "init": info, "tokens": data.tokens,
                              "labelled": data.labelled, "shards": len(data.shards), "steps": total,
                              "positions": total_tokens, "machine": machine_description(),
                              "params": sum(p.numel() for p in head.parameters()),
                              "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}) + "\n")

    def evaluate() -> dict:
        with amp():
            r = offline_tau(head, fr, data.held[: cfg.eval_seqs], cfg.eval_k)
        rec = {"type": "eval", "step": step, "positions": seen, "wall_s": round(time.perf_counter() - t0, 1),
               "cpu_h": round((cpu0 + time.process_time() - c0) / 3600, 4), **r}
        log.write(json.dumps(rec) + "\n")
        log.flush()
        curve.append(rec)
        return rec

    t0, c0 = time.perf_counter() - wall, time.process_time()
    if step == 0:
        bar_write(evaluate(), progress)
    pending = [b for b in cfg.curve if b > seen]
    bar = tqdm(total=total_tokens, initial=seen, unit="tok", unit_scale=True, desc=f"eagle {cfg.tag}",
               disable=not progress, mininterval=15, dynamic_ncols=True)
    last_ck = time.perf_counter()
    head.train()
    while step < total:
        rows = [data.train[i] for i in plan[step]]
        ids, feats, lab, _ = pad(rows, fd)
        with amp():
            loss, accs = step_loss(head, fr, ids, feats, lab, cfg.unroll)
        train_step(opt, loss, head.parameters(), lr_at(cfg, step, total), cfg.clip)  # engine.train.loop: the shared step
        step += 1
        n = sum(len(r) for r in rows)
        seen += n
        bar.update(n)
        el = time.perf_counter() - t0
        cpu_h = (cpu0 + time.process_time() - c0) / 3600
        if step % 10 == 0:
            log.write(json.dumps({"type": "log", "step": step, "positions": seen, "loss": round(float(loss.detach()), 4),
                                  "acc": [round(a, 4) for a in accs], "lr": opt.param_groups[0]["lr"],
                                  "wall_s": round(el, 1), "cpu_h": round(cpu_h, 4)}) + "\n")
            bar.set_postfix_str(f"loss {float(loss.detach()):.3f} acc1 {accs[0]:.3f} cpu-h {cpu_h:.2f}")
        while pending and seen >= pending[0]:
            pending.pop(0)
            bar_write(evaluate(), progress)
        if step < total and time.perf_counter() - last_ck >= cfg.ckpt_minutes * 60:
            log.flush()
            save_checkpoint(run, head, opt, {"step": step, "seen": seen, "wall_s": time.perf_counter() - t0,
                                             "cpu_s": cpu0 + time.process_time() - c0, "curve": curve,
                                             "trace_offset": log.tell(), "config": asdict(cfg)})
            last_ck = time.perf_counter()
    bar.close()
    ev = evaluate() if not curve or curve[-1]["positions"] != seen else curve[-1]
    final = {"tag": cfg.tag, "tau": ev["tau"], "tau_se": ev["tau_se"], "accept_by_pos": ev["accept_by_pos"],
             "K": cfg.eval_k, "positions": seen, "epochs": cfg.epochs, "tokens": data.tokens, "steps": total,
             "train_wall_s": round(time.perf_counter() - t0, 1),
             "cpu_h": round((cpu0 + time.process_time() - c0) / 3600, 4), "init": info,
             "config": asdict(cfg), "machine": machine_description(), "curve": curve,
             "date": time.strftime("%Y-%m-%d")}
    log.write(json.dumps({"type": "footer", "final": {k: v for k, v in final.items() if k != "curve"}}) + "\n")
    log.close()
    save_eagle(head, run / "head", extra={"trained": {k: v for k, v in final.items() if k not in ("curve", "config")},
                                          "train_config": asdict(cfg)})
    write_json_atomic(final, run / "final.json")
    for f in list(run.glob("ckpt-*.safetensors")) + [run / "ckpt.json"]:
        f.unlink(missing_ok=True)
    return final


def bar_write(rec: dict, progress: bool) -> None:
    if progress:
        print(f"[{rec['positions']} positions] offline τ@{rec['K']} {rec['tau']:.3f} ± {rec['tau_se']:.3f}, "
              f"accept by position {[round(a, 3) for a in rec['accept_by_pos']]}", file=sys.stderr, flush=True)
