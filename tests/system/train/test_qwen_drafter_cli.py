"""`python -m engine dpace train-qwen` through main([…]) on toy shards of a tiny Qwen2-shaped target:
a run, and bad input as one line on stderr with nothing written."""

from __future__ import annotations

import json

import pytest

from engine.__main__ import main
from engine.train.blockdata.extract import ExtractConfig, extract
from tests.unit.train.blockdata.toy import LAYERS, MASK, ByteChatTokenizer, save_target, tiny_target, toy_streams


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    m = tiny_target()
    extract(ExtractConfig(out_dir=str(d / "data"), target="toy", layers=LAYERS, heldout=3, heldout_answer_tokens=12,
                          shard_size=6, max_shards=2, max_prompt_tokens=64, max_answer_tokens=32, min_answer_tokens=4,
                          batch_tokens=128, gen_batch=4, dtype="fp32", min_free_gb=0.0),
            m, ByteChatTokenizer(), toy_streams(), progress=False)
    return d, save_target(m, d / "target")


def _args(d, tdir, *extra):
    return ["dpace", "train-qwen", "--data-dir", str(d / "data"), "--runs-dir", str(d / "runs"), "--target", "toy",
            "--target-dir", str(tdir), "--target-layers", ",".join(map(str, LAYERS)), "--mask-token-id", str(MASK),
            "--block-size", "4", "--heads", "4", "--kv-heads", "2", "--ffn", "32", "--steps", "4", "--batch", "2",
            "--anchors", "4", "--eval-every", "2", "--eval-seqs", "2", "--log-every", "2", "--autocast", "false",
            *extra]


def test_train_qwen_cli_runs_and_prints_the_final_record(toy, capsys):
    d, tdir = toy
    assert main(_args(d, tdir, "--objective", "dflash")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["objective"] == "dflash" and out["steps"] == 4 and 1.0 <= out["tau_offline"] <= 4.0
    assert (d / "runs" / out["tag"] / "drafter" / "model.safetensors").is_file()


def test_other_layers_is_one_line_naming_the_file(toy, capsys):
    d, tdir = toy
    args = _args(d, tdir, "--objective", "uniform")
    args[args.index("--target-layers") + 1] = "0,1"
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dataset.json" in err and "layers [0, 2] ≠ expected [0, 1]" in err
    assert not any((d / "runs").glob("*uniform*"))


def test_incomplete_shard_is_one_line_naming_it(toy, capsys, tmp_path):
    import shutil

    d, tdir = toy
    data = tmp_path / "data"
    shutil.copytree(d / "data", data)
    (data / "train-00001.json").unlink()  # a kill between the tensors and the manifest
    args = _args(d, tdir, "--objective", "uniform", "--runs-dir", str(tmp_path / "runs"))
    args[args.index("--data-dir") + 1] = str(data)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train-00001.safetensors: incomplete shard" in err
    assert not (tmp_path / "runs").exists()
