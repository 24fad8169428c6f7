"""`python -m engine results [--check]`: render docs/results.md and the README's results block from
docs/results/*.json (engine/results.py); --check exits 1, naming the files, when the committed ones differ."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("results", help="render docs/results.md and the README's table from docs/results/*.json")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if docs/results.md or the README block differs from the JSON")
    p.set_defaults(func=run)


def run(a) -> int:
    import sys

    from engine.results import rendered_files, stale_files
    from engine.trace.jsonio import write_text_atomic

    files = rendered_files()
    if a.check:
        stale = stale_files(files)
        for path in stale:
            print(f"{path}: differs from what docs/results/*.json renders: run `python -m engine results`",
                  file=sys.stderr)
        return 1 if stale else 0
    for path, text in files.items():
        write_text_atomic(text, path)
        print(f"wrote {path}")
    return 0
