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

Prompts: ShareGPT first user turns in the draft-training shuffle (engine.train.data, seed 0), taken
from the END of its training list, so the draft's own training prompts (the front) are not reused.

Shards (safetensors, written atomically; a killed run resumes at the next missing shard; several
processes may share one directory, each claiming shards with a lock file):
  hidden f16 [N,H]  q f32 [N]  qmax f32 [N]  ent f32 [N]  h f32 [N]  pos i32 [N] (1-based i)
  (qmax = max_x q_i(x), what M_B reads: equal to q under greedy; shards written before it existed
  fall back to q)
  step_off i64 [S+1]  accepted i32 [S]  window i32 [S]  request i32 [S]  temperature f32 [S]
  t_draft_ms f32 [S]  t_verify_ms f32 [S]  (the recording run's own timings)

Packing. Many steps are concatenated into one training sequence of ≤ `pack_len` tokens (a step is
never split); `step_id` numbers the steps, and `engine.policies.pacer.step_mask` lets token i attend to j iff
both are in the same step and j ≤ i (causal within the step — exactly what M_B sees at inference).
Positions restart at 1 per step, so a packed sequence gives the same per-token logits as each step
run alone (tested: packed and unpacked loss agree to 1e-6 in fp32).
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
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from engine.decode import DecodeConfig, decode
from engine.policies.pacer import step_mask
from engine.policies.base import DraftInfo, WindowPolicy
from engine.core.sampling import SamplingConfig


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


def _shard_tensors(reqs: list[tuple[int, float, dict[str, list]]]) -> dict[str, torch.Tensor]:
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


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path, meta: dict[str, str] | None = None) -> None:
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), meta)
    os.replace(tmp, path)


def default_data_dir() -> Path:
    from engine.core.smollm import cache_root

    return cache_root() / "pacer-data"


def pacer_prompts(tok, n_train: int, n_heldout: int, max_prompt_tokens: int) -> tuple[list, list]:
    """(train, heldout) token-id prompts from the back of the draft-training ShareGPT shuffle."""
    from engine.train.data import chat_prompt_ids, first_user_turns, load_sharegpt, split_prompts
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
        _atomic_save(_shard_tensors(reqs), path, {"format": "speclab.pacer-data", "version": "1"})
        path.with_name(path.name + ".lock").unlink(missing_ok=True)
    bar.close()
    return out


# ---------------------------------------------------------------- loading + packing


@dataclass
class StepData:
    """All steps of some shards, concatenated. Token arrays [N], step arrays [S]."""

    hidden: torch.Tensor
    q: torch.Tensor
    ent: torch.Tensor
    h: torch.Tensor
    pos: torch.Tensor
    step_off: torch.Tensor
    accepted: torch.Tensor
    window: torch.Tensor
    request: torch.Tensor
    temperature: torch.Tensor
    t_draft_ms: torch.Tensor | None = None  # real-loop timings of the recording steps
    t_verify_ms: torch.Tensor | None = None
    qmax: torch.Tensor | None = None  # max_x q_i(x) per token (= q under greedy); older shards lack it

    @property
    def mb_conf(self) -> torch.Tensor:
        """The confidence M_B reads: the draft's pre-sample confidence max_x q_i(x), as the policy sees it."""
        return self.q if self.qmax is None else self.qmax

    @property
    def n_steps(self) -> int:
        return int(self.window.numel())

    def labels(self, scheme: str = "prefix") -> tuple[torch.Tensor, torch.Tensor]:
        """(label [N], weight [N]): prefix = post-rejection tokens are 0; masked = they get weight 0."""
        acc = torch.repeat_interleave(self.accepted.long(), self.window.long())
        y = (self.pos.long() <= acc).float()
        if scheme == "prefix":
            return y, torch.ones_like(y)
        if scheme == "masked":
            return y, (self.pos.long() <= acc + 1).float()
        raise ValueError(f"unknown label scheme {scheme!r}; choose prefix or masked")


def load_steps(paths: list[Path]) -> StepData:
    if not paths:
        raise FileNotFoundError("no PACER data shards found (generate them: python -m engine pacer data)")
    parts = [load_file(str(p)) for p in sorted(paths)]
    cat = {k: torch.cat([d[k] for d in parts]) for k in parts[0] if k != "step_off"}
    return StepData(step_off=torch.cat([torch.zeros(1, dtype=torch.int64),
                                        torch.cumsum(cat["window"].long(), 0)]), **cat)


def load_split(data_dir: str | Path, split: str) -> StepData:
    d = Path(data_dir) if data_dir else default_data_dir()
    return load_steps(sorted(d.glob(f"{split}-*.safetensors")))


def pack_steps(windows: list[int], pack_len: int) -> list[list[int]]:
    """Greedy in-order packing: groups of step indices whose windows sum to ≤ pack_len."""
    groups, cur, n = [], [], 0
    for i, w in enumerate(windows):
        if w > pack_len:
            raise ValueError(f"a step of {w} tokens does not fit pack_len={pack_len}")
        if n + w > pack_len:
            groups.append(cur)
            cur, n = [], 0
        cur.append(i)
        n += w
    if cur:
        groups.append(cur)
    return groups


def make_batch(data: StepData, groups: list[list[int]], length: int, scheme: str = "prefix") -> dict[str, torch.Tensor]:
    """Batch [B, length] from groups of steps (one group = one packed row; one step per group = unpacked)."""
    B, H = len(groups), data.hidden.shape[1]
    y_all, w_all = data.labels(scheme)
    hidden = torch.zeros(B, length, H)
    out = {k: torch.zeros(B, length) for k in ("logq", "ent", "label", "weight")}
    pos = torch.zeros(B, length, dtype=torch.long)
    sid = torch.full((B, length), -1, dtype=torch.long)
    for b, g in enumerate(groups):
        n = 0
        for j, s in enumerate(g):
            a, e = int(data.step_off[s]), int(data.step_off[s + 1])
            sl = slice(n, n + e - a)
            hidden[b, sl] = data.hidden[a:e].float()
            out["logq"][b, sl] = data.mb_conf[a:e].clamp_min(1e-6).log()
            out["ent"][b, sl] = data.ent[a:e]
            out["label"][b, sl] = y_all[a:e]
            out["weight"][b, sl] = w_all[a:e]
            pos[b, sl] = data.pos[a:e].long()
            sid[b, sl] = j
            n += e - a
    return {"hidden": hidden, "pos": pos, "mask": step_mask(sid), **out}


def batch_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """BCE over labelled tokens: Σ w·BCE(σ(logit), y) / Σ w."""
    logits = model(batch["hidden"], batch["logq"], batch["ent"], batch["pos"], batch["mask"])
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["label"], reduction="none")
    return (bce * batch["weight"]).sum() / batch["weight"].sum().clamp_min(1.0)


@torch.no_grad()
def score_all(model, data: StepData, pack_len: int = 256, batch_rows: int = 32) -> torch.Tensor:
    """σ(logit) for every token of `data` (causal per step = the policy's view), in token order."""
    model.eval()
    groups = pack_steps(data.window.tolist(), pack_len)
    out = torch.empty(data.q.shape[0])
    for i in range(0, len(groups), batch_rows):
        gs = groups[i:i + batch_rows]
        b = make_batch(data, gs, pack_len)
        s = model(b["hidden"], b["logq"], b["ent"], b["pos"], b["mask"]).sigmoid()
        for r, g in enumerate(gs):
            a, e = int(data.step_off[g[0]]), int(data.step_off[g[-1] + 1])
            out[a:e] = s[r, : e - a]
    return out


def summary(data: StepData) -> dict[str, Any]:
    acc = data.accepted.float()
    return {"steps": data.n_steps, "tokens": int(data.q.numel()), "mean_accepted": float(acc.mean()),
            "mean_window": float(data.window.float().mean()),
            "greedy_steps": int((data.temperature == 0).sum()), "requests": int(data.request.unique().numel())}
