"""Every committed experiment file resolves, through the engine's own argparse (parse only, no model
loads), to a command its subcommand accepts; every result JSON names an experiment file that exists
and writes it; the CLI refuses a bad file in one line before anything runs."""

import json
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.cli.experiment import engine_commands
from engine.experiment import EXPERIMENTS_DIR, load, names
from engine.paths import REPO_ROOT

NAMES = names()


def test_there_are_experiments_for_the_entry_points():
    assert {"traces", "gpu-check", "bench", "traces-qwen", "bench-qwen-policies-bf16"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_experiment_resolves_to_commands_the_engine_parses(name):
    e = load(name, engine_commands())  # raises on any refusal of the engine's parsers
    assert e.steps and e.file == f"experiments/{name}.toml"
    for s in e.steps:
        if not s.copy:
            assert engine_commands().refusal(list(s.argv)) is None


def test_every_result_json_names_the_experiment_that_writes_it(monkeypatch):
    import re

    import engine.kernels.kernel_build as kb

    monkeypatch.setattr(kb, "this_cpu", lambda: "CPU-KIND")  # an out with {cpu} matches every CPU kind's file
    outs = []
    for n in NAMES:
        for s in load(n, engine_commands()).steps:
            if s.out:
                pattern = re.escape(s.out).replace("CPU\\-KIND", "[a-z0-9-]+")
                outs.append((re.compile(pattern + "$"), f"experiments/{n}.toml"))
    bad = []
    for p in sorted((REPO_ROOT / "docs" / "results").glob("*.json")):
        exp = json.loads(p.read_text()).get("experiment")
        rel = f"docs/results/{p.name}"
        writers = {e for rx, e in outs if rx.match(rel)}
        if not exp or not (REPO_ROOT / exp).is_file():
            bad.append(f"{rel}: experiment {exp!r}")
        elif writers and exp not in writers:
            bad.append(f"{rel}: names {exp}, written by {sorted(writers)}")
    assert not bad, bad


def test_cli_dry_run_and_list(capsys):
    assert main(["experiment", "run", "gpu-check", "--dry-run"]) == 0
    assert capsys.readouterr().out.strip().endswith("python -m engine gpu-check --out docs/results/gpu-check.json")
    assert main(["experiment", "list", "--pair", "qwen"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed and all("  qwen  " in ln for ln in listed)


def test_cli_refuses_a_bad_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('description = "x"\npair = "qwen"\n[[run]]\ncommand = "bench"\nout = "o.json"\n'
                   '[run.args]\nper-task = "many"\n')
    assert main(["experiment", "run", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bad.toml: run[0]" in err and "--per-task" in err and "invalid int value" in err
    assert not (REPO_ROOT / "o.json").exists() and not (tmp_path / "o.json").exists()


def test_defaults_file_holds_the_shared_settings():
    text = (EXPERIMENTS_DIR / "_defaults.toml").read_text()
    assert 'GOMP_SPINCOUNT = "20000"' in text and "../shared/spec_bench/questions_dev.jsonl" in text


def test_makefile_keeps_only_entry_points():
    import re
    targets = re.findall(r"^([a-z][a-z-]*):", (REPO_ROOT / "Makefile").read_text(), re.M)
    assert len(targets) <= 8 and {"app", "test", "traces", "gpu-check"} <= set(targets), targets
