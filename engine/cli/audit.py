"""`python -m engine audit`: the exact losslessness audit of every verifier on toy models
(engine.bench.audit enumerates; engine.bench.audit_report writes docs/audit.md and docs/results/audit.csv).

Exit status 1 when a verifier listed as lossless (engine.verify.LOSSLESS) is not.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("audit", help="exact losslessness audit of every verifier on toy models")
    p.add_argument("--verifiers", default=None, help="comma list of engine.verify.VERIFIERS names "
                                                     "(default: all registered + the lossy BV near-miss)")
    p.add_argument("--quick", action="store_true", help="V = 2, γ ≤ 2, K ≤ 2 only (seconds)")
    p.add_argument("--full", action="store_true", help="also V = 2, γ = 4, K = 3 (4096 draft tuples per case)")
    p.add_argument("--markdown", default="docs/audit.md")
    p.add_argument("--csv", default="docs/results/audit.csv")
    p.add_argument("--from-csv", default=None, help="rebuild the markdown from an earlier CSV (no enumeration)")
    p.set_defaults(func=cmd_audit)


def cmd_audit(a) -> int:
    from engine.bench.audit import FULL_GRID, GRID, AuditRow, run_audit
    from engine.bench.audit_report import read_csv, summary_markdown, write_csv
    from engine.trace.jsonio import write_text_atomic
    from engine.verify import LOSSLESS

    names = [s.strip() for s in a.verifiers.split(",")] if a.verifiers else None
    grid = tuple(x for x in GRID if x[0] == 2 and x[1] <= 2 and x[2] <= 2) if a.quick else (
        FULL_GRID if a.full else GRID)
    t0 = time.perf_counter()
    command = "python -m engine audit" + (" --quick" if a.quick else " --full" if a.full else "") + (
        f" --verifiers {a.verifiers}" if a.verifiers else "")
    if a.from_csv:
        md = summary_markdown(read_csv(Path(a.from_csv)), command)
        print(md)
        if a.markdown:
            write_text_atomic(md, a.markdown)
        return 0

    def progress(r: AuditRow) -> None:
        flag = "" if r.lossless() else "  LOSSY"
        print(f"  {r.verifier:34s} V={r.vocab} γ={r.gamma} K={r.k} {r.case:14s} err {r.lossless_error:.1e} "
              f"E[acc] {r.expected_accepted:.4f}{flag}  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    rows = run_audit(names, grid, progress=progress)
    md = summary_markdown(rows, command)
    print(md)
    print(f"{len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    if a.csv:
        write_csv(rows, Path(a.csv))
    if a.markdown:
        write_text_atomic(md, a.markdown)
    bad = [r for r in rows if not r.lossless() and r.verifier in LOSSLESS]
    return 1 if bad else 0
