"""The head's data: layer columns, labels shifted to the target's next choice, padded batches."""

import pytest
import torch

from engine.train.blockdata.shards import ShardError
from engine.train.eagle.data import IGNORE, EagleSeq, _seqs, batches, layer_columns, pad


def test_layer_columns_and_a_missing_layer():
    cols = layer_columns((1, 7, 13), (1, 13), 4, "x/dataset.json")
    assert cols.tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    with pytest.raises(ShardError, match=r"x/dataset.json: the head reads target layers \[5\].*missing \[5\]"):
        layer_columns((1, 7), (5,), 4, "x/dataset.json")


def test_labels_are_the_targets_next_choice_in_draft_ids():
    d = {"ids": torch.tensor([5, 6, 7, 8], dtype=torch.int32), "offsets": torch.tensor([0, 4]),
         "prompt_len": torch.tensor([2], dtype=torch.int32), "feats": torch.zeros(4, 8, dtype=torch.bfloat16),
         "target_next": torch.tensor([-1, 9, 3, 4], dtype=torch.int32)}
    lut = torch.full((10,), -1, dtype=torch.long)
    lut[torch.tensor([3, 9])] = torch.tensor([0, 1])  # draft vocabulary {3, 9}; 4 is outside it
    (s,) = _seqs(d, torch.arange(4), lut)
    # position t is labelled with target_next[t + 1]: 9 → 1, 3 → 0, 4 → outside, the last has none
    assert s.labels.tolist() == [1, 0, IGNORE, IGNORE] and s.feats.shape == (4, 4) and s.plen == 2


def test_batches_cover_every_sequence_once_within_the_token_budget():
    seqs = [EagleSeq(torch.zeros(n, dtype=torch.long), torch.zeros(n, 2), torch.zeros(n, dtype=torch.long), 1)
            for n in (3, 9, 4, 12, 5, 7)]
    bs = batches(seqs, 16, torch.Generator().manual_seed(0))
    assert sorted(i for b in bs for i in b) == list(range(6))
    assert all(len(b) * max(len(seqs[i]) for i in b) <= 16 or len(b) == 1 for b in bs)
    ids, feats, lab, ln = pad([seqs[0], seqs[3]], 2)
    assert ids.shape == (2, 12) and feats.dtype == torch.bfloat16 and (lab[0, 3:] == IGNORE).all()
