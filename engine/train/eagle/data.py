"""Training and held-out data of the EAGLE-style head, read from the feature shards of one run.

The shards (engine.train.blockdata.shards) hold, per token t of each sequence, the target's features at
the dataset's layers and target_next[t], the target's argmax next token (on every position when the
extractor ran with label_prompt). The head reads a subset of those layers; for position t:

    input  E x_{t+1}, f_t[target_layers]          (t = 0 … n − 2)
    label  target_next[t + 1]  (what the target would emit at t + 2), in draft-vocabulary ids; −100 where
           the target's token is outside the draft vocabulary or was not labelled

`EagleData` keeps only the columns it needs (bf16), so 400 k tokens of a 3-layer head hold ~3.7 GB.
Layers the dataset lacks, another target or another hidden size: one line naming the directory and
the mismatch before any tensor is read (engine.train.blockdata.shards checks each shard's file).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from engine.train.blockdata.shards import ShardError, dataset_spec, list_shards, load_shard, read_manifest, sequences

IGNORE = -100


@dataclass
class EagleSeq:
    ids: torch.Tensor  # [n] long
    feats: torch.Tensor  # [n, K·D] bf16, the head's layers only
    labels: torch.Tensor  # [n] long: draft-vocabulary id of target_next[t + 1], IGNORE where none
    plen: int  # first answer position

    def __len__(self) -> int:
        return int(self.ids.numel())


def layer_columns(data_layers: tuple, want: tuple, hidden: int, where: str) -> torch.Tensor:
    missing = [l for l in want if l not in data_layers]
    if missing:
        raise ShardError(f"{where}: the head reads target layers {list(want)}, the features hold "
                         f"{list(data_layers)} (missing {missing})")
    return torch.cat([torch.arange(data_layers.index(l) * hidden, (data_layers.index(l) + 1) * hidden) for l in want])


def _seqs(d: dict, cols: torch.Tensor, lut: torch.Tensor) -> list[EagleSeq]:
    out = []
    for s, e, p in sequences(d):
        ids = d["ids"][s:e].long()
        tn = d["target_next"][s:e].long()
        lab = torch.full_like(ids, IGNORE)
        nxt = tn[1:]
        ok = nxt >= 0
        lab[:-1][ok] = lut[nxt[ok]]
        lab[lab < 0] = IGNORE
        out.append(EagleSeq(ids, d["feats"][s:e][:, cols].contiguous(), lab, int(p)))
    return out


class EagleData:
    """Train sequences in shard order (a budget of positions: the first `max_tokens` of the stream) and
    the held-out sequences (the target's greedy answers)."""

    def __init__(self, root: str | Path, target: str, layers: tuple, subset: torch.Tensor, max_tokens: int = 0,
                 max_shards: int = 0) -> None:
        root = Path(root)
        spec = dataset_spec(root)
        if spec.target != target:
            raise ShardError(f"{root}/dataset.json: features of target {spec.target!r}, the head is for {target!r}")
        self.spec = spec
        cols = layer_columns(spec.layers, tuple(layers), spec.hidden_size, f"{root}/dataset.json")
        lut = torch.full((spec.vocab_size,), -1, dtype=torch.long)
        lut[subset] = torch.arange(subset.numel())
        self.lut = lut
        shards = list_shards(root, "train")
        if max_shards:
            shards = shards[:max_shards]
        if not shards:
            raise ShardError(f"{root / 'train-00000.safetensors'}: missing shard (no training data yet)")
        for p in shards:
            read_manifest(p, spec)  # every mismatch reported before a tensor is read
        held = root / "heldout-00000.safetensors"
        read_manifest(held, spec)
        self.root, self.shards, self.train = root, [], []
        n = 0
        for p in shards:
            self.train += _seqs(load_shard(p, spec), cols, lut)
            self.shards.append(p)
            n = sum(len(s) for s in self.train)
            if max_tokens and n >= max_tokens:
                break
        if max_tokens and n < max_tokens:
            raise ShardError(f"{root}: {n} tokens in {len(shards)} complete shards, fewer than the {max_tokens} "
                             "asked for (let the extractor run longer or lower the budget)")
        self.held = _seqs(load_shard(held, spec), cols, lut)
        self.tokens = n
        self.labelled = sum(int((s.labels != IGNORE).sum()) for s in self.train)


def batches(seqs: list[EagleSeq], batch_tokens: int, gen: torch.Generator) -> list[list[int]]:
    """Sequence indices grouped into padded batches of ≤ batch_tokens (rows × longest row), shuffled:
    lengths are sorted within windows of 64 sequences so padding stays small."""
    perm = torch.randperm(len(seqs), generator=gen).tolist()
    out: list[list[int]] = []
    for w in range(0, len(perm), 64):
        win = sorted(perm[w:w + 64], key=lambda i: len(seqs[i]))
        cur: list[int] = []
        for i in win:
            L = max([len(seqs[j]) for j in cur] + [len(seqs[i])])
            if cur and (len(cur) + 1) * L > batch_tokens:
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
    order = torch.randperm(len(out), generator=gen).tolist()
    return [out[i] for i in order]


def pad(seqs: list[EagleSeq], feat_dim: int):
    """ids [b, S] long, feats [b, S, K·D] bf16, labels [b, S] long (IGNORE on padding), lengths [b]."""
    S = max(len(s) for s in seqs)
    b = len(seqs)
    ids = torch.zeros(b, S, dtype=torch.long)
    feats = torch.zeros(b, S, feat_dim, dtype=torch.bfloat16)
    lab = torch.full((b, S), IGNORE, dtype=torch.long)
    for i, s in enumerate(seqs):
        n = len(s)
        ids[i, :n], feats[i, :n], lab[i, :n] = s.ids, s.feats, s.labels
    return ids, feats, lab, torch.tensor([len(s) for s in seqs])
