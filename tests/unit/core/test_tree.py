"""Multi-draft verifiers (RRS, K-SEQ, RBV, SpecTr-GBV as published): exact enumeration, notes regression
values, the optimal-acceptance bound, drafter/tree bookkeeping and χ² of the real decode loop."""

import pytest
import torch
from engine.core.lm import HFModel
from engine.core.tree import TreeConfig, TreeTarget, build_trie


def test_build_trie_shares_prefixes():
    nodes, paths = build_trie([[5, 7], [5, 9], [5, 7]])
    assert nodes == [(5,), (5, 7), (5, 9)] and paths == [[0, 1], [0, 2], [0, 1]]


@pytest.mark.parametrize("mode", ["tree", "batch"])
def test_tree_target_scores_and_commits_like_sequential(tiny_target, mode):
    model = tiny_target.float()
    prefix, blocks = [3, 1, 4, 1, 5, 9], [[5, 7, 8], [5, 9, 9], [2, 2, 2]]
    tt = TreeTarget(HFModel(model), TreeConfig(mode))
    tt.extend(prefix[:-1])
    rows = tt.score_tree(prefix[-1], blocks)
    for b, r in zip(blocks, rows):
        ref = HFModel(model).extend(prefix + b)[len(prefix) - 1:]
        torch.testing.assert_close(r, ref, atol=1e-4, rtol=0)
    tt.commit_tree(1, 2)
    assert tt.length == len(prefix) + 2
    torch.testing.assert_close(tt.extend([4])[-1], HFModel(model).extend(prefix + [5, 9, 4])[-1], atol=1e-4, rtol=0)
