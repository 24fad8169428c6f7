"""Experiments as data: one TOML file per recipe under experiments/, checked strictly before anything runs.

An experiment is a list of engine runs (`python -m engine COMMAND ARGS`) plus what they share:

    description = "one line: what the experiment measures"      (required)
    pair        = "qwen" | "smollm2" | "none"                     (required; see PAIRS)
    dtype       = "bf16"                                          (optional: --dtype of every run that takes it)
    note        = "…"                                             (optional: provenance, caveats)
    [env]       NAME = "value"                                    (optional: on top of _defaults.toml's env)

    [[run]]
    command  = "bench"              engine subcommand, words separated by spaces ("pacer data")
    draft    = "lookup:n=10"        overrides the pair's draft ("" = no --draft: autoregressive decode)
    configs  = ["ar", "fixed:4"]    --configs, joined as the engine's lists are (';' when a spec has commas)
    out      = "docs/results/x.json"   --out; a .json result gets "experiment": "experiments/NAME.toml"
    inputs   = ["traces/a.jsonl"]   positional arguments
    parallel = true                 consecutive parallel runs start together (stagger_s apart), then all wait
    defaults = false                skip _defaults.toml's [args] for this run
    [run.args]  per-task = 1        any long flag of that subcommand; a list is joined like configs,
                                    repeated for an append flag; `true` alone for a switch
    -- or, instead of command: copy = "build/x/*.jsonl", to_prefix = "traces/qwen-" (copy files, renamed)

experiments/_defaults.toml holds [env] (for every run) and [args] (for every run whose subcommand has
the flag and that does not set it). Strings may use {cache} (the speclab model cache, $SPECLAB_CACHE) and {cpu}
(this machine's CPU kind, e.g. 'amd-epyc-avx512bf16': one recipe writes one result file per CPU kind it meets).
Every mistake — an unknown key, a missing field, a wrong type, an unknown pair, a flag the subcommand
lacks, a value its argparse refuses — is one line naming the file and the key, raised before any run.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from engine.paths import REPO_ROOT

EXPERIMENTS_DIR = REPO_ROOT / "experiments"
DEFAULTS_FILE = "_defaults.toml"

# The pairs an experiment may name: (target, draft). "none": the runs take no --target/--draft.
PAIRS = {"qwen": ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"),
         "smollm2": ("smollm2-135m", "smollm2-draft"),
         "none": (None, None)}

# key → (allowed types, required, what is allowed: the words of the one-line error)
TOP_KEYS = {"description": (str, True, "a string"), "pair": (str, True, "one of " + ", ".join(sorted(PAIRS))),
            "dtype": (str, False, "a string (fp32, bf16, …)"), "note": (str, False, "a string"),
            "env": (dict, False, "a table of NAME = \"value\""), "run": (list, True, "an array of [[run]] tables")}
RUN_KEYS = {"command": (str, False, "an engine subcommand"), "draft": (str, False, "a draft spec or \"\""),
            "configs": (list, False, "an array of strings"), "out": (str, False, "a path"),
            "inputs": (list, False, "an array of strings"), "parallel": (bool, False, "true or false"),
            "stagger_s": ((int, float), False, "seconds"), "defaults": (bool, False, "true or false"),
            "args": (dict, False, "a table of flag = value"), "copy": (str, False, "a glob"),
            "to_prefix": (str, False, "a path prefix")}
DEFAULT_KEYS = {"env": (dict, False, "a table"), "args": (dict, False, "a table")}
OWN_FIELDS = {"target": "the pair", "draft": "run.draft", "out": "run.out", "configs": "run.configs"}


class ExperimentError(ValueError):
    """One line: the file, the key and what is allowed."""


@dataclass(frozen=True)
class Step:
    argv: tuple[str, ...] = ()  # engine argv (subcommand words first); empty for a copy step
    out: str | None = None  # the --out path, stamped when it is a .json
    copy: tuple[str, str] | None = None  # (glob, to_prefix)
    parallel: bool = False
    stagger_s: float = 0.0


@dataclass(frozen=True)
class Experiment:
    name: str
    file: str  # relative to the repository root: what result files record
    description: str
    pair: str
    env: tuple[tuple[str, str], ...]
    steps: tuple[Step, ...]
    note: str = ""


def cache_dir() -> Path:
    return Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab"))


def names(root: Path = EXPERIMENTS_DIR) -> list[str]:
    return sorted(p.stem for p in root.glob("*.toml") if not p.name.startswith("_"))


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _check_table(where: str, table: dict, spec: dict) -> None:
    for key in table:
        if key not in spec:
            raise ExperimentError(f"{where}.{key}: unknown key (allowed: {', '.join(spec)})".replace(": .", ": "))
    for key, (types, required, allowed) in spec.items():
        if key not in table:
            if required:
                raise ExperimentError(f"{where}.{key}: missing (expected {allowed})".replace(": .", ": "))
            continue
        v = table[key]
        if not isinstance(v, types) or (isinstance(v, bool) and types in (int, (int, float))):
            raise ExperimentError(f"{where}.{key}: {type(v).__name__} {v!r} is not {allowed}".replace(": .", ": "))


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ExperimentError(f"{_rel(path)}: not valid TOML ({e})") from None


@dataclass(frozen=True)
class Flag:
    """What an experiment needs to know of one long flag of a subcommand."""
    switch: bool = False  # takes no value (store_true): `true` alone passes it
    append: bool = False  # repeatable: an array becomes the flag once per item
    many: bool = False  # takes several words (nargs '*' / '+'): an array becomes those words


class Commands(Protocol):
    """The engine's command line as the checks see it (engine/cli/experiment.py builds it from the
    parsers, so this module holds no argparse)."""

    def names(self) -> list[str]: ...  # every subcommand: "bench", "pacer data", …

    def flags(self, command: str) -> dict[str, Flag]: ...  # long flag name without "--" → Flag

    def refusal(self, argv: list[str]) -> str | None: ...  # what the parser says of argv, None if it parses


def _text(v: Any) -> str:
    s = str(v).replace("{cache}", str(cache_dir()))
    if "{cpu}" in s:
        from engine.kernels.kernel_build import this_cpu

        s = s.replace("{cpu}", this_cpu())
    return s


def _join(items: list) -> str:
    """The engine's list convention: comma-separated, ';' when an item has its own commas."""
    parts = [_text(x) for x in items]
    return (";" if any("," in p for p in parts) else ",").join(parts)


def _flag_args(where: str, flag: str, value: Any, action: Flag) -> list[str]:
    if action.switch:
        if not isinstance(value, bool):
            raise ExperimentError(f"{where}: --{flag} is a switch (allowed: true or false), got {value!r}")
        return [f"--{flag}"] if value else []
    if isinstance(value, dict):
        raise ExperimentError(f"{where}: a table is not a flag value (allowed: string, number, boolean, array)")
    if isinstance(value, list):
        if any(isinstance(x, (list, dict)) for x in value):
            raise ExperimentError(f"{where}: an array of scalars is expected")
        if action.append:
            return [a for x in value for a in (f"--{flag}", _text(x))]
        if action.many:
            return [f"--{flag}", *(_text(x) for x in value)]
        return [f"--{flag}", _join(value)]
    if isinstance(value, bool):
        value = "true" if value else "false"
    return [f"--{flag}", _text(value)]


def _step(where: str, run: dict, top: dict, defaults: dict, commands: Commands) -> Step:
    _check_table(where, run, RUN_KEYS)
    if "copy" in run or "to_prefix" in run:
        if set(run) != {"copy", "to_prefix"}:
            raise ExperimentError(f"{where}: a copy step has exactly copy and to_prefix (got {', '.join(run)})")
        return Step(copy=(run["copy"], run["to_prefix"]))
    if "command" not in run:
        raise ExperimentError(f"{where}.command: missing (expected an engine subcommand, or copy + to_prefix)")
    for key in ("configs", "inputs"):
        if key in run and not all(isinstance(x, str) for x in run[key]):
            raise ExperimentError(f"{where}.{key}: every item must be a string")
    command = run["command"]
    if command not in commands.names():
        raise ExperimentError(f"{where}.command: {command!r} is not an engine subcommand "
                              f"(allowed: {', '.join(sorted(commands.names()))})")
    flags = commands.flags(command)
    for key in run.get("args", {}):
        if key.startswith("-") or key not in flags:
            raise ExperimentError(f"{where}.args.{key}: not a flag of `python -m engine {command}` "
                                  f"(allowed: {', '.join(sorted(k for k in flags if k != 'help'))})")
        if key in OWN_FIELDS:
            raise ExperimentError(f"{where}.args.{key}: set by {OWN_FIELDS[key]}, not in args")
    values: dict[str, Any] = {}
    target, draft = PAIRS[top["pair"]]
    if "draft" in run:
        draft = run["draft"] or None
    for flag, v in (("target", target), ("draft", draft), ("dtype", top.get("dtype"))):
        if v is not None and flag in flags:
            values[flag] = v
    if "draft" in run and run["draft"] and "draft" not in flags:
        raise ExperimentError(f"{where}.draft: `python -m engine {command}` takes no --draft")
    if run.get("defaults", True):
        for flag, v in defaults.get("args", {}).items():
            if flag in flags and flag not in run.get("args", {}):
                values[flag] = v
    values.update(run.get("args", {}))
    for flag, v in (("configs", run.get("configs")), ("out", run.get("out"))):
        if v is not None:
            if flag not in flags:
                raise ExperimentError(f"{where}.{flag}: `python -m engine {command}` takes no --{flag}")
            values[flag] = v
    argv = list(command.split())
    for flag, v in values.items():
        argv += _flag_args(f"{where}.args.{flag}", flag, v, flags[flag])
    argv += [_text(x) for x in run.get("inputs", [])]
    refusal = commands.refusal(argv)  # the engine's own parser: types, choices, required flags
    if refusal:
        raise ExperimentError(f"{where}: {refusal}")
    return Step(argv=tuple(argv), out=_text(run["out"]) if run.get("out") is not None else None, parallel=run.get("parallel", False),
                stagger_s=float(run.get("stagger_s", 0.0)))


def load_defaults(root: Path = EXPERIMENTS_DIR) -> dict:
    path = root / DEFAULTS_FILE
    if not path.exists():
        return {}
    data = _read_toml(path)
    _check_table(_rel(path), data, DEFAULT_KEYS)
    for k, v in data.get("env", {}).items():
        if not isinstance(v, str):
            raise ExperimentError(f"{_rel(path)}: env.{k}: {v!r} is not a string")
    return data


def load(name_or_path: str | Path, commands: Commands, root: Path = EXPERIMENTS_DIR) -> Experiment:
    """The experiment NAME (experiments/NAME.toml) or a path, fully checked against `commands`;
    ExperimentError (one line) otherwise."""
    p = Path(name_or_path)
    path = p if p.suffix == ".toml" else root / f"{p.name}.toml"
    if not path.exists():
        raise ExperimentError(f"{_rel(path)}: no such experiment (known: {', '.join(names(root)) or 'none'})")
    defaults = load_defaults(path.parent)
    where = _rel(path)
    data = _read_toml(path)
    _check_table(where, data, TOP_KEYS)
    if data["pair"] not in PAIRS:
        raise ExperimentError(f"{where}: pair: {data['pair']!r} is not a known pair "
                              f"(allowed: {', '.join(sorted(PAIRS))})")
    env = dict(defaults.get("env", {}))
    for k, v in data.get("env", {}).items():
        if not isinstance(v, str):
            raise ExperimentError(f"{where}: env.{k}: {v!r} is not a string")
        env[k] = v
    if not data["run"] or not all(isinstance(r, dict) for r in data["run"]):
        raise ExperimentError(f"{where}: run: expected one or more [[run]] tables")
    steps = tuple(_step(f"{where}: run[{i}]", r, data, defaults, commands) for i, r in enumerate(data["run"]))
    return Experiment(name=path.stem, file=where, description=data["description"], pair=data["pair"],
                      env=tuple(env.items()), steps=steps, note=data.get("note", ""))


def shell_line(exp: Experiment, step: Step) -> str:
    """What the step runs, as one shell line (for --dry-run and `show`)."""
    import shlex

    if step.copy:
        return f"for f in {step.copy[0]}; do cp \"$f\" \"{step.copy[1]}$(basename \"$f\")\"; done"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in exp.env)
    line = "python -m engine " + " ".join(shlex.quote(a) for a in step.argv)
    return (env + " " if env else "") + line + (" &" if step.parallel else "")


def stamp(path: str | Path, exp: Experiment) -> bool:
    """Add "experiment": the experiment file to a JSON result, atomically; False when it is not one."""
    import json

    from engine.trace.jsonio import write_json_atomic

    p = REPO_ROOT / path if not Path(path).is_absolute() else Path(path)
    if p.suffix != ".json" or not p.is_file():
        return False
    data = json.loads(p.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        return False
    data["experiment"] = exp.file
    write_json_atomic(data, p)
    return True


def _groups(steps: tuple[Step, ...]) -> list[list[Step]]:
    out: list[list[Step]] = []
    for s in steps:
        if s.parallel and out and out[-1][0].parallel:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def run(exp: Experiment, dry_run: bool = False, say: Callable[[str], None] = print) -> int:
    """Run every step in order (a parallel group together); stop at the first failure. Each JSON
    result is stamped with the experiment once its group has finished."""
    if dry_run:
        for s in exp.steps:
            say(shell_line(exp, s))
        if any(s.parallel for s in exp.steps):
            say("wait")
        return 0
    # SPECLAB_EXPERIMENT: a command whose result file is named at run time (the roofline's, by the CPU) records it
    env = os.environ | dict(exp.env) | {"SPECLAB_EXPERIMENT": exp.file}
    for group in _groups(exp.steps):
        procs = []
        for i, s in enumerate(group):
            say(shell_line(exp, s))
            if s.copy:
                files = sorted(glob.glob(str(REPO_ROOT / s.copy[0])))
                for f in files:
                    shutil.copy2(f, REPO_ROOT / f"{s.copy[1]}{Path(f).name}")
                say(f"copied {len(files)} files")
                continue
            if i and s.stagger_s:
                time.sleep(s.stagger_s)
            procs.append(subprocess.Popen([sys.executable, "-m", "engine", *s.argv], cwd=REPO_ROOT, env=env))
        codes = [p.wait() for p in procs]
        if any(codes):
            say(f"experiment {exp.name}: a run exited with {max(codes)}; stopped")
            return max(codes)
        for s in group:
            if s.out and stamp(s.out, exp):
                say(f"{s.out}: stamped experiment {exp.file}")
    return 0
