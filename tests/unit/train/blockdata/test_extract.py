"""The feature extractor on a tiny random Qwen2-shaped target: shards, features, resumption."""

from __future__ import annotations

import json

import pytest
import torch

from engine.drafters.block_model import target_features
from engine.train.blockdata.extract import ExtractConfig, extract, prefill_features, spec_of
from engine.train.blockdata.shards import ShardError, load_shard, sequences
from tests.unit.train.blockdata.toy import LAYERS, PAD, ByteChatTokenizer, tiny_target, toy_streams


def _cfg(tmp_path, **kw):
    base = dict(out_dir=str(tmp_path / "data"), target="toy", layers=LAYERS, heldout=3, heldout_answer_tokens=12,
                shard_size=5, max_prompt_tokens=64, max_answer_tokens=40, min_answer_tokens=4, batch_tokens=128,
                gen_batch=4, dtype="fp32", min_free_gb=0.0)
    return ExtractConfig(**{**base, **kw})


def test_prefill_features_match_a_forward_of_each_sequence_alone():
    m = tiny_target()
    seqs = [([1, 2, 3, 4, 5, 6, 7], 3), ([9, 8, 7], 1), (list(range(20, 40)), 5)]
    feats, nxt = prefill_features(m, seqs, LAYERS, batch_tokens=64, pad_id=PAD)
    at = 0
    for ids, p in seqs:
        x = torch.tensor([ids])
        ref = target_features(m, x, LAYERS)[0]
        got = feats[at:at + len(ids)].float()
        assert torch.allclose(got, ref, atol=0.05, rtol=0.02)  # bf16 storage
        logits = m(input_ids=x).logits[0]
        assert nxt[at:at + p - 1].tolist() == [-1] * (p - 1)
        assert nxt[at + p - 1:at + len(ids)].tolist() == logits[p - 1:].argmax(-1).tolist()
        at += len(ids)


def test_extract_writes_checked_shards_and_resumes(tmp_path):
    m, tok = tiny_target(), ByteChatTokenizer()
    cfg = _cfg(tmp_path, max_shards=3)
    r = extract(cfg, m, tok, toy_streams(), progress=False)
    assert r["shards_written"] == 4 and r["stop"] == "all shards done"
    root = tmp_path / "data"
    spec = spec_of(m, "toy", LAYERS)
    held = load_shard(root / "heldout-00000.safetensors", spec)
    man = json.loads((root / "heldout-00000.json").read_text())
    assert man["answers"] == "greedy" and man["layers"] == list(LAYERS) and man["target"] == "toy"
    d = load_shard(root / "train-00001.safetensors", spec)
    assert d["feats"].dtype == torch.bfloat16 and d["feats"].shape[1] == len(LAYERS) * 32
    man1 = json.loads((root / "train-00001.json").read_text())
    assert man1["answers"] == "existing" and man1["answer_tokens"] == sum(e - s - p for s, e, p in sequences(d))
    # greedy held-out answers: the prefill's argmax reproduces the decoded tokens
    for s, e, p in sequences(held):
        assert held["target_next"][s + p - 1:e - 1].tolist() == held["ids"][s + p:e].tolist()
    # a second call finds everything done; a shard whose manifest a kill never wrote is redone alone
    mt = {p.name: p.stat().st_mtime_ns for p in root.glob("*.safetensors")}
    assert extract(cfg, m, tok, toy_streams(), progress=False)["shards_written"] == 0
    (root / "train-00001.json").unlink()
    assert extract(cfg, m, tok, toy_streams(), progress=False)["shards_written"] == 1
    assert torch.equal(load_shard(root / "train-00001.safetensors", spec)["ids"], d["ids"])
    assert (root / "train-00000.safetensors").stat().st_mtime_ns == mt["train-00000.safetensors"]


def test_extract_refuses_a_directory_of_other_layers_and_keeps_it(tmp_path):
    m, tok = tiny_target(), ByteChatTokenizer()
    extract(_cfg(tmp_path, max_shards=1), m, tok, toy_streams(), progress=False)
    before = sorted(p.name for p in (tmp_path / "data").iterdir())
    with pytest.raises(ShardError, match=r"dataset.json: .*layers \[0, 2\] ≠ expected \[1, 2\]"):
        extract(_cfg(tmp_path, max_shards=2, layers=(1, 2)), m, tok, toy_streams(), progress=False)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == before


def test_greedy_answers_mode_stores_the_targets_own_tokens(tmp_path):
    m, tok = tiny_target(), ByteChatTokenizer()
    extract(_cfg(tmp_path, max_shards=1, answers="greedy"), m, tok, toy_streams(), progress=False)
    spec = spec_of(m, "toy", LAYERS)
    d = load_shard(tmp_path / "data" / "train-00000.safetensors", spec)
    assert json.loads((tmp_path / "data" / "train-00000.json").read_text())["answers"] == "greedy"
    for s, e, p in sequences(d):
        assert d["target_next"][s + p - 1:e - 1].tolist() == d["ids"][s + p:e].tolist()


def test_a_shard_of_examples_that_all_miss_the_caps_is_written_empty(tmp_path):
    from engine.train.blockdata.shards import list_shards
    from engine.train.blockdata.sources import Example

    m, tok = tiny_target(), ByteChatTokenizer()
    s = toy_streams()
    s["sharegpt"] = s["sharegpt"][:8]  # after these run out, every example is too long
    s["stdlib"] = [Example("stdlib", f"long{i}", "x" * 200, "y" * 50) for i in range(12)]
    extract(_cfg(tmp_path, max_shards=4, code_share=0.5), m, tok, s, progress=False)
    spec = spec_of(m, "toy", LAYERS)
    shards = list_shards(tmp_path / "data", "train")
    assert len(shards) == 4  # no gap in the numbering
    n = [len(sequences(load_shard(p, spec))) for p in shards]
    assert 0 in n and sum(n) > 0  # the empty shard loads like any other
