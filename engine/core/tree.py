"""One target pass that scores all K draft blocks: `TreeTarget(lm, mode)` over an HFModel.

The decode loop calls the target protocol (engine.core.target): `score_paths(last, blocks)` and
`commit(...)`, which TreeTarget implements with `score_tree(last, blocks)` and `commit_tree(chosen,
accepted)` for K > 1; every other call is forwarded to the wrapped LM, so K = 1 steps and prefill
are unchanged.

Target cache before a step holds x[:S−1]; the step feeds x[S−1] (`last`) and the drafts, and
`commit_tree` must leave exactly x[:S+accepted] (the accepted prefix of block `chosen`).

    mode "batch": replicate the KV cache K ways, one forward of [K, γ+1]; commit keeps row `chosen`
                  and crops.  Cost: K·(γ+1) query tokens.
    mode "tree":  merge the blocks into a token trie (shared prefixes once), one forward of
                  [1, 1 + #nodes] with a tree attention mask (each node sees the cache, the root
                  `last`, its ancestors and itself) and position ids S−1+depth; commit gathers the
                  chosen path's KV entries back into a plain prefix.  Cost: 1 + #unique prefixes.

Worked example: blocks [5, 7] and [5, 9] → trie nodes (5), (5,7), (5,9); input [last, 5, 7, 9]
with positions [S−1, S, S+1, S+1]; node (5,9) attends to last and 5 but not 7. Block 0's target rows
are the logits at [last, (5), (5,7)], block 1's at [last, (5), (5,9)].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TreeConfig:
    mode: str = "tree"  # shared prefixes scored once; "batch" is the simpler alternative (see docs/benchmarks.md)

    def __post_init__(self) -> None:
        if self.mode not in ("tree", "batch"):
            raise ValueError(f"tree scoring mode must be tree or batch, got {self.mode!r}")


def build_trie(blocks: list[list[int]]) -> tuple[list[tuple[int, ...]], list[list[int]]]:
    """Unique non-empty prefixes in first-seen order, and for each block the node index of each of its
    prefixes of length 1..γ."""
    index: dict[tuple[int, ...], int] = {}
    nodes: list[tuple[int, ...]] = []
    paths = []
    for b in blocks:
        path = []
        for i in range(1, len(b) + 1):
            key = tuple(int(t) for t in b[:i])
            if key not in index:
                index[key] = len(nodes)
                nodes.append(key)
            path.append(index[key])
        paths.append(path)
    return nodes, paths


def tree_mask(nodes: list[tuple[int, ...]], past: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask [1, 1, N, past+N] (N = 1 + #nodes; row 0 is the root) — 0 attends, −inf does not."""
    n = 1 + len(nodes)
    allow = torch.zeros(n, past + n, dtype=torch.bool)
    allow[:, : past + 1] = True  # cache and root
    pos = {node: i + 1 for i, node in enumerate(nodes)}
    for i, node in enumerate(nodes):
        for d in range(1, len(node) + 1):
            allow[i + 1, past + pos[node[:d]]] = True
    mask = torch.zeros(n, past + n, dtype=dtype)
    mask.masked_fill_(~allow, torch.finfo(dtype).min)
    return mask[None, None]


def _layers(cache):
    """(keys, values) tensors per layer, for the DynamicCache layouts we support."""
    if hasattr(cache, "layers"):
        return [(layer, "keys", "values") for layer in cache.layers]
    return [(cache, ("key_cache", i), ("value_cache", i)) for i in range(len(cache.key_cache))]


def _get(obj, attr):
    return getattr(obj, attr) if isinstance(attr, str) else getattr(obj, attr[0])[attr[1]]


def _set(obj, attr, value) -> None:
    if isinstance(attr, str):
        setattr(obj, attr, value)
    else:
        getattr(obj, attr[0])[attr[1]] = value


class TreeTarget:
    """An HFModel target that scores K draft blocks in one forward."""

    def __init__(self, lm, cfg: TreeConfig = TreeConfig()) -> None:
        self.lm = lm
        self.cfg = cfg
        self._pending = None

    def __getattr__(self, name):  # everything else (extend, crop, reset, vocab_size, …) is the LM's
        return getattr(self.lm, name)

    @property
    def length(self) -> int:
        return self.lm.length

    def score_paths(self, last: int, blocks: list[list[int]]) -> list[torch.Tensor]:
        return self.lm.score_paths(last, blocks) if len(blocks) == 1 else self.score_tree(last, blocks)

    def commit(self, keep_len: int, last: int, blocks: list[list[int]], chosen: int, accepted: int) -> None:
        if len(blocks) == 1:
            self.lm.crop(keep_len)
        else:
            self.commit_tree(chosen, accepted)

    @torch.inference_mode()
    def score_tree(self, last: int, blocks: list[list[int]]) -> list[torch.Tensor]:
        lm = self.lm
        past = lm.length
        if self.cfg.mode == "batch":
            lm.cache.batch_repeat_interleave(len(blocks))
            ids = torch.tensor([[last] + list(b) for b in blocks], dtype=torch.long)
            logits = lm.extend_batch(ids)
            self._pending = ("batch", past)
            return [logits[k] for k in range(len(blocks))]
        nodes, paths = build_trie(blocks)
        ids = torch.tensor([[last] + [n[-1] for n in nodes]], dtype=torch.long, device=lm.device)
        pos = torch.tensor([[past] + [past + len(n) for n in nodes]], device=lm.device)
        mask = tree_mask(nodes, past, lm.dtype).to(lm.device)
        logits = lm.forward_ids(ids, position_ids=pos, attention_mask=mask)[0]  # the cache grows by 1 + #nodes
        self._pending = ("tree", past, paths)
        return [logits[torch.tensor([0] + [i + 1 for i in path], device=logits.device)] for path in paths]

    def commit_tree(self, chosen: int, accepted: int) -> None:
        """Leave the cache holding the prefix plus `last` and the first `accepted` tokens of block `chosen`."""
        lm = self.lm
        kind = self._pending[0]
        if kind == "batch":
            _, past = self._pending
            lm.cache.batch_select_indices(torch.tensor([chosen], device=lm.device))
            lm.crop(past + 1 + accepted)
        else:
            _, past, paths = self._pending
            keep = list(range(past + 1)) + [past + 1 + i for i in paths[chosen][:accepted]]
            idx = torch.tensor(keep, device=lm.device)
            for obj, ka, va in _layers(lm.cache):
                if hasattr(obj, "select_positions"):  # engine.core.kv_cache: its buffer, not just the view
                    obj.select_positions(idx)
                    continue
                _set(obj, ka, _get(obj, ka).index_select(-2, idx))
                _set(obj, va, _get(obj, va).index_select(-2, idx))
            lm.length = len(keep)
        self._pending = None
