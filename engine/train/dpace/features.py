"""What a block drafter trains and is scored on: token ids with the target's cached hidden features
(`FeatureData`), the anchors its blocks start from, and the offline τ (exact greedy acceptance on
held-out target-greedy sequences).

The features are computed once per data directory and layer choice and cached next to the data
(written atomically: a kill while saving leaves no half cache to load next time).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from engine.trace.jsonio import atomic_path


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
            with atomic_path(cache) as tmp:
                torch.save({"train": self.train_feats, "held": self.held_feats}, tmp)

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
