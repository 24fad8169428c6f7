"""Sweep grids for the tests: the prompts file, TOML text of a grid, a module-scoped folder to write them in
(the grid parser's unit tests and the Ray sweep's system tests share them)."""

from __future__ import annotations

import json

import pytest

from engine.bench.sweep_bench import make_tiny_models


PROMPTS = [
    {"question_id": 1, "category": "writing", "turns": ["write a note about the sea."]},
    {"question_id": 2, "category": "qa", "turns": ["who wrote hamlet?"]},
    {"question_id": 3, "category": "qa", "turns": ["what is 2 + 2?"]},
    {"question_id": 4, "category": "translation", "turns": ["translate: le chat dort."]},
]


def toml_value(v):
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)


def grid_text(policies, temperatures=(0.0,), max_new_tokens=16, shard_size=1, extra_pairs=""):
    pol = ", ".join(toml_value(p) for p in policies)
    return f"""
shard_size = {shard_size}
max_new_tokens = [{max_new_tokens}]
temperatures = [{", ".join(str(t) for t in temperatures)}]
policies = [{pol}]
threads = 1
[[pairs]]
target = "models/target"
draft = "models/draft"
dtype = "fp32"
{extra_pairs}
[[prompts]]
file = "prompts.jsonl"
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    r = tmp_path_factory.mktemp("sweep")
    make_tiny_models(r / "models")
    (r / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    return r


def write_grid(root, name, text):
    p = root / name
    p.write_text(text)
    return p
