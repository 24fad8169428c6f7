"""Committed weights stay small and pickle-free: safetensors only, ≤ 120 MB in all, each file loadable."""

from pathlib import Path

import pytest
from tests.conftest import REPO

ROOT = REPO
LIMIT_MB = 120  # the budget for committed weights: one drafter may take up to 80 MB (the EAGLE-style head is 72), model cards say how to retrain the rest
FILE_LIMIT_MB = 80  # per file (a drafter's one file, under a host's 100 MB limit); larger weights are split into shards (engine.models.smollm.save_draft_state)
PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".pkl", ".pickle", ".ckpt"}


def _weight_files() -> list[Path]:
    return sorted(p for p in (ROOT / "models").rglob("*") if p.is_file())


def test_committed_weights_are_safetensors_within_budget():
    files = _weight_files()
    pickles = [str(p.relative_to(ROOT)) for p in files if p.suffix in PICKLE_SUFFIXES]
    assert not pickles, f"pickle-format weights committed: {pickles}"
    tensors = [p for p in files if p.suffix == ".safetensors"]
    assert tensors, "no committed weights found under models/"
    total_mb = sum(p.stat().st_size for p in tensors) / 2**20
    assert total_mb <= LIMIT_MB, f"committed weights {total_mb:.1f} MB > {LIMIT_MB} MB"
    big = [f"{p.relative_to(ROOT)} ({p.stat().st_size / 2**20:.1f} MB)" for p in tensors
           if p.stat().st_size > FILE_LIMIT_MB * 2**20]
    assert not big, f"weight files over {FILE_LIMIT_MB} MB (shard them): {big}"


@pytest.mark.parametrize("path", [p for p in _weight_files() if p.suffix == ".safetensors"],
                         ids=lambda p: str(p.relative_to(ROOT / "models")))
def test_every_weight_file_loads_and_has_a_model_card(path):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
        assert keys and all(f.get_slice(k).get_shape() is not None for k in keys)
    card = next((d / "README.md" for d in [path.parent, *path.parents] if (d / "README.md").exists()), None)
    assert card is not None and card.is_relative_to(ROOT / "models"), f"{path.name}: no model card above it"
