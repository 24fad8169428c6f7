"""The target protocol the decode loop drives, and its default block scoring.

    extend(ids) -> logits [len(ids), V]      feed tokens after the cached prefix (engine.core.lm)
    crop(n)                                  keep the first n cached positions
    score_paths(last, blocks) -> [logits]    target logits of every draft block: [len(block)+1, V] each
    commit(keep_len, last, blocks, chosen, accepted)
                                             leave the cache holding exactly x[:keep_len], the prefix
                                             plus `last` and the first `accepted` tokens of block `chosen`

Before a step the cache holds x[:S−1] and `last` = x[S−1]; keep_len = S + accepted.

`TargetBase` (HFModel, TableLM) scores K = 1 with one extend. K > 1 falls back to one extend per block
with a crop in between (exact, K× the cost), and commit re-feeds the accepted path, since the cache
was left at S−1 (that re-feed is counted in verify time). `engine.core.tree.TreeTarget` overrides
both with one tree-masked pass.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Target(Protocol):
    vocab_size: int
    length: int

    def reset(self) -> None: ...
    def extend(self, ids: list[int]) -> torch.Tensor: ...
    def crop(self, n: int) -> None: ...
    def score_paths(self, last: int, blocks: list[list[int]]) -> list[torch.Tensor]: ...
    def commit(self, keep_len: int, last: int, blocks: list[list[int]], chosen: int, accepted: int) -> None: ...


class TargetBase:
    """score_paths / commit for any LM with extend and crop (see the module doc)."""

    def score_paths(self, last: int, blocks: list[list[int]]) -> list[torch.Tensor]:
        if len(blocks) == 1:
            return [self.extend([last] + list(blocks[0]))]
        base = self.length
        out = []
        for block in blocks:
            out.append(self.extend([last] + list(block)))
            self.crop(base)
        return out

    def commit(self, keep_len: int, last: int, blocks: list[list[int]], chosen: int, accepted: int) -> None:
        if len(blocks) == 1:
            self.crop(keep_len)
        else:  # sequential scoring left the cache at S−1: re-feed the accepted path
            self.extend([last] + list(blocks[chosen][:accepted]))
