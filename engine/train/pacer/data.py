"""PACER training data by simulated decoding, and the packed batches M_B trains on.

Data. The real decode generator runs speculative decoding with a FIXED window γ = `window` (16, the
policy's max length) on ShareGPT prompts (never Spec-Bench). A recording policy keeps, for every
drafted token i of every step, the draft's last-layer hidden state h_i (fp16), q_i(x_i) and H(q_i).
The verifier's decision gives the step's accepted count n (excludes the bonus token), and

    label_i = 1  if i ≤ n   (token i and its whole prefix accepted)
    label_i = 0  if i > n   (the first rejected token AND every token after it)

Post-rejection tokens are labelled rejected rather than dropped (the HF/SpecDec++ convention drops
them): the pre-verifier sees such tokens at inference inside any block that straddles a rejection,
and with these labels a block's mean score estimates the expected accepted fraction of the block,
which is what the stop rule thresholds. `labels="masked"` reproduces the drop convention.
Greedy: accepted iff draft token == target argmax. Sampling (T > 0): the verifier's own accept
decision u_i < min(1, p_i/q_i) with the run's seeded uniforms; h_i is stored too (soft labels).

Prompts: ShareGPT first user turns in the draft-training shuffle (engine.models.sharegpt, seed 0), taken
from the END of its training list, so the draft's own training prompts (the front) are not reused.

Shards (safetensors, written atomically; a killed run resumes at the next missing shard; several
processes may share one directory, each claiming shards with a lock file). Their fields, the reader
(StepData, load_split) and the packing of steps into training sequences (pack_steps, make_batch;
packed and unpacked loss agree to 1e-6 in fp32) live in engine.offline.steps, which the offline
sweep shares: analysis never imports training code, training imports the reader.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file
from tqdm import tqdm

from engine.core.sampling import SamplingConfig
from engine.decode import DecodeConfig, decode
from engine.offline.steps import StepData, default_data_dir
from engine.policies.base import DraftInfo, WindowPolicy
from engine.trace.jsonio import atomic_path


@dataclass(frozen=True)
class PacerDataConfig:
    out_dir: str = ""  # empty = $SPECLAB_CACHE/pacer-data
    n_train: int = 96  # train prompts: ~3k steps / ~45k drafted tokens at 128 new tokens each
    n_heldout: int = 24  # held-out prompts for AUC/ECE and the sweep (~800 steps)
    window: int = 16  # fixed γ = the policy's max length, so every block a policy may score is recorded
    max_new_tokens: int = 128  # as in the draft's training data
    max_prompt_tokens: int = 320  # long ShareGPT prompts make prefill dominate; ~80% fit
    temperatures: tuple[float, ...] = (0.0, 0.7)  # request r uses temperatures[r % len]: the bench's two modes
    shard_prompts: int = 8  # prompts per shard: a kill loses ~1 minute; two workers stay balanced
    seed: int = 0  # sampling seed of the simulated decoding


class Recorder(WindowPolicy):
    """Fixed window γ that records every DraftInfo of the current step (hidden state included)."""

    name = "record"
    needs_hidden = True

    def __init__(self, window: int = 16) -> None:
        super().__init__(window)
        self.buf: list[DraftInfo] = []

    def propose(self) -> int:
        self.buf = []
        return self.max_window

    def keep_drafting(self, info: DraftInfo) -> bool:
        if info.hidden is None:
            raise ValueError("recording needs the draft's hidden states: load the draft with want_hidden=True")
        self.buf.append(DraftInfo(info.index, info.token, info.q_token, info.entropy,
                                  info.hidden.detach().to("cpu", torch.float16), info.q_max))
        return True


def record_request(target, draft, prompt_ids: list[int], window: int, cfg: DecodeConfig, eos=(),
                   request_id: int = 0) -> dict[str, list]:
    """Decode one prompt with the recorder; per-step and per-token lists (empty steps skipped)."""
    rec = Recorder(window)
    out: dict[str, list] = {k: [] for k in ("hidden", "q", "qmax", "ent", "h", "pos", "accepted", "window",
                                            "t_draft_ms", "t_verify_ms")}
    for step in decode(target, draft, prompt_ids, rec, cfg, eos_ids=eos, request_id=request_id):
        if not step.window:
            continue
        assert len(rec.buf) == step.window, "recorder and decode loop disagree on the window"
        out["hidden"].extend(d.hidden for d in rec.buf)
        out["q"].extend(d.q_token for d in rec.buf)
        out["qmax"].extend(d.q_token if d.q_max is None else d.q_max for d in rec.buf)
        out["ent"].extend(d.entropy for d in rec.buf)
        out["h"].extend(step.accept_probs)
        out["pos"].extend(range(1, step.window + 1))
        out["accepted"].append(step.accepted)
        out["window"].append(step.window)
        out["t_draft_ms"].append(step.t_draft_ms)
        out["t_verify_ms"].append(step.t_verify_ms)
    return out


def shard_tensors(reqs: list[tuple[int, float, dict[str, list]]]) -> dict[str, torch.Tensor]:
    """One shard's tensors from (request id, temperature, record_request output) triples: per-token
    columns concatenated, `step_off` the offsets of each recorded step's tokens."""
    hid, q, qmax, ent, h, pos, acc, win, rid, temp, td, tv = [], [], [], [], [], [], [], [], [], [], [], []
    for r, t, d in reqs:
        hid.extend(d["hidden"]); q.extend(d["q"]); ent.extend(d["ent"]); h.extend(d["h"]); pos.extend(d["pos"])
        qmax.extend(d.get("qmax", d["q"]))
        acc.extend(d["accepted"]); win.extend(d["window"]); td.extend(d["t_draft_ms"]); tv.extend(d["t_verify_ms"])
        rid.extend([r] * len(d["window"])); temp.extend([t] * len(d["window"]))
    off = np.concatenate([[0], np.cumsum(win)]).astype(np.int64)
    return {"hidden": torch.stack(hid).contiguous(), "q": torch.tensor(q, dtype=torch.float32),
            "qmax": torch.tensor(qmax, dtype=torch.float32), "ent": torch.tensor(ent, dtype=torch.float32), "h": torch.tensor(h, dtype=torch.float32),
            "pos": torch.tensor(pos, dtype=torch.int32), "step_off": torch.from_numpy(off),
            "accepted": torch.tensor(acc, dtype=torch.int32), "window": torch.tensor(win, dtype=torch.int32),
            "request": torch.tensor(rid, dtype=torch.int32), "temperature": torch.tensor(temp, dtype=torch.float32),
            "t_draft_ms": torch.tensor(td, dtype=torch.float32), "t_verify_ms": torch.tensor(tv, dtype=torch.float32)}


def save_shard(tensors: dict[str, torch.Tensor], path: Path, meta: dict[str, str] | None = None) -> None:
    """Write a shard as safetensors atomically (a killed run never leaves a half-written shard)."""
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), meta)


def pacer_prompts(tok, n_train: int, n_heldout: int, max_prompt_tokens: int) -> tuple[list, list]:
    """(train, heldout) token-id prompts from the back of the draft-training ShareGPT shuffle."""
    from engine.models.sharegpt import chat_prompt_ids, first_user_turns, load_sharegpt, split_prompts
    from engine.train.draft.gen import GenConfig

    g = GenConfig()
    _, train = split_prompts(first_user_turns(load_sharegpt()), g.n_heldout, g.seed)
    picked: list[list[int]] = []
    for text in reversed(train):
        ids = chat_prompt_ids(tok, text)
        if len(ids) <= max_prompt_tokens:
            picked.append(ids)
        if len(picked) == n_train + n_heldout:
            break
    return picked[n_heldout:], picked[:n_heldout]


def _claim(path: Path, stale_s: float = 600.0) -> bool:
    """Claim a shard with an O_EXCL lock file, so several processes can fill one directory.
    A lock older than `stale_s` (a killed worker) is taken over."""
    lock = path.with_name(path.name + ".lock")
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        if path.exists():  # another worker finished it between our check and the claim
            lock.unlink(missing_ok=True)
            return False
        return True
    except FileExistsError:
        if time.time() - lock.stat().st_mtime > stale_s:
            lock.touch()
            return True
        return False


def generate(cfg: PacerDataConfig, target, draft, tok, eos=(), costs: dict | None = None,
             splits: tuple[str, ...] = ("heldout", "train")) -> Path:
    """Write train/heldout shards for (target, draft) into cfg.out_dir; returns the directory.

    `splits` limits the work to some splits, so two single-thread processes can share a 2-core box."""
    out = Path(cfg.out_dir) if cfg.out_dir else default_data_dir()
    out.mkdir(parents=True, exist_ok=True)
    train, held = pacer_prompts(tok, cfg.n_train, cfg.n_heldout, cfg.max_prompt_tokens)
    jobs = []
    for split, prompts in (("heldout", held), ("train", train)):
        if split not in splits:
            continue
        for s in range(0, len(prompts), cfg.shard_prompts):
            jobs.append((out / f"{split}-{s // cfg.shard_prompts:05d}.safetensors", prompts[s:s + cfg.shard_prompts],
                         s + (0 if split == "heldout" else 10_000)))
    manifest = {"config": asdict(cfg), "target": target.name, "draft": draft.name, "costs": costs or {},
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if costs or not (out / "manifest.json").exists():
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    bar = tqdm(total=sum(len(p) for _, p, _ in jobs), unit="prompt", desc="pacer data")
    for path, prompts, base in jobs:
        if path.exists() or not _claim(path):
            bar.update(len(prompts))
            continue
        reqs = []
        for j, ids in enumerate(prompts):
            rid = base + j
            temp = cfg.temperatures[rid % len(cfg.temperatures)]
            dc = DecodeConfig(max_new_tokens=cfg.max_new_tokens,
                              sampling=SamplingConfig(temperature=temp, seed=cfg.seed))
            reqs.append((rid, temp, record_request(target, draft, ids, cfg.window, dc, eos, rid)))
            bar.update(1)
        save_shard(shard_tensors(reqs), path, {"format": "speclab.pacer-data", "version": "1"})
        path.with_name(path.name + ".lock").unlink(missing_ok=True)
    bar.close()
    return out


def batch_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """BCE over labelled tokens: Σ w·BCE(σ(logit), y) / Σ w."""
    logits = model(batch["hidden"], batch["logq"], batch["ent"], batch["pos"], batch["mask"])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["label"], reduction="none")
    return (bce * batch["weight"]).sum() / batch["weight"].sum().clamp_min(1.0)


def summary(data: StepData) -> dict[str, Any]:
    acc = data.accepted.float()
    return {"steps": data.n_steps, "tokens": int(data.q.numel()), "mean_accepted": float(acc.mean()),
            "mean_window": float(data.window.float().mean()),
            "greedy_steps": int((data.temperature == 0).sum()), "requests": int(data.request.unique().numel())}
