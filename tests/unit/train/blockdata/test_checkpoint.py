"""Checkpoints: safetensors + JSON, consistent after a kill, refused for another config."""

from __future__ import annotations

import json

import pytest
import torch

from engine.train.blockdata.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def _model_opt(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Linear(4, 3)
    o = torch.optim.AdamW(m.parameters(), lr=1e-2)
    m(torch.randn(2, 4)).sum().backward()
    o.step()
    return m, o


def test_round_trip_restores_weights_and_moments(tmp_path):
    m, o = _model_opt()
    save_checkpoint(tmp_path, m, o, {"step": 3, "wall_s": 1.5, "trace_offset": 10, "config": {"lr": 0.01, "t": (1, 2)}})
    save_checkpoint(tmp_path, m, o, {"step": 5, "wall_s": 2.5, "trace_offset": 20, "config": {"lr": 0.01, "t": (1, 2)}})
    assert [p.name for p in tmp_path.glob("ckpt-*.safetensors")] == ["ckpt-0000005.safetensors"]
    m2, o2 = _model_opt(seed=1)
    st = load_checkpoint(tmp_path, {"lr": 0.01, "t": (1, 2)}, m2, o2)
    assert st["step"] == 5 and st["trace_offset"] == 20
    assert torch.equal(m.weight, m2.weight)
    a, b = o.state_dict()["state"][0], o2.state_dict()["state"][0]
    assert torch.equal(a["exp_avg"], b["exp_avg"]) and float(a["step"]) == float(b["step"])


def test_another_config_or_a_lost_tensor_file_is_refused(tmp_path):
    m, o = _model_opt()
    save_checkpoint(tmp_path, m, o, {"step": 2, "wall_s": 0.0, "trace_offset": 0, "config": {"lr": 0.01}})
    with pytest.raises(CheckpointError, match=r"ckpt.json: checkpoint of another config \(lr = 0.01, this run has 0.02\)"):
        load_checkpoint(tmp_path, {"lr": 0.02}, m, o)
    (tmp_path / json.loads((tmp_path / "ckpt.json").read_text())["file"]).unlink()
    with pytest.raises(CheckpointError, match="its tensor file ckpt-0000002.safetensors is missing"):
        load_checkpoint(tmp_path, {"lr": 0.01}, m, o)
    assert load_checkpoint(tmp_path / "none", {}, m, o) is None


def test_run_lock_refuses_a_second_live_process_and_takes_over_a_stale_one(tmp_path):
    import os

    from engine.train.blockdata.checkpoint import RunLock

    with RunLock(tmp_path):
        assert (tmp_path / "lock").read_text().strip() == str(os.getpid())
    assert not (tmp_path / "lock").exists()
    other = os.getppid()  # a live process that is not this one
    (tmp_path / "lock").write_text(str(other))
    with pytest.raises(CheckpointError, match=rf"lock: process {other} is training this run"):
        RunLock(tmp_path).__enter__()
    (tmp_path / "lock").write_text("999999999")  # no such process: a stale lock is taken over
    with RunLock(tmp_path):
        pass
