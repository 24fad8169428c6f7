"""Command-line front ends: one module per command group, each with `add_parser(sub)` (its parsers set
`func`), listed in CLI_MODULES below; engine/__main__.py dispatches. argparse lives here only; flags
shared by several commands are defined once in common.py."""

from __future__ import annotations

import argparse
import importlib

# One module per command group; each provides add_parser(sub), whose parsers set `func`.
CLI_MODULES = ("engine.cli.decode", "engine.cli.trace", "engine.cli.bench", "engine.cli.multibench",
               "engine.cli.audit", "engine.cli.sweep", "engine.cli.probes", "engine.cli.costs",
               "engine.cli.analysis", "engine.cli.advise", "engine.cli.pacer", "engine.cli.dpace", "engine.cli.eagle",
               "engine.cli.interop", "engine.cli.peers", "engine.cli.roofline",
               "engine.cli.models", "engine.cli.experiment", "engine.cli.results")


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    """`python -m engine`'s parser: every command group's subcommands."""
    ap = argparse.ArgumentParser(prog="python -m engine", description=description,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for mod in CLI_MODULES:
        importlib.import_module(mod).add_parser(sub)
    return ap
