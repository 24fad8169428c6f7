"""Feature shards: manifests, completeness and the one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
import torch

from engine.train.blockdata.shards import (FeatureSpec, ShardError, check_dataset, is_complete, list_shards,
                                           load_shard, read_manifest, write_shard)

SPEC = FeatureSpec(target="toy", hidden_size=4, num_layers=3, vocab_size=50, layers=(0, 2))


def _arrays(n_tok=(5, 3), dim=8):
    T = sum(n_tok)
    return {"ids": torch.arange(T, dtype=torch.int32), "offsets": torch.tensor([0, n_tok[0], T], dtype=torch.int64),
            "prompt_len": torch.tensor([2, 1], dtype=torch.int32), "feats": torch.randn(T, dim).to(torch.bfloat16),
            "target_next": torch.zeros(T, dtype=torch.int32)}


def _write(root, i=0, spec=SPEC, kind="train"):
    return write_shard(root, kind, i, _arrays(dim=spec.feat_dim), {"answer_tokens": 5, **spec.to_dict()})


def test_round_trip_and_manifest(tmp_path):
    p = _write(tmp_path)
    assert is_complete(p)
    m = read_manifest(p, SPEC)
    assert (m["tokens"], m["sequences"], m["layers"], m["dtype"]) == (8, 2, [0, 2], "bf16")
    d = load_shard(p, SPEC)
    assert torch.equal(d["ids"], torch.arange(8, dtype=torch.int32))


def test_incomplete_and_truncated_shards_are_named(tmp_path):
    p = _write(tmp_path)
    p.with_suffix(".json").unlink()
    assert not is_complete(p)
    with pytest.raises(ShardError, match=r"train-00000.safetensors: incomplete shard \(no manifest"):
        load_shard(p, SPEC)
    p = _write(tmp_path, 1)
    data = p.read_bytes()
    p.write_bytes(data[:-10])
    with pytest.raises(ShardError, match=r"train-00001.safetensors: incomplete shard \(\d+ bytes, manifest says"):
        load_shard(p, SPEC)


def test_other_layers_or_target_are_refused_with_the_field(tmp_path):
    p = _write(tmp_path)
    other = FeatureSpec(target="toy", hidden_size=4, num_layers=3, vocab_size=50, layers=(1, 2))
    with pytest.raises(ShardError, match=r"train-00000.safetensors: features of another kind: layers \[0, 2\] ≠ "
                                         r"expected \[1, 2\]"):
        load_shard(p, other)
    tgt = FeatureSpec(target="qwen", hidden_size=4, num_layers=3, vocab_size=50, layers=(0, 2))
    with pytest.raises(ShardError, match=r"features of another kind: target 'toy' ≠ expected 'qwen'"):
        read_manifest(p, tgt)


def test_gap_in_the_numbering_is_a_missing_shard(tmp_path):
    _write(tmp_path, 0)
    _write(tmp_path, 2)
    with pytest.raises(ShardError, match=r"train-00001.safetensors: missing shard \(the next one"):
        list_shards(tmp_path, "train")


def test_wrong_shapes_are_refused(tmp_path):
    a = _arrays()
    a["feats"] = a["feats"][:, :4]
    p = write_shard(tmp_path, "train", 0, a, {"answer_tokens": 5, **SPEC.to_dict()})
    with pytest.raises(ShardError, match=r"tensor 'feats' has shape \(8, 4\), expected \(8, 8\)"):
        load_shard(p, SPEC)


def test_dataset_description_is_created_once_then_enforced(tmp_path):
    check_dataset(tmp_path, SPEC, create=True)
    before = (tmp_path / "dataset.json").read_text()
    other = FeatureSpec(target="toy", hidden_size=8, num_layers=3, vocab_size=50, layers=(0, 2))
    with pytest.raises(ShardError, match=r"dataset.json: this directory holds features of another kind: "
                                         r"hidden_size 4 ≠ expected 8"):
        check_dataset(tmp_path, other, create=True)
    assert (tmp_path / "dataset.json").read_text() == before
    assert json.loads(before)["layers"] == [0, 2]
    with pytest.raises(ShardError, match="dataset.json: missing"):
        check_dataset(tmp_path / "nowhere", SPEC)
