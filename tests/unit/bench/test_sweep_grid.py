"""Grid sweeps on a local 2-CPU Ray instance with tiny model directories (built in tmp dirs)."""

import argparse
import json
import shutil
from collections import Counter

import pytest

from engine.bench import sweep
from engine.bench.sweep_bench import make_tiny_models
from tests.sweep_grids import PROMPTS, grid_text, root, toml_value, write_grid  # noqa: F401  (root: a fixture)


# ------------------------------------------------------------------ no Ray needed


def test_task_ids_are_stable_hashes(root):
    a = sweep.expand_grid(sweep.load_grid(write_grid(root, "a.toml", grid_text(["autoregressive", "fixed:3"]))))
    # Same work spelled differently (policy spelling, order, an extra verifier list) → the same ids.
    b = sweep.expand_grid(sweep.load_grid(write_grid(root, "b.toml", grid_text(
        [{"name": "fixed", "params": {"gamma": 3}}, "ar"]).replace("threads = 1", 'verifiers = ["token"]'))))
    assert len(a) == 2 * 4 and {t.task_id for t in a} == {t.task_id for t in b}
    assert len({t.task_id for t in a}) == len(a)
    # Shards never mix tasks: qa has 2 prompts, so shard_size=2 gives 3 shards per config.
    c = sweep.expand_grid(sweep.load_grid(write_grid(root, "c.toml", grid_text(["fixed:3"], shard_size=2))))
    assert sorted((t.meta["task"], len(t.prompts)) for t in c) == [("mt_bench", 1), ("qa", 2), ("translation", 1)]
    # Changing a prompt's text changes only that shard's id.
    other = root / "other"
    other.mkdir(exist_ok=True)
    (other / "prompts.jsonl").write_text("".join(
        json.dumps({**p, "turns": ["changed"]} if p["question_id"] == 4 else p) + "\n" for p in PROMPTS))
    shutil.copytree(root / "models", other / "models", dirs_exist_ok=True)
    d = sweep.expand_grid(sweep.load_grid(write_grid(other, "a.toml", grid_text(["autoregressive", "fixed:3"]))))
    assert len({t.task_id for t in a} - {t.task_id for t in d}) == 2  # translation shard × 2 policies


@pytest.mark.parametrize("text,msg", [
    (grid_text(["bogus:1"]), "unknown policy 'bogus'"),
    ("colour = 3\n" + grid_text(["fixed:2"]), "unknown keys"),
    ('verifiers = ["nope"]\n' + grid_text(["fixed:2"]), "unknown verifier 'nope'"),
    (grid_text(["fixed:2"]).replace("dtype = \"fp32\"", "dtype = \"fp8\""), "unknown dtype"),
    ('drafters = ["banana"]\n' + grid_text(["fixed:2"]), "unknown drafter 'banana'; choose from model"),
    ('drafters = ["lookup:x=1"]\n' + grid_text(["fixed:2"]), "no parameter 'x'"),
    ('drafters = ["suffix:n=0"]\n' + grid_text(["fixed:2"]), r"max draft tokens must be an integer in \[1, 64\]"),
    ('drafters = [{ name = "lookup", size = 3 }]\n' + grid_text(["fixed:2"]), "drafter entry has unknown keys"),
    (grid_text(["fixed:2"]).replace('dtype = "fp32"', 'dtype = "fp32"\nweights = "int3"'), "unknown weights path 'int3'"),
])
def test_bad_grid_one_line_error(root, text, msg):
    with pytest.raises(ValueError, match=msg):
        sweep.expand_grid(sweep.load_grid(write_grid(root, "bad.toml", text)))


def test_weights_are_a_pair_key_and_dense_ids_stay(root):
    dense = sweep.expand_grid(sweep.load_grid(write_grid(root, "w0.toml", grid_text(["fixed:3"]))))
    quant = sweep.expand_grid(sweep.load_grid(write_grid(root, "w1.toml", grid_text(["fixed:3"]).replace(
        'dtype = "fp32"', 'dtype = "fp32"\nweights = "int8"'))))
    explicit = sweep.expand_grid(sweep.load_grid(write_grid(root, "w2.toml", grid_text(["fixed:3"]).replace(
        'dtype = "fp32"', 'dtype = "fp32"\nweights = "dense"'))))
    assert {t.task_id for t in explicit} == {t.task_id for t in dense}
    assert not {t.task_id for t in quant} & {t.task_id for t in dense}
    assert {t.config["weights"] for t in quant} == {"int8"} and {t.pair_key for t in quant}.isdisjoint(
        {t.pair_key for t in dense})


DRAFTERS = 'drafters = ["model", "lookup:n=4", { name = "suffix", params = { n = 8 } }]\n'
DRAFTER_POLICIES = ["autoregressive", "fixed:3", {"name": "matchlen", "params": {"factor": 1, "offset": 2, "max": 8}}]


def test_drafters_are_a_grid_key(root):
    """`drafters` crosses the pair's draft model and model-free drafters with the policies; the tasks of the
    draft model keep their ids (old sweeps resume), and each spelling of a drafter is one task."""
    base = sweep.expand_grid(sweep.load_grid(write_grid(root, "d0.toml", grid_text(DRAFTER_POLICIES))))
    tasks = sweep.expand_grid(sweep.load_grid(write_grid(root, "d1.toml", DRAFTERS + grid_text(
        DRAFTER_POLICIES + ["pacer"]))))
    by = Counter(sweep.drafter_of(t.config) for t in tasks)
    # 4 shards: the baseline, model × 3 policies, lookup and suffix × 2 each (pacer reads draft hidden states).
    assert by == {"none": 4, "model": 12, "lookup:n=4,ngram=2": 8, "suffix:n=8,depth=32,p=0.1": 8}
    assert {t.task_id for t in base} <= {t.task_id for t in tasks}
    free = [t for t in tasks if t.config.get("drafter")]
    assert all(t.config["draft"] is None and t.models["draft"] is None and not t.config["policy"].startswith("pacer")
               for t in free)
    assert {t.pair_key for t in free} == {t.pair_key for t in tasks if t.config["policy"] == "autoregressive"}
    respelt = sweep.expand_grid(sweep.load_grid(write_grid(root, "d2.toml", DRAFTERS.replace(
        '"lookup:n=4"', '{ name = "lookup", params = { n = 4, ngram = 2 } }') + grid_text(DRAFTER_POLICIES))))
    assert {t.task_id for t in respelt} == {t.task_id for t in tasks if not t.config["policy"].startswith("pacer")}
    # A pair without a draft model still runs the model-free drafters (they need only the target).
    lone = sweep.expand_grid(sweep.load_grid(write_grid(root, "d3.toml", DRAFTERS + grid_text(
        DRAFTER_POLICIES).replace('draft = "models/draft"\n', ""))))
    assert Counter(sweep.drafter_of(t.config) for t in lone) == {"none": 4, "lookup:n=4,ngram=2": 8,
                                                                  "suffix:n=8,depth=32,p=0.1": 8}


def test_publish_never_overwrites(tmp_path):
    final = tmp_path / "t.jsonl"
    a, b = tmp_path / ".a.tmp", tmp_path / ".b.tmp"
    a.write_text("first\n")
    b.write_text("second\n")
    assert sweep.publish(a, final) is True and sweep.publish(b, final) is False
    assert final.read_text() == "first\n" and not a.exists() and not b.exists()


def test_dry_run_lists_tasks(root, tmp_path, capsys):
    from engine.cli import sweep as sweep_cli

    ap = argparse.ArgumentParser()
    sweep_cli.add_parser(ap.add_subparsers())
    g = write_grid(root, "dry.toml", grid_text(["autoregressive", "fixed:3"]))
    a = ap.parse_args(["sweep", str(g), "--out", str(tmp_path / "o"), "--dry-run"])
    assert a.func(a) == 0
    out = capsys.readouterr().out
    assert out.count("todo ") == 8 and "8 tasks, 0 done, 8 to run" in out


def test_an_eagle_head_is_a_grid_drafter(root, tmp_path):
    """`eagle:PATH` in `drafters` runs on the target alone, like the model-free drafters; a missing head
    is one line before any task."""
    from engine.drafters.eagle import save_eagle
    from engine.drafters.eagle_model import EagleConfig, EagleHead

    head = tmp_path / "head"
    save_eagle(EagleHead(EagleConfig(hidden_size=32, target_layers=(0,), num_heads=4, num_kv_heads=2,
                                     intermediate_size=16, vocab_size=64, draft_vocab=64, target="tiny")), head)
    tasks = sweep.expand_grid(sweep.load_grid(write_grid(root, "e.toml", f'drafters = ["eagle:{head}"]\n' +
                                                         grid_text(["autoregressive", "fixed:3"]))))
    eag = [t for t in tasks if t.config.get("drafter")]
    assert eag and all(t.config["drafter"] == f"eagle:{head}" and t.models["draft"] is None for t in eag)
    with pytest.raises(ValueError, match="eagle needs a path"):
        sweep.expand_grid(sweep.load_grid(write_grid(root, "e2.toml", 'drafters = ["eagle:"]\n' + grid_text(["fixed:3"]))))
