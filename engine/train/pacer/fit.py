"""Train the PACER pre-verifier M_B on simulated-decoding data (engine.train.pacer.data).

Loss: BCE on the accept labels, L = Σ w_i·BCE(s_i, y_i) / Σ w_i, over packed sequences (several
decoding steps per row, block-diagonal causal mask). AdamW, linear warmup then cosine decay.

Held-out metrics (every `eval_every` steps and at the end; the best held-out BCE is exported):
    AUC  rank-based (Mann–Whitney U with average ranks for ties): P(s_pos > s_neg)
    ECE  Σ_bins (n_b / N)·|mean(s) − mean(y)| over 10 equal-width bins of s
plus a reliability table (per bin: count, mean score, observed acceptance).

Checkpoints (weights + AdamW moments as safetensors, step in the metadata) are written atomically
(engine.trace.jsonio.atomic_path) every `ckpt_every_s`; a run resumes from `run_dir/ckpt.safetensors`.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from engine.offline.confidence_ceiling import auc as _auc
from engine.offline.steps import StepData, load_split, make_batch, pack_steps, score_all
from engine.policies.pacer import PreVerifier, PreVerifierConfig, save_weights
from engine.trace.jsonio import atomic_path
from engine.train.pacer.data import batch_loss
from engine.train.loop import train_step


@dataclass(frozen=True)
class PacerTrainConfig:
    data_dir: str = ""  # shards from `pacer data`; empty = $SPECLAB_CACHE/pacer-data
    out: str = "models/pacer-smollm2/pacer.safetensors"  # exported best-held-out weights
    run_dir: str = ""  # checkpoints; empty = $SPECLAB_CACHE/runs/<out stem>
    steps: int = 800  # held-out BCE bottoms out within a few hundred steps; the best step is exported
    batch_rows: int = 8  # packed rows per step
    pack_len: int = 128  # 8+ steps per row; T² attention stays cheap
    lr: float = 1e-3  # 2e-3 overfit a 11k-token pilot set within 25 steps; 1e-3 gives a usable best step
    weight_decay: float = 0.01  # light: dropout does most of the regularisation
    warmup: int = 50  # steps of linear warmup
    labels: str = "prefix"  # post-rejection tokens labelled 0 (see pacer_data); "masked" drops them
    eval_every: int = 50  # held-out evaluation period (steps): early stopping needs a fine grid
    ckpt_every_s: float = 60.0  # checkpoint period
    seed: int = 0  # init + batch order
    threads: int = 1  # the machine is shared; M_B is tiny
    d_model: int = 64  # PreVerifierConfig.d_model
    layers: int = 2  # PreVerifierConfig.layers
    block: int = 4  # PreVerifierConfig.block (block-index encoding)
    use_pos: bool = True  # False = the "no positional encoding" ablation
    use_conf: bool = True  # False = hidden states (+PE) only, as PACER's summary describes
    cumulative: bool = True  # PreVerifierConfig.cumulative (product of conditional acceptances)
    prior: bool = True  # PreVerifierConfig.prior (start at the Π q rule, learn the correction)
    dropout: float = 0.1  # PreVerifierConfig.dropout


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Rank-based ROC AUC (ties get the average rank); NaN if a class is empty (the lab's one AUC,
    engine.offline.confidence_ceiling.auc, on tensors)."""
    return _auc((labels.flatten() > 0.5).cpu().numpy(), scores.double().flatten().cpu().numpy())


def calibration(scores: torch.Tensor, labels: torch.Tensor, bins: int = 10) -> tuple[float, list[dict[str, Any]]]:
    """(ECE, reliability table) over equal-width bins of the predicted acceptance."""
    s, y = scores.double().flatten(), labels.double().flatten()
    idx = (s * bins).long().clamp(0, bins - 1)
    table, ece = [], 0.0
    for b in range(bins):
        m = idx == b
        n = int(m.sum())
        if n:
            ms, my = float(s[m].mean()), float(y[m].mean())
            ece += n / len(s) * abs(ms - my)
            table.append({"bin": f"{b / bins:.1f}-{(b + 1) / bins:.1f}", "n": n, "mean_score": round(ms, 4),
                          "observed": round(my, 4)})
    return ece, table


def evaluate(model: PreVerifier, data: StepData, scheme: str = "prefix") -> dict[str, Any]:
    s = score_all(model, data)
    y, w = data.labels(scheme)
    keep = w > 0
    bce = float(torch.nn.functional.binary_cross_entropy(s[keep].clamp(1e-7, 1 - 1e-7), y[keep]))
    ece, table = calibration(s[keep], y[keep])
    out = {"bce": bce, "auc": auc(s[keep], y[keep]), "ece": ece, "reliability": table, "tokens": int(keep.sum()),
           "base_rate": float(y[keep].mean())}
    # Baselines on the same tokens: raw draft confidence q_i and its running product Π_{j≤i} q_j.
    cum = torch.cat([data.q[a:e].double().cumprod(0) for a, e in zip(data.step_off[:-1].tolist(),
                                                                      data.step_off[1:].tolist())]).float()
    out["auc_q"], out["auc_cumprod_q"] = auc(data.q[keep], y[keep]), auc(cum[keep], y[keep])
    # The HF/SpecDec++ view: only tokens up to and including the first rejection (harder: no "after a
    # rejection" tokens, which are easy to score low).
    _, wm = data.labels("masked")
    km = keep & (wm > 0)
    out["first_rejection_view"] = {"auc": auc(s[km], y[km]), "ece": calibration(s[km], y[km])[0],
                                   "auc_q": auc(data.q[km], y[km]), "auc_cumprod_q": auc(cum[km], y[km]),
                                   "tokens": int(km.sum())}
    temps = torch.repeat_interleave(data.temperature, data.window.long())
    out["by_temperature"] = {str(round(float(t), 3)): {"auc": auc(s[keep & (temps == t)], y[keep & (temps == t)]),
                                             "ece": calibration(s[keep & (temps == t)], y[keep & (temps == t)])[0]}
                             for t in temps.unique().tolist()}
    return out


def _save_ckpt(path: Path, model, opt, step: int, best: float) -> None:
    t = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    for i, p in enumerate(model.parameters()):
        st = opt.state.get(p, {})
        for k in ("exp_avg", "exp_avg_sq"):
            if k in st:
                t[f"opt.{i}.{k}"] = st[k].contiguous()
    with atomic_path(path) as tmp:
        save_file(t, str(tmp), {"step": str(step), "best": repr(best)})


def _load_ckpt(path: Path, model, opt) -> tuple[int, float]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    t = load_file(str(path))
    model.load_state_dict({k[6:]: v for k, v in t.items() if k.startswith("model.")})
    step = int(meta["step"])
    for i, p in enumerate(model.parameters()):
        if f"opt.{i}.exp_avg" in t:
            opt.state[p] = {"step": torch.tensor(float(step)), "exp_avg": t[f"opt.{i}.exp_avg"],
                            "exp_avg_sq": t[f"opt.{i}.exp_avg_sq"]}
    return step, float(meta["best"])


def train(cfg: PacerTrainConfig, progress: bool = True) -> dict[str, Any]:
    """Train M_B; export the best-held-out weights to cfg.out; returns the training summary."""
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    tr, ho = load_split(cfg.data_dir, "train"), load_split(cfg.data_dir, "heldout")
    mcfg = PreVerifierConfig(hidden_size=int(tr.hidden.shape[1]), d_model=cfg.d_model, layers=cfg.layers,
                             block=cfg.block, use_pos=cfg.use_pos, use_conf=cfg.use_conf,
                             cumulative=cfg.cumulative, prior=cfg.prior, dropout=cfg.dropout)
    model = PreVerifier(mcfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    run = Path(cfg.run_dir) if cfg.run_dir else _default_run_dir(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    ckpt, log_path = run / "ckpt.safetensors", run / "log.jsonl"
    step, best = (_load_ckpt(ckpt, model, opt) if ckpt.exists() else (0, math.inf))
    t0, last_ckpt = time.perf_counter(), time.perf_counter()
    order: list[int] = []
    bar = tqdm(total=cfg.steps, initial=step, disable=not progress, desc="pacer train")
    log = open(log_path, "a", encoding="utf-8")
    while step < cfg.steps:
        if len(order) < cfg.batch_rows:  # new epoch: reshuffle steps, then pack in that order
            perm = list(range(tr.n_steps))
            rng.shuffle(perm)
            wins = tr.window.tolist()
            order = [[perm[i] for i in g] for g in pack_steps([wins[i] for i in perm], cfg.pack_len)]
        groups, order = order[: cfg.batch_rows], order[cfg.batch_rows:]
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * (0.55 + 0.45 * math.cos(math.pi * step / cfg.steps))
        model.train()
        loss = batch_loss(model, make_batch(tr, groups, cfg.pack_len, cfg.labels))
        train_step(opt, loss, model.parameters(), lr, 1.0)  # engine.train.loop: the shared step
        step += 1
        bar.update(1)
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}", refresh=False)
        if step % cfg.eval_every == 0 or step == cfg.steps:
            ev = evaluate(model, ho, cfg.labels)
            log.write(json.dumps({"step": step, "train_loss": loss.item(), "heldout_bce": ev["bce"],
                                  "heldout_auc": ev["auc"], "heldout_ece": ev["ece"],
                                  "elapsed_s": round(time.perf_counter() - t0, 1)}) + "\n")
            log.flush()
            if ev["bce"] < best:
                best = ev["bce"]
                save_weights(model, cfg.out, {"step": step, "heldout": {k: ev[k] for k in ("bce", "auc", "ece")}})
        if time.perf_counter() - last_ckpt > cfg.ckpt_every_s:
            _save_ckpt(ckpt, model, opt, step, best)
            last_ckpt = time.perf_counter()
    bar.close()
    log.close()
    _save_ckpt(ckpt, model, opt, step, best)
    from engine.policies.pacer import load_weights
    from engine.train.pacer.data import summary

    final, extra = load_weights(cfg.out)
    ev = evaluate(final, ho, cfg.labels)
    out = {"config": asdict(cfg), "model": asdict(mcfg), "params": final.n_params(), "best_step": extra.get("step"),
           "wall_s": round(time.perf_counter() - t0, 1), "train_data": summary(tr), "heldout_data": summary(ho),
           "heldout": ev, "train_eval": {k: v for k, v in evaluate(final, tr, cfg.labels).items()
                                         if k in ("bce", "auc", "ece")}}
    Path(cfg.out).with_name(Path(cfg.out).stem + ".summary.json").write_text(json.dumps(out, indent=1))
    return out


def _default_run_dir(out: str) -> Path:
    from engine.models.smollm import cache_root

    return cache_root() / "runs" / f"pacer-{Path(out).stem}"


def write_card(summary: dict[str, Any], path: str | Path, command: str, data_manifest: dict[str, Any]) -> None:
    """Model card (markdown) next to the weights: data, steps, wall time, AUC, calibration, retrain."""
    ho, c, m = summary["heldout"], summary["config"], summary["model"]
    rel = "\n".join(f"| {r['bin']} | {r['n']} | {r['mean_score']:.3f} | {r['observed']:.3f} |" for r in ho["reliability"])
    by_t = ", ".join(f"T={t}: AUC {v['auc']:.3f}, ECE {v['ece']:.3f}" for t, v in ho["by_temperature"].items())
    dc = data_manifest.get("config", {})
    text = f"""# PACER pre-verifier for `{data_manifest.get('target', '?')}` + `{data_manifest.get('draft', '?')}`

M_B of `engine/policies/pacer.py`: {m['layers']}-layer causal transformer over one decoding step's drafted tokens,
d = {m['d_model']}, input = LayerNorm'd draft hidden state ({m['hidden_size']}) projected to d
{'+ [log q, H(q)]' if m['use_conf'] else ''} {'+ position-in-draft and block-index (b = ' + str(m['block']) + ') embeddings' if m['use_pos'] else '(no positional encoding)'}.
{summary['params']:,} parameters, fp32 safetensors (config in the metadata).

## Data
Simulated speculative decoding through `engine.decode` with a fixed window γ = {dc.get('window')} on ShareGPT
first user turns (never Spec-Bench), taken from the back of the draft-training shuffle; temperatures
{dc.get('temperatures')} alternating per prompt, {dc.get('max_new_tokens')} new tokens per prompt.
Labels: 1 for drafted tokens up to the verifier's accepted count, 0 for the first rejected token and every token
after it (scheme `{c['labels']}`).

- train: {summary['train_data']['steps']} steps, {summary['train_data']['tokens']} tokens, {summary['train_data']['requests']} prompts (mean accepted {summary['train_data']['mean_accepted']:.2f} of {summary['train_data']['mean_window']:.1f})
- held-out: {summary['heldout_data']['steps']} steps, {summary['heldout_data']['tokens']} tokens, {summary['heldout_data']['requests']} prompts

## Training
BCE, AdamW lr {c['lr']}, {c['steps']} steps of {c['batch_rows']} packed rows × {c['pack_len']} tokens (block-diagonal causal mask),
best held-out BCE at step {summary['best_step']}; wall time {summary['wall_s']:.0f} s on {c['threads']} CPU thread(s).

## Held-out quality
- AUC **{ho['auc']:.3f}**, ECE **{ho['ece']:.3f}**, BCE {ho['bce']:.4f} (base acceptance rate {ho['base_rate']:.3f}); {by_t}
- train: AUC {summary['train_eval']['auc']:.3f}, ECE {summary['train_eval']['ece']:.3f}

| predicted | tokens | mean predicted | observed acceptance |
|---|---|---|---|
{rel}

## Retrain
```
{data_manifest.get('command', 'python -m engine pacer data')}
{command}
```
"""
    Path(path).write_text(text, encoding="utf-8")
