"""engine/experiment.py on toy experiment folders and a toy command table (no argparse, no runs):
the strict schema (one line naming the file and the key), argv building, stamping, the dry run."""

import json
from pathlib import Path

import pytest

from engine import experiment as ex
from engine.experiment import ExperimentError, Flag


class ToyCommands:
    """Two subcommands, as engine/cli/experiment.py would describe them."""

    FLAGS = {"bench": {"target": Flag(), "draft": Flag(), "dtype": Flag(), "threads": Flag(), "prompts": Flag(),
                       "per-task": Flag(), "temperatures": Flag(), "configs": Flag(), "out": Flag(),
                       "paired": Flag(switch=True), "what-if-c": Flag(append=True), "traces": Flag(many=True)},
             "pacer train": {"data-dir": Flag(), "out": Flag(), "threads": Flag()}}

    def __init__(self, refuse: str | None = None):
        self.refuse, self.seen = refuse, []

    def names(self):
        return list(self.FLAGS)

    def flags(self, command):
        return self.FLAGS[command]

    def refusal(self, argv):
        self.seen.append(argv)
        return self.refuse


GOOD = '''description = "toy"
pair = "qwen"
dtype = "bf16"

[[run]]
command = "bench"
configs = ["ar", "confidence:0.5,trim=1"]
out = "docs/results/toy.json"

[run.args]
per-task = 2
temperatures = [0, 0.7]
'''


def folder(tmp_path: Path, text: str, defaults: str | None = None) -> Path:
    d = tmp_path / "experiments"
    d.mkdir(exist_ok=True)
    (d / "toy.toml").write_text(text)
    if defaults is not None:
        (d / "_defaults.toml").write_text(defaults)
    return d


def load(tmp_path, text, defaults=None, commands=None):
    return ex.load("toy", commands or ToyCommands(), root=folder(tmp_path, text, defaults))


def test_a_good_file_builds_the_engine_argv(tmp_path):
    e = load(tmp_path, GOOD, defaults='[env]\nOMP_WAIT_POLICY = "PASSIVE"\n[args]\nthreads = 2\nprompts = "q.jsonl"\n')
    (step,) = e.steps
    assert step.argv == ("bench", "--target", "qwen2.5-coder-1.5b", "--draft", "qwen2.5-coder-0.5b", "--dtype", "bf16",
                         "--threads", "2", "--prompts", "q.jsonl", "--per-task", "2", "--temperatures", "0,0.7",
                         "--configs", "ar;confidence:0.5,trim=1", "--out", "docs/results/toy.json")
    assert e.env == (("OMP_WAIT_POLICY", "PASSIVE"),) and e.pair == "qwen" and e.description == "toy"
    assert step.out == "docs/results/toy.json"


def test_switches_append_flags_many_words_draft_override_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLAB_CACHE", "/c")
    e = load(tmp_path, '''description = "t"
pair = "smollm2"
[[run]]
command = "bench"
draft = "lookup:n=10"
[run.args]
paired = true
what-if-c = [0.05, 0.2]
traces = ["a.jsonl", "b.jsonl"]
prompts = "{cache}/p.jsonl"
threads = 1
[[run]]
command = "bench"
draft = ""
defaults = false
[run.args]
paired = false
''', defaults='[args]\nthreads = 2\nprompts = "q.jsonl"\n')
    a, b = e.steps
    assert a.argv == ("bench", "--target", "smollm2-135m", "--draft", "lookup:n=10", "--paired", "--what-if-c", "0.05",
                      "--what-if-c", "0.2", "--traces", "a.jsonl", "b.jsonl", "--prompts", "/c/p.jsonl", "--threads", "1")
    assert b.argv == ("bench", "--target", "smollm2-135m")  # no draft, no defaults, a false switch left out


def test_cpu_placeholder_names_this_cpu_kind_in_argv_and_stamped_out(tmp_path, monkeypatch):
    import engine.kernels.kernel_build as kb

    monkeypatch.setattr(kb, "this_cpu", lambda: "amd-epyc-avx512bf16")
    e = load(tmp_path, GOOD.replace('out = "docs/results/toy.json"', 'out = "docs/results/toy-{cpu}.json"'))
    (s,) = e.steps
    assert s.out == "docs/results/toy-amd-epyc-avx512bf16.json"  # the file the run writes is the one stamped
    assert s.argv[s.argv.index("--out") + 1] == s.out


def test_cpu_slug_names_the_vector_class():
    from engine.kernels.kernel_build import cpu_slug

    assert cpu_slug("AMD EPYC", {"avx2", "fma"}) == "amd-epyc-avx2"
    assert cpu_slug("AMD EPYC", {"avx2", "avx512f", "avx512_bf16"}) == "amd-epyc-avx512bf16"


def test_pair_none_and_a_command_without_the_pair_flags(tmp_path):
    e = load(tmp_path, 'description = "t"\npair = "qwen"\n[[run]]\ncommand = "pacer train"\nout = "w.safetensors"\n')
    assert e.steps[0].argv == ("pacer", "train", "--out", "w.safetensors")


@pytest.mark.parametrize("text, where, allowed", [
    (GOOD + "colour = \"red\"\n", "run[0].args.colour", "not a flag"),  # TOML: after [run.args], so an arg
    (GOOD.replace('pair = "qwen"', 'pair = "qwen"\ncolour = "red"'), "colour: unknown key", "allowed: description, pair"),
    (GOOD.replace('command = "bench"', 'command = "bench"\nretries = 2'), "run[0].retries: unknown key", "allowed: command"),
    (GOOD.replace('description = "toy"\n', ""), "description: missing", "expected a string"),
    (GOOD.replace('pair = "qwen"\n', ""), "pair: missing", "one of none, qwen, smollm2"),
    (GOOD.replace('description = "toy"', "description = 3"), "description: int 3 is not a string", ""),
    (GOOD.replace('out = "docs/results/toy.json"', "out = 7"), "run[0].out: int 7 is not a path", ""),
    (GOOD.replace('configs = ["ar", "confidence:0.5,trim=1"]', 'configs = "ar"'), "run[0].configs: str", "an array"),
    (GOOD.replace('pair = "qwen"', 'pair = "llama"'), "pair: 'llama' is not a known pair", "allowed: none, qwen, smollm2"),
    (GOOD.replace('command = "bench"', 'command = "benchh"'), "run[0].command: 'benchh' is not an engine subcommand",
     "allowed: bench, pacer train"),
    (GOOD.replace("per-task = 2", "out = \"x.json\""), "run[0].args.out: set by run.out", ""),
    (GOOD.replace("per-task = 2", "paired = 1"), "--paired is a switch", "allowed: true or false"),
    (GOOD.replace("[[run]]", "[[run]]\nparallel = \"yes\""), "run[0].parallel: str 'yes' is not true or false", ""),
    ('description = "t"\npair = "qwen"\nrun = []\n', "run: expected one or more [[run]] tables", ""),
    ("description = \"t\"\npair = ", "not valid TOML", ""),
])
def test_bad_input_is_one_line_naming_the_file_and_the_key(tmp_path, text, where, allowed):
    commands = ToyCommands()
    with pytest.raises(ExperimentError) as e:
        load(tmp_path, text, commands=commands)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(tmp_path / "experiments" / "toy.toml"))
    assert where in msg and where in msg and allowed in msg, msg


def test_the_parser_refusal_is_one_line_and_nothing_runs_or_is_written(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ex.subprocess, "Popen", lambda *a, **k: calls.append(a))
    d = folder(tmp_path, GOOD)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(ExperimentError, match=r"toy.toml: run\[0\]: argument --per-task: invalid int value"):
        ex.load("toy", ToyCommands(refuse="argument --per-task: invalid int value: 'x'"), root=d)
    assert calls == [] and sorted(p.name for p in tmp_path.rglob("*")) == before


def test_defaults_file_is_checked_too(tmp_path):
    with pytest.raises(ExperimentError, match=r"_defaults.toml.*colour: unknown key \(allowed: env, args\)"):
        load(tmp_path, GOOD, defaults="colour = 1\n")
    with pytest.raises(ExperimentError, match=r"_defaults.toml: env.X: 1 is not a string"):
        load(tmp_path, GOOD, defaults="[env]\nX = 1\n")


def test_an_unknown_experiment_names_the_known_ones(tmp_path):
    d = folder(tmp_path, GOOD)
    with pytest.raises(ExperimentError, match=r"nope.toml: no such experiment \(known: toy\)"):
        ex.load("nope", ToyCommands(), root=d)
    assert ex.names(d) == ["toy"]


def test_dry_run_prints_and_runs_nothing(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ex.subprocess, "Popen", lambda *a, **k: calls.append(a))
    e = load(tmp_path, GOOD, defaults='[env]\nOMP_WAIT_POLICY = "PASSIVE"\n')
    said = []
    assert ex.run(e, dry_run=True, say=said.append) == 0
    assert calls == [] and said == ["OMP_WAIT_POLICY=PASSIVE python -m engine bench --target qwen2.5-coder-1.5b "
                                    "--draft qwen2.5-coder-0.5b --dtype bf16 --per-task 2 --temperatures 0,0.7 "
                                    "--configs 'ar;confidence:0.5,trim=1' --out docs/results/toy.json"]


class FakeProc:
    def __init__(self, code):
        self.code = code

    def wait(self):
        return self.code


def test_run_stamps_the_json_result_and_stops_at_a_failure(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"rows": [], "command": "x"}, indent=1))
    text = GOOD.replace('out = "docs/results/toy.json"', f'out = "{out}"')
    e = load(tmp_path, text + '\n[[run]]\ncommand = "pacer train"\n')
    codes = iter([0, 3])
    started, envs = [], []
    monkeypatch.setattr(ex.subprocess, "Popen", lambda argv, **k: started.append(argv) or envs.append(k["env"])
                        or FakeProc(next(codes)))
    assert ex.run(e, say=lambda s: None) == 3
    assert len(started) == 2 and started[0][1:4] == ["-m", "engine", "bench"]
    assert envs[0]["SPECLAB_EXPERIMENT"] == e.file  # a result named at run time can record it too
    data = json.loads(out.read_text())
    assert data == {"rows": [], "command": "x", "experiment": e.file}
    assert not list(tmp_path.glob("*.tmp"))


def test_a_failed_run_is_not_stamped(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text("{}")
    e = load(tmp_path, GOOD.replace('out = "docs/results/toy.json"', f'out = "{out}"'))
    monkeypatch.setattr(ex.subprocess, "Popen", lambda argv, **k: FakeProc(1))
    assert ex.run(e, say=lambda s: None) == 1 and out.read_text() == "{}"


def test_parallel_runs_start_together(tmp_path, monkeypatch):
    e = load(tmp_path, 'description = "t"\npair = "none"\n' + '[[run]]\ncommand = "pacer train"\nparallel = true\n' * 2)
    events = []

    class P(FakeProc):
        def wait(self):
            events.append("wait")
            return 0
    monkeypatch.setattr(ex.subprocess, "Popen", lambda argv, **k: events.append("start") or P(0))
    assert ex.run(e, say=lambda s: None) == 0 and events == ["start", "start", "wait", "wait"]


def test_copy_step(tmp_path, monkeypatch):
    monkeypatch.setattr(ex, "REPO_ROOT", tmp_path)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "ar-t0.jsonl").write_text("x")
    (tmp_path / "t").mkdir()
    e = load(tmp_path, 'description = "t"\npair = "none"\n[[run]]\ncopy = "b/*.jsonl"\nto_prefix = "t/q-"\n')
    assert ex.run(e, say=lambda s: None) == 0 and (tmp_path / "t" / "q-ar-t0.jsonl").read_text() == "x"
    with pytest.raises(ExperimentError, match="a copy step has exactly copy and to_prefix"):
        load(tmp_path, 'description = "t"\npair = "none"\n[[run]]\ncopy = "b/*"\nto_prefix = "t/"\nout = "x"\n')
