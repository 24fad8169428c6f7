"""PACER: pre-verifier, stop rule, data recording, packed training, weights I/O (tiny models only)."""

import json

import pytest
import torch
from engine.core.lm import HFModel
from engine.offline.steps import load_split
from tests.conftest import record_pacer_shards

H = 32  # tiny_llama hidden size


def test_recording_labels(recorded):
    root, reqs = recorded
    for _, _, d in reqs:
        assert len(d["hidden"]) == sum(d["window"]) and d["hidden"][0].shape == (H,)
        assert all(0 <= a <= w <= 6 for a, w in zip(d["accepted"], d["window"]))
    tr = load_split(root, "train")
    y, w = tr.labels()
    assert int(y.sum()) == int(tr.accepted.sum()) and bool((w == 1).all())
    ym, wm = tr.labels("masked")
    assert torch.equal(ym, y) and int(wm.sum()) == int(torch.minimum(tr.accepted + 1, tr.window).sum())


def test_shard_claims_are_exclusive(tmp_path):
    from engine.train.pacer.data import _claim

    p = tmp_path / "train-00000.safetensors"
    assert _claim(p) and not _claim(p)  # a second worker skips the shard
    p.write_bytes(b"x")
    (tmp_path / "train-00000.safetensors.lock").unlink()
    assert not _claim(p)  # finished shards are never claimed
