"""Feature shards in memory for training: sequences, labels, batches and the reduced head.

`ShardData(root, spec, max_answer_tokens)` loads the held-out shard and the first train shards up to
an answer-token budget (a data budget is a prefix of the shard list, so budgets nest: the 100k run's
data is part of the 300k run's). Every shard is checked first (engine.train.blockdata.shards): a
missing, incomplete or mismatched shard is a one-line error naming it, before any training step.

Labels. Block position k of anchor a predicts the token at a + k. With the target's own answers
(greedy data) that is ids[a + k]. With existing answers (teacher forcing) the label is the target's
prediction there, y[t] = target_next[t − 1]: the drafter learns to propose what the target would
emit, which is what verification accepts (labels = "data" trains on the answer text instead).
"""

from __future__ import annotations

from pathlib import Path

import torch

from engine.train.blockdata.shards import FeatureSpec, ShardError, list_shards, load_shard, read_manifest, sequences

LABELS = ("target", "data")


class Seq:
    __slots__ = ("ids", "labels", "feats", "plen")

    def __init__(self, ids: torch.Tensor, labels: torch.Tensor, feats: torch.Tensor, plen: int) -> None:
        self.ids, self.labels, self.feats, self.plen = ids, labels, feats, plen

    def __len__(self) -> int:
        return int(self.ids.numel())


def _seqs(d: dict, labels: str) -> list[Seq]:
    out = []
    for s, e, p in sequences(d):
        ids = d["ids"][s:e].long()
        y = ids.clone()
        if labels == "target":
            tn = d["target_next"][s:e].long()
            y[p:] = tn[p - 1:-1]  # the target's argmax at t − 1 is its choice for position t
        out.append(Seq(ids, y, d["feats"][s:e], p))
    return out


class ShardData:
    """Train sequences (up to a budget of answer tokens) and the held-out sequences of a data dir."""

    def __init__(self, root: str | Path, spec: FeatureSpec, max_answer_tokens: int = 0, labels: str = "target",
                 max_len: int = 0) -> None:
        if labels not in LABELS:
            raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
        root = Path(root)
        shards = list_shards(root, "train")
        held = root / "heldout-00000.safetensors"
        if not shards:
            raise ShardError(f"{root / 'train-00000.safetensors'}: missing shard (no training data: run "
                             "`python -m engine dpace extract-qwen`)")
        use, tot = [], 0
        for p in shards:  # manifests first: every mismatch is reported before a tensor is read
            m = read_manifest(p, spec)
            use.append(p)
            tot += m["answer_tokens"]
            if max_answer_tokens and tot >= max_answer_tokens:
                break
        if max_answer_tokens and tot < max_answer_tokens:
            raise ShardError(f"{root}: {tot} answer tokens in {len(shards)} complete shards, fewer than the "
                             f"{max_answer_tokens} asked for (let the extractor run longer or lower the budget)")
        read_manifest(held, spec)
        self.root, self.spec, self.shards = root, spec, use
        self.train: list[Seq] = []
        for p in use:
            self.train += _seqs(load_shard(p, spec), labels)
        self.held = _seqs(load_shard(held, spec), "data")  # greedy answers: the ids are the target's tokens
        if max_len:
            self.train = [s for s in self.train if len(s) <= max_len]
        self.answer_tokens = sum(len(s) - s.plen for s in self.train)

    def vocab_subset(self) -> torch.Tensor:
        """The reduced head: every label of every training answer position (lossless for decoding; a
        target token outside it is never drafted, which costs acceptance only)."""
        ids = torch.cat([s.labels[s.plen:] for s in self.train])
        return torch.unique(ids)

    def check_mask(self, mask_id: int) -> None:
        for s in self.train + self.held:
            if bool((s.ids == mask_id).any()):
                raise ShardError(f"{self.root}: the mask token id {mask_id} occurs in the data; pick another")


def pad_batch(seqs: list[Seq], feat_dim: int, pad_id: int = 0):
    """Right-padded ids, labels [b, S] long, feats [b, S, K·D] float32, prompt lengths and lengths [b]."""
    S = max(len(s) for s in seqs)
    b = len(seqs)
    ids = torch.full((b, S), pad_id, dtype=torch.long)
    lab = torch.full((b, S), pad_id, dtype=torch.long)
    feats = torch.zeros(b, S, feat_dim)
    for i, s in enumerate(seqs):
        n = len(s)
        ids[i, :n], lab[i, :n], feats[i, :n] = s.ids, s.labels, s.feats.float()
    plen = torch.tensor([s.plen for s in seqs])
    ln = torch.tensor([len(s) for s in seqs])
    return ids, lab, feats, plen, ln


def load_embed_head(model_dir: str | Path) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The target's embedding and LM head (read straight from model.safetensors: the 1.5B target's
    other weights are not needed to train its drafter) and its config.json."""
    import json

    from safetensors import safe_open

    d = Path(model_dir)
    cfg = json.loads((d / "config.json").read_text())
    files = sorted(d.glob("*.safetensors"))
    want = {"model.embed_tokens.weight": None, "lm_head.weight": None}
    for f in files:
        with safe_open(str(f), "pt") as h:
            for k in want:
                if want[k] is None and k in h.keys():
                    want[k] = h.get_tensor(k)
    if want["model.embed_tokens.weight"] is None:
        raise FileNotFoundError(f"{d}: no model.embed_tokens.weight in its safetensors files")
    if want["lm_head.weight"] is None:  # tied embeddings
        want["lm_head.weight"] = want["model.embed_tokens.weight"]
    return want["model.embed_tokens.weight"], want["lm_head.weight"], cfg
