"""`python -m engine sweep GRID.toml --out DIR` (engine.bench.sweep) and `python -m engine sweep-bench`
(engine.bench.sweep_bench: the same grid with 1 and N local Ray workers).

Worked examples:
    python -m engine sweep docs/examples/sweep-tiny.toml --out runs/sweep-tiny --dry-run
    python -m engine sweep-bench --make-tiny          # only build the tiny models of the example grid
    python -m engine sweep-bench --workers 1 2        # tiny grid, 1 vs 2 workers, ABBA order
"""

from __future__ import annotations

import sys
import time

from engine.cli import common


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of decode configurations on Ray (resumable)")
    p.add_argument("grid", help="grid TOML (see docs/sweeps.md)")
    common.add_out(p, "sweep folder: traces/, summary.parquet, sweep-log.jsonl", required=True)
    p.add_argument("--workers", type=int, default=None,
                   help="actors to start (default: one per GPU in the cluster, else one per CPU)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS, else local)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per worker (default: grid's, else torch's)")
    p.add_argument("--max-attempts", type=int, default=3, help="attempts per task when workers die")
    p.add_argument("--dry-run", action="store_true", help="list the tasks and which are done; run nothing")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_sweep)
    add_bench_parser(sub)


def cmd_sweep(a) -> int:
    from engine.bench.sweep import expand_grid, load_grid, run_sweep, trace_path, valid_trace

    grid = load_grid(a.grid)
    if a.dry_run:
        tasks = expand_grid(grid)
        done = 0
        for t in tasks:
            ok = valid_trace(trace_path(a.out, t.task_id), t.task_id) is not None
            done += ok
            c = t.config
            draft = f" draft={c['drafter']}" if c.get("drafter") else ""
            print(f"{'done' if ok else 'todo'} {t.task_id} {t.meta['pair']} {c['policy']}{draft} {c['verifier']} "
                  f"T={c['temperature']} max={c['max_new_tokens']} {t.meta['task']}#{t.meta['shard']} "
                  f"({len(t.prompts)} prompts)")
        print(f"{len(tasks)} tasks, {done} done, {len(tasks) - done} to run")
        return 0
    r = run_sweep(grid, a.out, workers=a.workers, address=a.address, threads=a.threads,
                  progress=not a.no_progress, max_attempts=a.max_attempts)
    print(f"{r.out_dir}: {r.tasks} tasks: {r.executed} run, {r.skipped} already done, {r.retried} retried after "
          f"a worker died, {len(r.failed)} failed; {r.workers} workers, {r.wall_s:.1f} s")
    for tid, err in r.failed.items():
        print(f"  FAILED {tid}: {err}", file=sys.stderr)
    print(f"summary: {r.summary_path}")
    return 0 if r.ok else 1


def add_bench_parser(sub) -> None:
    from engine.bench.sweep_bench import TINY_DIR, TINY_GRID

    p = sub.add_parser("sweep-bench", help="the same sweep with 1 and with N local Ray workers: wall-clock ratio")
    p.add_argument("--grid", default=str(TINY_GRID), help="grid TOML (default: docs/examples/sweep-tiny.toml)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts, first is the baseline")
    p.add_argument("--threads", type=int, default=None, help="torch threads per worker (default: the grid's)")
    p.add_argument("--repeat", type=int, default=2, help="runs per worker count, ABBA order (default 2)")
    p.add_argument("--keep", default=None, help="folder for the runs' outputs (default: a temp folder)")
    p.add_argument("--make-tiny", action="store_true", help=f"only build the tiny models into {TINY_DIR}")
    p.add_argument("--json", default=None, help="also write the result as JSON here")
    p.set_defaults(func=cmd_sweep_bench)


def cmd_sweep_bench(a) -> int:
    from engine.bench.sweep_bench import TINY_DIR, bench, make_tiny_models
    from engine.trace.jsonio import write_json_atomic

    if a.make_tiny or not (TINY_DIR / "target" / "config.json").exists():
        t, d = make_tiny_models()
        print(f"tiny models: {t}, {d}")
        if a.make_tiny:
            return 0
    t0 = time.time()
    result = bench(a.grid, a.workers, a.threads, a.keep, a.repeat)
    result["total_s"] = round(time.time() - t0, 1)
    if a.json:
        write_json_atomic(result, a.json)
    return 0
