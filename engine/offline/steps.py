"""Recorded fixed-window steps (PACER's held-out data): the shard format, loading, packing, M_B scoring.

The shards are written by PACER's data recorder (train/pacer/data.py: the real decode loop with a
fixed window W = 16); this module is everything that *reads* them, so the offline sweep
(engine.offline.pacer_sweep) and training share one reader, and analysis never imports training code.

Notation: step s drafted W_s tokens, i = 1..W_s a token's position in its step, n_s the verifier's
accepted count (excludes the bonus token). Per token: h_i draft hidden state, q_i = q_i(x_i),
qmax_i = max_x q_i(x) (what M_B reads; = q_i under greedy), H_i = H(q_i), s_i = M_B's score.

Shard (safetensors):
  hidden f16 [N,H]  q f32 [N]  qmax f32 [N]  ent f32 [N]  h f32 [N]  pos i32 [N] (1-based i)
  (shards written before qmax existed fall back to q)
  step_off i64 [S+1]  accepted i32 [S]  window i32 [S]  request i32 [S]  temperature f32 [S]
  t_draft_ms f32 [S]  t_verify_ms f32 [S]  (the recording run's own timings)

Packing. Many steps are concatenated into one sequence of ≤ `pack_len` tokens (a step is never
split); `step_id` numbers the steps, and `engine.policies.pacer.step_mask` lets token i attend to j
iff both are in the same step and j ≤ i (causal within the step — exactly what M_B sees at
inference). Positions restart at 1 per step, so a packed sequence gives the same per-token logits as
each step run alone. Training batches and `score_all` use the same packing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from engine.offline.replay import RecordedStep
from engine.policies.pacer import step_mask


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
        """(label [N], weight [N]): label_i = 1 iff i ≤ n. prefix = post-rejection tokens are 0 (what a
        block's mean score should estimate, see train/pacer/data.py); masked = they get weight 0."""
        acc = torch.repeat_interleave(self.accepted.long(), self.window.long())
        y = (self.pos.long() <= acc).float()
        if scheme == "prefix":
            return y, torch.ones_like(y)
        if scheme == "masked":
            return y, (self.pos.long() <= acc + 1).float()
        raise ValueError(f"unknown label scheme {scheme!r}; choose prefix or masked")


def default_data_dir() -> Path:
    from engine.models.smollm import cache_root

    return cache_root() / "pacer-data"


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


def score_models(data: StepData, models: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Every token's M_B score under each model, by tag (the sweep replays each tag's scores)."""
    return {tag: score_all(m, data) for tag, m in models.items()}


def steps_from(data: StepData, scores: dict[str, torch.Tensor]) -> list[RecordedStep]:
    """The replay's view of the recorded steps: plain Python lists, M_B scores per tag."""
    out = []
    for i in range(data.n_steps):
        a, e = int(data.step_off[i]), int(data.step_off[i + 1])
        out.append(RecordedStep(int(data.accepted[i]), int(data.window[i]), data.q[a:e].tolist(),
                                data.ent[a:e].tolist(), {k: v[a:e].tolist() for k, v in scores.items()},
                                int(data.request[i]), float(data.temperature[i])))
    return out
