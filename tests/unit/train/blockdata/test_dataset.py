"""Shards in memory: target labels vs data labels, the budget prefix, the reduced head."""

from __future__ import annotations

import pytest
import torch

from engine.train.blockdata.dataset import ShardData, pad_batch
from engine.train.blockdata.shards import FeatureSpec, ShardError, write_shard

SPEC = FeatureSpec(target="toy", hidden_size=2, num_layers=2, vocab_size=20, layers=(0, 1))


def _shard(root, kind, i, ids, plen, nxt):
    T = len(ids)
    write_shard(root, kind, i, {"ids": torch.tensor(ids, dtype=torch.int32), "offsets": torch.tensor([0, T]),
                                "prompt_len": torch.tensor([plen], dtype=torch.int32),
                                "feats": torch.zeros(T, 4, dtype=torch.bfloat16),
                                "target_next": torch.tensor(nxt, dtype=torch.int32)},
                {"answer_tokens": T - plen, **SPEC.to_dict()})


def test_target_labels_shift_the_targets_argmax_onto_answer_positions(tmp_path):
    _shard(tmp_path, "heldout", 0, [1, 2, 3, 4], 2, [-1, 3, 4, 9])
    _shard(tmp_path, "train", 0, [1, 2, 5, 6, 7], 2, [-1, 8, 9, 10, 11])
    _shard(tmp_path, "train", 1, [1, 2, 3, 4, 5], 2, [-1, 3, 4, 5, 6])
    d = ShardData(tmp_path, SPEC, labels="target")
    s = d.train[0]
    assert s.labels.tolist() == [1, 2, 8, 9, 10] and s.ids.tolist() == [1, 2, 5, 6, 7]
    assert ShardData(tmp_path, SPEC, labels="data").train[0].labels.tolist() == [1, 2, 5, 6, 7]
    assert d.held[0].labels.tolist() == [1, 2, 3, 4]  # held-out: the target's own tokens
    assert d.vocab_subset().tolist() == [3, 4, 5, 8, 9, 10]
    assert len(ShardData(tmp_path, SPEC, max_answer_tokens=3).shards) == 1
    with pytest.raises(ShardError, match="fewer than the 50 asked for"):
        ShardData(tmp_path, SPEC, max_answer_tokens=50)
    with pytest.raises(ShardError, match="the mask token id 7 occurs in the data"):
        d.check_mask(7)
    ids, lab, feats, plen, ln = pad_batch(d.train, 4, pad_id=0)
    assert ids.shape == (2, 5) and ln.tolist() == [5, 5] and feats.dtype == torch.float32


def test_no_train_shard_or_no_heldout_is_one_line(tmp_path):
    with pytest.raises(ShardError, match=r"train-00000.safetensors: missing shard \(no training data"):
        ShardData(tmp_path, SPEC)
    _shard(tmp_path, "train", 0, [1, 2, 3], 1, [-1, 2, 3])
    with pytest.raises(ShardError, match="heldout-00000.safetensors: missing shard"):
        ShardData(tmp_path, SPEC)
