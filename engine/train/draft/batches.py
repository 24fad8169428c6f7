"""The draft's training data: phase-1 shards as sequences, the reduced head's vocabulary, and
length-bucketed batches with their loss targets (engine/train/draft/fit.py trains on them).

A sequence is {"prompt", "gen", "tid", "tlp"}: prompt ids, the target's greedy continuation, and per
generated position the target's top-k ids and log-probs (engine/train/draft/gen.py writes them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.train.draft.gen import load_shard


def load_sequences(paths: list[Path]) -> list[dict]:
    """Flatten shards into per-sequence dicts of numpy arrays."""
    seqs = []
    for p in paths:
        d = load_shard(p)
        po, go = d["prompt_off"], d["gen_off"]
        for i in range(len(po) - 1):
            g0, g1 = int(go[i]), int(go[i + 1])
            if g1 - g0 < 2:
                continue
            seqs.append({
                "prompt": d["prompt_ids"][po[i]:po[i + 1]],
                "gen": d["gen_ids"][g0:g1],
                "tid": d["topk_ids"][g0:g1],
                "tlp": d["topk_logp"][g0:g1],
            })
    return seqs


def train_shards(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob("train-*.safetensors"))


def choose_vocab_subset(seqs: list[dict], n: int, vocab: int, extra_counts: np.ndarray | None = None,
                        always: tuple = (0, 1, 2)) -> torch.LongTensor:
    """The ``n`` tokens the target emits most often, plus special tokens; sorted ascending.

    Greedy tokens count 1; the target's other top-k entries count 1e-3 each (they break ties among
    rare tokens); ``extra_counts`` (token frequencies of ShareGPT assistant text, rescaled to the
    same total) adds a prior that covers tokens the still-small generated set has not shown yet.
    """
    cnt = np.zeros(vocab, dtype=np.float64)
    for s in seqs:
        np.add.at(cnt, s["gen"], 1.0)
        np.add.at(cnt, s["tid"][:, 1:].reshape(-1), 1e-3)
    if extra_counts is not None and extra_counts.sum() > 0:
        cnt += 0.25 * extra_counts * (cnt.sum() / extra_counts.sum())
    cnt[list(always)] = np.inf
    ids = np.argsort(-cnt, kind="stable")[:n]
    return torch.from_numpy(np.sort(ids)).long()


def sharegpt_assistant_counts(tok, vocab: int, exclude_prompts: set[str], max_chars: int = 8_000_000) -> np.ndarray:
    """Token counts over ShareGPT assistant turns (conversations whose first turn is held out are skipped)."""
    from engine.models.sharegpt import load_sharegpt

    cnt = np.zeros(vocab, dtype=np.float64)
    used = 0
    texts = []
    for c in load_sharegpt():
        turns = c.get("conversations") or []
        if turns and (turns[0].get("value") or "").strip() in exclude_prompts:
            continue
        for t in turns:
            if t.get("from") == "gpt" and t.get("value"):
                texts.append(t["value"])
                used += len(t["value"])
        if used >= max_chars:
            break
    for i in range(0, len(texts), 256):
        for ids in tok(texts[i:i + 256], add_special_tokens=False)["input_ids"]:
            np.add.at(cnt, np.asarray(ids, dtype=np.int64), 1.0)
    return cnt


class Batcher:
    """Length-bucketed batches of whole sequences under a padded-token budget, reshuffled per epoch."""

    def __init__(self, seqs: list[dict], batch_tokens: int, max_seq_tokens: int, seed: int, epoch: int = 0):
        self.batch_tokens, self.max_seq, self.seed, self.epoch = batch_tokens, max_seq_tokens, seed, epoch
        self.set_pool(seqs)

    def set_pool(self, seqs: list[dict]) -> None:
        self.seqs = [s for s in seqs if len(s["prompt"]) + len(s["gen"]) - 1 <= self.max_seq]
        self.queue: list[list[int]] = []
        self.consumed = 0

    @property
    def n_batches(self) -> int:
        return len(self.queue)

    def _new_epoch(self) -> None:
        rng = np.random.default_rng([self.seed, self.epoch])
        self.epoch += 1
        order = rng.permutation(len(self.seqs))
        # bucket: sort chunks of 256 by length, cut into budgeted batches, then shuffle batches
        batches = []
        for c in range(0, len(order), 256):
            chunk = sorted(order[c:c + 256], key=lambda i: len(self.seqs[i]["prompt"]) + len(self.seqs[i]["gen"]))
            cur, cur_max = [], 0
            for i in chunk:
                L = len(self.seqs[i]["prompt"]) + len(self.seqs[i]["gen"]) - 1
                if cur and max(cur_max, L) * (len(cur) + 1) > self.batch_tokens:
                    batches.append(cur)
                    cur, cur_max = [], 0
                cur.append(int(i))
                cur_max = max(cur_max, L)
            if cur:
                batches.append(cur)
        rng.shuffle(batches)
        self.queue = batches
        self.consumed = 0

    def next(self) -> list[dict]:
        if not self.queue:
            self._new_epoch()
        self.consumed += 1
        return [self.seqs[i] for i in self.queue.pop()]


def collate(batch: list[dict], vmap: torch.LongTensor, pad_id: int = 2):
    """Right-padded inputs (causal attention needs no mask) and flat loss targets.

    Returns input_ids [B, T], flat positions into [B*T], teacher subset ids/logp [M, k] and the
    greedy token's subset index [M] (-1 when outside the subset).
    """
    B = len(batch)
    T = max(len(s["prompt"]) + len(s["gen"]) - 1 for s in batch)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    flat, tid, tlp, tgt = [], [], [], []
    for b, s in enumerate(batch):
        x = np.concatenate([s["prompt"], s["gen"][:-1]]).astype(np.int64)
        ids[b, :len(x)] = torch.from_numpy(x)
        P, G = len(s["prompt"]), len(s["gen"])
        flat.append(torch.arange(P - 1, P - 1 + G) + b * T)
        tid.append(torch.from_numpy(s["tid"].astype(np.int64)))
        tlp.append(torch.from_numpy(s["tlp"].astype(np.float32)))
        tgt.append(torch.from_numpy(s["gen"].astype(np.int64)))
    tid = torch.cat(tid)
    return ids, torch.cat(flat), vmap[tid], torch.cat(tlp), vmap[torch.cat(tgt)], torch.cat(tgt)
