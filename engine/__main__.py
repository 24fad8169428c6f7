"""speclab command line: `python -m engine COMMAND ...` — a dispatcher. Each command group's flags
and handler live in one module of engine/cli/ (argparse lives only there and here); flags that several
commands share are defined once in engine/cli/common.py.

    decode      decode prompts (speculatively or not) and write a per-step trace   cli/decode.py
    validate    print a trace's summary, or its first error                        cli/trace.py
    export      a trace to Parquet, Perfetto step timings or a Spec-Bench file     cli/trace.py
    bench       policies and HF assisted generation, interleaved                   cli/bench.py
    multibench  multi-draft and block verifiers over K, L, T                       cli/multibench.py
    audit       exact losslessness audit of every verifier                         cli/audit.py
    sweep       a grid of decode configurations on Ray; sweep-bench: 1 vs N workers  cli/sweep.py
    step-probe, gpu-check, loadbench   measurement probes                          cli/probes.py
    costs, analysis, pacer, dpace, import, diagnose, models, vocab                 cli/<name>.py (diagnose: cli/interop.py)

`python -m engine COMMAND --help` lists a command's flags.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# One module per command group; each provides add_parser(sub), whose parsers set `func`.
CLI_MODULES = ("engine.cli.decode", "engine.cli.trace", "engine.cli.bench", "engine.cli.multibench",
               "engine.cli.audit", "engine.cli.sweep", "engine.cli.probes", "engine.cli.costs",
               "engine.cli.analysis", "engine.cli.pacer", "engine.cli.dpace", "engine.cli.interop",
               "engine.cli.models")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for mod in CLI_MODULES:
        importlib.import_module(mod).add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        return a.func(a)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # disk full, permissions: one line naming the file, not a traceback
        print(f"error: {e.filename + ': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: the trace so far is valid (no footer)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
