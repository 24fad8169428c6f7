"""`--draft block:TARGET` names a target's committed block drafter (engine.drafters.factory)."""

from __future__ import annotations

import pytest

from engine.drafters.factory import BLOCK_DRAFTERS, block_path
from engine.paths import REPO_ROOT


def test_known_target_names_resolve_to_the_committed_directory():
    assert block_path("block:smollm2-135m") == REPO_ROOT / BLOCK_DRAFTERS["smollm2-135m"]


def test_a_name_without_committed_weights_is_one_line(monkeypatch, tmp_path):
    import engine.drafters.factory as f

    monkeypatch.setattr(f, "REPO_ROOT", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"block:qwen2.5-coder-1.5b: no committed block drafter at .*"
                                                r"train-qwen"):
        block_path("block:qwen2.5-coder-1.5b")


def test_paths_still_work(tmp_path):
    assert block_path(f"block:{tmp_path}") == tmp_path


def test_eagle_names_resolve_and_the_live_page_offers_the_head(monkeypatch, tmp_path):
    import engine.drafters.factory as f
    from app import live_inputs
    from engine.drafters.factory import EAGLE_HEADS, drafter_kind, eagle_path

    assert drafter_kind("eagle:qwen2.5-coder-1.5b") == "eagle"
    assert eagle_path(f"eagle:{tmp_path}") == tmp_path
    monkeypatch.setattr(f, "REPO_ROOT", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"eagle:qwen2.5-coder-1.5b: no committed head at .*eagle train"):
        eagle_path("eagle:qwen2.5-coder-1.5b")
    assert "models/" in EAGLE_HEADS["qwen2.5-coder-1.5b"]
    assert live_inputs.EAGLE_DRAFT in live_inputs.draft_names() and live_inputs.own_drafter("eagle:x")
    assert live_inputs.draft_preset(live_inputs.EAGLE_DRAFT) == "eagle:qwen2.5-coder-1.5b"
