"""SmolLM2 target loader, the committed draft, export, and the draft-training plumbing."""

from __future__ import annotations
import json
import pytest
import torch

from engine.models.sharegpt import iter_json_array


@pytest.fixture(scope="module")
def target():
    from engine.models.smollm import load_smollm2

    torch.set_num_threads(2)
    return load_smollm2(dtype=torch.bfloat16)


def test_truncated_json_array():
    full = [{"id": "a", "conversations": [{"from": "human", "value": "hi, [x] {y}"}]}, {"id": "b", "v": [1, 2.5, None]}]
    text = json.dumps(full, indent=2)
    assert list(iter_json_array(text)) == full
    cut = text[: text.rindex('"v"') + 6]  # cut inside the second object
    assert list(iter_json_array(cut)) == full[:1]
    assert list(iter_json_array('[\n  {"a": "unterminated str')) == []
    assert list(iter_json_array("[]")) == []
