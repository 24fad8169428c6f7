"""Grid sweeps on Ray: `python -m engine sweep GRID.toml --out DIR` — the driver.

A grid (TOML) names model pairs, drafters (the pair's draft model, or model-free lookup / suffix),
window policies, verifiers, temperatures, prompt files and token budgets. Its cartesian product, split
into prompt shards, gives the *tasks*; each task decodes one shard with one configuration through
`engine.run.run_requests` (the same decode generator as the CLI) and writes one trace,
`DIR/traces/<task_id>.jsonl`.

    task id   = sha256 of the canonical task config + the shard's prompts (text, category, id):
                the same work always has the same id, whatever the grid file looks like around it.
    resumable   a task whose trace exists, loads (engine.trace.format.load_trace), is complete and carries
                its own id is skipped; a changed grid runs only the tasks that are new.
    atomic      a worker writes `DIR/traces/.<id>.<attempt>.<nonce>.jsonl.tmp` and moves it onto
                `<id>.jsonl` atomically (a hard link, which never overwrites another attempt's trace;
                os.replace where links are unsupported), so a trace exists whole or not at all.
    faults      one Ray actor per accelerator (per CPU slot without one) loads a pair once and keeps
                it for the tasks that follow. An actor that dies mid-task is restarted by Ray
                (max_restarts) but never retries by itself (max_task_retries=0): the driver puts the
                task back in the queue and the next free live actor runs it. A worker checks for a
                valid trace before running, so a task can never be written twice.
    summary     DIR/summary.parquet, one row per task (engine.bench.sweep_summary: config columns,
                task, tokens/s, the per-call figures of engine.metrics, target calls, speedup over the
                autoregressive task on the same shard); `load_sweep_summary(DIR)` reads it.

Modules: sweep_grid (grid → tasks), sweep_worker (the actor, atomic publishing), sweep_summary
(the table), this one (the driver); the CLI is engine/cli/sweep.py. The names of all four are
importable from here.

Ray starts locally unless RAY_ADDRESS or --address names a cluster (docs/sweeps.md). Only one
driver may work on a DIR at a time. Nothing here imports torch or ray at module level, so the app
can import `load_sweep_summary` / `speedup_matrix` cheaply.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from engine.bench.sweep_grid import (AUTOREGRESSIVE, LOG_NAME, MODEL_DRAFTER, NO_DRAFTER, SUMMARY_NAME,  # noqa: F401
                                     Task, expand_grid, load_grid, make_task_id, trace_path)
from engine.bench.sweep_summary import (BASELINE_KEYS, add_speedup, drafter_of, load_sweep_summary,  # noqa: F401
                                        speedup_matrix, summary_rows, with_settings, write_summary)
from engine.bench.sweep_worker import SweepWorker, publish, valid_trace  # noqa: F401


@dataclass
class SweepResult:
    out_dir: str
    tasks: int = 0
    skipped: int = 0  # already had a valid trace
    executed: int = 0  # traces written by this run
    present: int = 0  # found written when (re)tried: a worker died after its rename
    retried: int = 0  # attempts lost to a dead worker and resubmitted
    failed: dict[str, str] = field(default_factory=dict)  # task id → error
    workers: int = 0  # actors started
    startup_s: float = 0.0  # from the driver's start until the first worker was ready (Ray, actor, imports)
    tokens: int = 0
    wall_s: float = 0.0
    summary_path: str | None = None
    started: float = field(default=0.0, repr=False)  # perf_counter at the start

    @property
    def ok(self) -> bool:
        return not self.failed


def _log(out_dir: Path, event: str, **fields: Any) -> None:
    with open(out_dir / LOG_NAME, "a", encoding="utf-8") as f:
        f.write(json.dumps({"time": round(time.time(), 3), "event": event, **fields}) + "\n")


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the cluster named by `address` / RAY_ADDRESS, else start Ray locally (no dashboard)."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False)


def default_workers(device: str = "auto") -> tuple[int, float, float]:
    """(workers, cpus per worker, gpus per worker): one per accelerator, else one per CPU slot."""
    import ray

    res = ray.cluster_resources()
    gpus = int(res.get("GPU", 0))
    if gpus and device != "cpu":
        return gpus, 1, 1
    return max(1, int(res.get("CPU", 1))), 1, 0


def run_sweep(grid: dict[str, Any] | str | os.PathLike, out_dir: str | os.PathLike, workers: int | None = None,
              address: str | None = None, threads: int | None = None, progress: bool = True,
              max_attempts: int = 3, on_event: Callable[[str, dict[str, Any]], None] | None = None) -> SweepResult:
    """Run every task of `grid` that has no valid trace in `out_dir`; write the summary."""
    if not isinstance(grid, dict):
        grid = load_grid(grid)
    tasks = expand_grid(grid)
    out = Path(out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    for stale in (out / "traces").glob(".*.tmp"):  # left by a killed worker of an earlier run
        stale.unlink(missing_ok=True)
    res = SweepResult(str(out), tasks=len(tasks))
    t_start = res.started = time.perf_counter()
    done = {t.task_id: tr for t in tasks if (tr := valid_trace(trace_path(out, t.task_id), t.task_id)) is not None}
    todo = [t for t in tasks if t.task_id not in done]
    for t in todo:  # a final trace that does not validate (corrupt, truncated by hand, old) is redone
        trace_path(out, t.task_id).unlink(missing_ok=True)
    res.skipped = len(done)
    _log(out, "sweep_start", tasks=len(tasks), todo=len(todo), grid=grid.get("_path"))
    emit = on_event or (lambda ev, info: None)
    if todo:
        _drive(todo, out, res, grid, workers, address, threads, progress, max_attempts, emit)
    res.summary_path = str(write_summary(out, [t.task_id for t in tasks], loaded=done))
    res.wall_s = time.perf_counter() - t_start
    _log(out, "sweep_end", executed=res.executed, skipped=res.skipped, failed=len(res.failed),
         retried=res.retried, wall_s=round(res.wall_s, 3))
    return res


class _Queue:
    """Tasks waiting for a worker, one FIFO per model pair: a worker gets a task of the pair it
    already holds while there is one, else the oldest pair's next task."""

    def __init__(self, tasks: list[Task]) -> None:
        self._q: dict[tuple, deque] = {}
        for t in tasks:
            self._q.setdefault(t.pair_key, deque()).append(t)

    def __len__(self) -> int:
        return sum(len(q) for q in self._q.values())

    def pop(self, prefer: tuple | None) -> Task:
        key = prefer if self._q.get(prefer) else next(k for k, q in self._q.items() if q)
        return self._q[key].popleft()

    def push_front(self, task: Task) -> None:
        self._q.setdefault(task.pair_key, deque()).appendleft(task)


def _drive(todo: list[Task], out: Path, res: SweepResult, grid: dict, workers: int | None, address: str | None,
           threads: int | None, progress: bool, max_attempts: int, emit) -> None:
    import ray
    from ray.exceptions import RayActorError, RayTaskError
    from tqdm import tqdm

    init_ray(address)
    device = str(grid.get("device", "auto"))
    n_default, cpus, gpus = default_workers(device)
    n = max(1, min(workers or n_default, len(todo)))
    threads = threads or grid.get("threads") or None
    Actor = ray.remote(SweepWorker).options(num_cpus=cpus, num_gpus=gpus, max_restarts=3, max_task_retries=0)
    actors = [Actor.remote(threads=threads, device=device) for _ in range(n)]
    res.workers = n
    info: dict[Any, dict] = {}  # actor → last ping
    pings = {a.ping.remote(): a for a in actors}  # actors not yet (or no longer) ready
    idle: list = []
    last_pair: dict[Any, tuple] = {}
    pending = _Queue(todo)
    attempts: dict[str, int] = {}
    inflight: dict[Any, tuple] = {}  # ref → (actor, task, tmp name)
    bars = [tqdm(total=len(todo), unit="task", desc="tasks", position=0, disable=not progress),
            tqdm(total=sum(t.token_budget for t in todo), unit="tok", desc="tokens", position=1,
                 disable=not progress, smoothing=0.1)]
    try:
        while pending or inflight:
            while idle and pending:
                a = idle.pop()
                pick = pending.pop(last_pair.get(a))
                attempts[pick.task_id] = attempts.get(pick.task_id, 0) + 1
                tmp = f".{pick.task_id}.a{attempts[pick.task_id]}.{uuid.uuid4().hex[:8]}.jsonl.tmp"
                inflight[a.run.remote(pick, str(out), tmp)] = (a, pick, tmp)
                last_pair[a] = pick.pair_key
                ev = {"task_id": pick.task_id, "attempt": attempts[pick.task_id], "tmp": str(out / "traces" / tmp),
                      **info.get(a, {})}
                _log(out, "submit", **ev)
                emit("submit", ev)
            if not inflight and not pings:
                raise RuntimeError("no live sweep workers left")
            ready, _ = ray.wait([*inflight, *pings], num_returns=1, timeout=1.0)
            for ref in ready:
                if ref in pings:
                    a = pings.pop(ref)
                    try:
                        info[a] = ray.get(ref)
                        idle.append(a)
                        res.startup_s = res.startup_s or time.perf_counter() - res.started
                    except RayActorError as e:  # gone for good (restarts exhausted)
                        _log(out, "worker_lost", error=str(e).splitlines()[0])
                    continue
                a, task, tmp = inflight.pop(ref)
                tid = task.task_id
                try:
                    r = ray.get(ref)
                except RayActorError as e:
                    (out / "traces" / tmp).unlink(missing_ok=True)
                    ev = {"task_id": tid, "attempt": attempts[tid], "error": str(e).splitlines()[0], **info.get(a, {})}
                    _log(out, "worker_died", **ev)
                    emit("worker_died", ev)
                    res.retried += 1
                    if attempts[tid] < max_attempts:
                        pending.push_front(task)
                    else:
                        res.failed[tid] = f"worker died {attempts[tid]} times"
                        bars[0].update(1)
                    pings[a.ping.remote()] = a  # back in the pool once Ray has restarted it
                    continue
                except RayTaskError as e:  # the task itself raised: deterministic, not retried
                    cause = e.cause if getattr(e, "cause", None) is not None else e
                    msg = f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"
                    res.failed[tid] = msg
                    _log(out, "task_failed", task_id=tid, error=msg)
                    emit("task_failed", {"task_id": tid, "error": msg})
                    bars[0].update(1)
                    idle.append(a)
                    continue
                idle.append(a)
                if r["status"] == "written":
                    res.executed += 1
                    res.tokens += r["summary"]["new_tokens"]
                else:
                    res.present += 1
                _log(out, r["status"], task_id=tid, attempt=attempts[tid], pid=r["pid"], host=r["host"],
                     wall_s=round(r.get("wall_s", 0.0), 3))
                emit(r["status"], {"task_id": tid, **r})
                bars[0].update(1)
                bars[1].update(task.token_budget)
                bars[1].set_postfix(new_tokens=res.tokens, retried=res.retried, failed=len(res.failed))
    finally:
        for b in bars:
            b.close()
        for a in actors:
            ray.kill(a, no_restart=True)
