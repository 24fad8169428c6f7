"""`python -m engine experiment list | show NAME | run NAME [--dry-run]`: the recipes under experiments/
(engine/experiment.py: the schema, the checks, the runner)."""

from __future__ import annotations


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
    from engine.experiment import load, names

    rows = [load(n) for n in names()]
    width = max((len(e.name) for e in rows), default=0)
    for e in rows:
        if a.pair is None or e.pair == a.pair:
            print(f"{e.name:<{width}}  {e.pair:<7}  {e.description}")
    return 0


def run_show(a) -> int:
    from engine.experiment import load, shell_line

    e = load(a.name)
    print(f"{e.file}: {e.description}")
    if e.note:
        print(f"note: {e.note}")
    for s in e.steps:
        print("  " + shell_line(e, s))
    return 0


def run_run(a) -> int:
    from engine.experiment import load, run

    return run(load(a.name), dry_run=a.dry_run)
