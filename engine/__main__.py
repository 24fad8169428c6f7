"""speclab command line: `python -m engine COMMAND ...` — a dispatcher. Each command group's flags
and handler live in one module of engine/cli/ (argparse lives only there); flags that several
commands share are defined once in engine/cli/common.py.

    decode      decode prompts (speculatively or not) and write a per-step trace   cli/decode.py
    validate    print a trace's summary, or its first error                        cli/trace.py
    export      a trace to Parquet, Perfetto step timings or a Spec-Bench file     cli/trace.py
    bench       policies and HF assisted generation, interleaved                   cli/bench.py
    multibench  multi-draft and block verifiers over K, L, T                       cli/multibench.py
    audit       exact losslessness audit of every verifier                         cli/audit.py
    sweep       a grid of decode configurations on Ray; sweep-bench: 1 vs N workers  cli/sweep.py
    step-probe, gpu-check, loadbench   measurement probes                          cli/probes.py
    roofline    read bandwidth and each model and path against the memory roofline cli/roofline.py
    advise      which window K to use per pair and task, and the oracle's headroom cli/advise.py
    costs, analysis, pacer, dpace, import, diagnose, models, vocab                 cli/<name>.py (diagnose: cli/interop.py)
    experiment  list | show | run a recipe of experiments/ (TOML)                  cli/experiment.py
    results     render docs/results.md and the README's table from docs/results/   cli/results.py

`python -m engine COMMAND --help` lists a command's flags.
"""

from __future__ import annotations

import sys

from engine.cli import CLI_MODULES, build_parser as _build_parser  # noqa: F401  (CLI_MODULES: re-exported)


def build_parser():
    return _build_parser(description=__doc__)


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
