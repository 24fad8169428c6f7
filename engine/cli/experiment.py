"""`python -m engine experiment list | show NAME | run NAME [--dry-run]`: the recipes under experiments/
(engine/experiment.py: the schema, the checks, the runner)."""

from __future__ import annotations

import argparse

from engine.experiment import Flag


class _Refused(Exception):
    pass


def _refuse(msg: str):
    raise _Refused(msg)


class EngineCommands:
    """engine/experiment.py's view of `python -m engine`: the subcommands, their long flags, and whether
    an argv parses. Built once from the engine's own parsers, each made to raise instead of exiting."""

    def __init__(self) -> None:
        from engine.cli import build_parser

        self.root = build_parser()
        self.parsers: dict[str, argparse.ArgumentParser] = {}
        stack = [("", self.root)]
        while stack:
            prefix, p = stack.pop()
            p.error = _refuse
            for act in p._actions:
                if isinstance(act, argparse._SubParsersAction):
                    for name, sp in act.choices.items():
                        words = f"{prefix} {name}".strip()
                        self.parsers[words] = sp
                        stack.append((words, sp))

    def names(self) -> list[str]:
        return list(self.parsers)

    def flags(self, command: str) -> dict[str, Flag]:
        """Long flag name without '--' → Flag (hidden aliases included: they parse)."""
        return {o[2:]: Flag(switch=act.nargs == 0, append=isinstance(act, argparse._AppendAction),
                            many=act.nargs in ("*", "+"))
                for act in self.parsers[command]._actions for o in act.option_strings if o.startswith("--")}

    def refusal(self, argv: list[str]) -> str | None:
        try:
            self.root.parse_args(argv)
        except _Refused as e:
            return str(e)
        return None


_COMMANDS: EngineCommands | None = None


def engine_commands() -> EngineCommands:
    global _COMMANDS
    if _COMMANDS is None:
        _COMMANDS = EngineCommands()
    return _COMMANDS


def load(name: str):
    from engine.experiment import load as load_experiment

    return load_experiment(name, engine_commands())


def add_parser(sub) -> None:
    p = sub.add_parser("experiment", help="list, show or run a recipe of experiments/ (one TOML file each)")
    es = p.add_subparsers(dest="experiment_cmd", required=True)
    ls = es.add_parser("list", help="every experiment: name, pair, what it measures")
    ls.add_argument("--pair", default=None, help="only the experiments of this pair (qwen, smollm2, none)")
    ls.set_defaults(func=run_list)
    sh = es.add_parser("show", help="an experiment's description and the exact commands it runs")
    sh.add_argument("name", help="experiment name (experiments/NAME.toml) or a path to a .toml")
    sh.set_defaults(func=run_show)
    r = es.add_parser("run", help="run an experiment; every JSON result it writes names the experiment")
    r.add_argument("name", help="experiment name (experiments/NAME.toml) or a path to a .toml")
    r.add_argument("--dry-run", action="store_true", help="print the commands only (checked, nothing runs)")
    r.set_defaults(func=run_run)


def run_list(a) -> int:
    from engine.experiment import names

    rows = [load(n) for n in names()]
    width = max((len(e.name) for e in rows), default=0)
    for e in rows:
        if a.pair is None or e.pair == a.pair:
            print(f"{e.name:<{width}}  {e.pair:<7}  {e.description}")
    return 0


def run_show(a) -> int:
    from engine.experiment import shell_line

    e = load(a.name)
    print(f"{e.file}: {e.description}")
    if e.note:
        print(f"note: {e.note}")
    for s in e.steps:
        print("  " + shell_line(e, s))
    return 0


def run_run(a) -> int:
    from engine.experiment import run

    return run(load(a.name), dry_run=a.dry_run)
