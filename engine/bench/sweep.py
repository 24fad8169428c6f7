"""Grid sweeps on Ray: `python -m engine sweep GRID.toml --out DIR`.

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
    summary     DIR/summary.parquet, one row per task (config columns, task, tokens/s, emitted per
                call incl. bonus, acceptance rate, target calls, speedup over the autoregressive
                task on the same shard); `load_sweep_summary(DIR)` reads it.

Ray starts locally unless RAY_ADDRESS or --address names a cluster (docs/sweeps.md). Only one
driver may work on a DIR at a time. Nothing here imports torch or ray at module level, so the app
can import `load_sweep_summary` / `speedup_matrix` cheaply.

Grid format (docs/examples/sweep-tiny.toml is a runnable one):

    shard_size = 4                 # prompts per task; a shard never mixes Spec-Bench tasks
    max_new_tokens = [64]          # int or list
    temperatures = [0.0, 1.0]      # float or list
    verifiers = ["token"]          # names from engine.verify.VERIFIERS
    policies = ["autoregressive", "fixed:4", {name = "confidence", params = {threshold = 0.4, max = 12}}]
    drafters = ["model", "lookup:n=10,ngram=2", {name = "suffix", params = {n = 16}}]   # default ["model"]
    seed = 0, top_k = 0, top_p = 1.0, chat = true, device = "auto", threads = 1 (torch threads per worker)
    [[pairs]]     target = "...", draft = "..." (omit: baseline and model-free drafters only), dtype, name
    [[prompts]]   file = "...", per_category = 2, limit = 12, categories = ["qa"], name = "label"

Relative model and prompt paths are resolved against the grid file's folder (then the current
folder); anything that is not a path is passed to engine.core.load.load_model as a name.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import socket
import sys
import time
import tomllib
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HASH_VERSION = 1
AUTOREGRESSIVE = "autoregressive"
SUMMARY_NAME = "summary.parquet"
LOG_NAME = "sweep-log.jsonl"
DTYPE_NAMES = {"auto": "auto", "fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16",
               "fp16": "fp16", "float16": "fp16"}
GRID_KEYS = {"name", "shard_size", "max_new_tokens", "temperatures", "verifiers", "policies", "drafters", "seed",
             "top_k", "top_p", "chat", "device", "threads", "pairs", "prompts"}
# The `drafters` entry meaning "the pair's draft model"; any other entry is a model-free drafter spec
# (engine.drafters.modelfree: lookup, suffix), which needs only the target.
MODEL_DRAFTER = "model"
NO_DRAFTER = "none"  # the summary's drafter of an autoregressive task
# Columns that, with the shard, identify the autoregressive baseline of a speculative row.
# Modules that register extra policies or verifiers when imported (engine.policies.base.register_policy).
PLUGIN_MODULES = ("engine.policies.pacer",)
BASELINE_KEYS = ["target", "dtype", "temperature", "top_k", "top_p", "seed", "max_new_tokens", "chat", "shard_hash"]


# ------------------------------------------------------------------ grid → tasks


@dataclass(frozen=True)
class Task:
    task_id: str
    config: dict[str, Any]  # canonical, hashed: what decodes
    prompts: tuple[dict[str, Any], ...]  # the shard, hashed: [{"text", "category", "question_id"}]
    meta: dict[str, Any]  # not hashed: labels and where to find things
    models: dict[str, Any]  # how a worker finds the models: {"target": {...}, "draft": {...} | None}

    @functools.cached_property
    def pair_key(self) -> tuple:
        return (json.dumps(self.models, sort_keys=True), self.config["dtype"])

    @property
    def token_budget(self) -> int:
        return self.config["max_new_tokens"] * len(self.prompts)


def load_plugins() -> None:
    import importlib

    for name in PLUGIN_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def make_task_id(config: dict[str, Any], prompts: list[dict[str, Any]] | tuple) -> str:
    blob = _canonical({"v": HASH_VERSION, "config": config, "prompts": list(prompts)})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def _list(v: Any, key: str, kind: type | tuple) -> list:
    items = v if isinstance(v, list) else [v]
    for x in items:
        if not isinstance(x, kind) or isinstance(x, bool) and kind is not bool:
            raise ValueError(f"grid: {key!r} entries must be {getattr(kind, '__name__', kind)}, got {x!r}")
    if not items:
        raise ValueError(f"grid: {key!r} is empty")
    return items


def _entry_spec(entry: Any, what: str) -> str:
    """A grid entry (a spec string or a {name, params} / {spec} table) → its spec string, uncanonicalised."""
    if isinstance(entry, dict):
        unknown = set(entry) - {"name", "params", "spec"}
        if unknown:
            raise ValueError(f"grid: {what} entry has unknown keys {sorted(unknown)}")
        if "spec" in entry:
            return str(entry["spec"])
        if "name" not in entry:
            raise ValueError(f"grid: {what} entry {entry!r} needs 'name' or 'spec'")
        params = entry.get("params", {})
        if not isinstance(params, dict):
            raise ValueError(f"grid: {what} {entry['name']!r}: 'params' must be a table")
        return str(entry["name"]) + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else "")
    if isinstance(entry, str):
        return entry
    raise ValueError(f"grid: a {what} must be a spec string or a table, got {entry!r}")


def _policy_spec(entry: Any) -> str:
    """A grid policy entry (a spec string or {name, params}) → canonical spec ('autoregressive' kept)."""
    from engine.policies.base import parse_policy

    spec = _entry_spec(entry, "policy")
    if spec.strip() in (AUTOREGRESSIVE, "ar"):
        return AUTOREGRESSIVE
    return parse_policy(spec).spec


def _drafter_spec(entry: Any) -> str:
    """A grid drafter entry → 'model' or the canonical model-free spec ('lookup' → 'lookup:n=10,ngram=2'),
    so that two spellings of one drafter are one task."""
    from engine.drafters.modelfree import is_model_free, make_model_free

    spec = _entry_spec(entry, "drafter").strip()
    if spec == MODEL_DRAFTER:
        return MODEL_DRAFTER
    if not is_model_free(spec):
        raise ValueError(f"grid: unknown drafter {spec!r}; choose from {MODEL_DRAFTER} (the pair's draft), "
                         "lookup[:n=,ngram=,pick=], suffix[:n=,depth=,p=,corpus=]")
    try:  # the spec does not depend on the vocabulary: any size builds it; workers use the target's
        return make_model_free(spec, 2).spec
    except ValueError as e:
        raise ValueError(f"grid: {str(e).splitlines()[0]}") from None


def _model_ref(value: str, base: Path) -> dict[str, Any]:
    """Where a worker finds a model: an absolute path, the same path relative to the current folder
    (a cluster worker unpacks the job's working dir elsewhere), and the value as written."""
    p = Path(value).expanduser()
    ref: dict[str, Any] = {"name": value, "abs": None, "rel": None}
    for cand in ([p] if p.is_absolute() else [base / p, Path.cwd() / p]):
        if cand.exists():
            ref["abs"] = str(cand.resolve())
            try:
                ref["rel"] = os.path.relpath(ref["abs"], Path.cwd().resolve())
            except ValueError:
                pass
            break
    return ref


def _resolve_ref(ref: dict[str, Any] | None) -> str | None:
    if ref is None:
        return None
    for k in ("abs", "rel"):
        if ref.get(k) and Path(ref[k]).exists():
            return ref[k]
    return ref["name"]


def _shards(prompts, size: int) -> list[tuple[str, int, list]]:
    from engine.trace.prompts import task_of

    groups: dict[str, list] = {}
    for p in prompts:
        groups.setdefault(task_of(p.category), []).append(p)
    out = []
    for task, ps in groups.items():
        for i in range(0, len(ps), size):
            out.append((task, i // size, ps[i:i + size]))
    return out


PAIR_KEYS = {"name", "target", "draft", "dtype"}
PROMPTS_KEYS = {"file", "name", "limit", "per_category", "categories"}


def _known(table: dict, keys: set[str], where: str) -> None:
    """A misspelt key (per_catgory) would otherwise be ignored and the sweep run on other settings."""
    unknown = set(table) - keys
    if unknown:
        raise ValueError(f"grid: [[{where}]] entry has unknown keys {sorted(unknown)} (known: {', '.join(sorted(keys))})")


def load_grid(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"grid file {str(p)!r} does not exist")
    try:
        grid = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{p.name}: invalid TOML ({str(e).splitlines()[0]})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{p.name}: cannot read the grid ({getattr(e, 'strerror', None) or e})") from None
    unknown = set(grid) - GRID_KEYS
    if unknown:
        raise ValueError(f"{p.name}: unknown keys {sorted(unknown)} (known: {', '.join(sorted(GRID_KEYS))})")
    grid["_base"] = str(p.resolve().parent)
    grid["_path"] = str(p)
    return grid


def expand_grid(grid: dict[str, Any], base: str | os.PathLike | None = None) -> list[Task]:
    """Every task of a grid, in a stable order (pair, prompt file, budget, temperature, policy, drafter, verifier,
    shard).

    A model-free drafter (lookup, suffix) runs with every pair — it needs only the target — and its task
    config gains `drafter` (its canonical spec; `draft` stays None: no weights). Tasks of the draft model
    keep the config they always had, so sweeps written before `drafters` existed resume without rework.
    Combinations a model-free drafter cannot run are left out (as the CLI refuses them): a policy that reads
    draft hidden states (pacer), and a multi-draft verifier (it proposes one deterministic block)."""
    from engine.decode import DecodeConfig
    from engine.policies.base import parse_policy
    from engine.trace.prompts import load_prompts
    from engine.core.sampling import SamplingConfig
    from engine.verify import MULTI_DRAFT

    load_plugins()
    base = Path(base or grid.get("_base") or ".")
    shard_size = int(grid.get("shard_size", 4))
    if shard_size < 1:
        raise ValueError("grid: shard_size must be >= 1")
    budgets = _list(grid.get("max_new_tokens", 64), "max_new_tokens", int)
    temps = [float(t) for t in _list(grid.get("temperatures", 0.0), "temperatures", (int, float))]
    verifiers = _list(grid.get("verifiers", "token"), "verifiers", str)
    policies = list(dict.fromkeys(_policy_spec(e) for e in _list(grid.get("policies", ["fixed:4"]), "policies",
                                                                  (str, dict))))
    drafters = list(dict.fromkeys(_drafter_spec(e) for e in _list(grid.get("drafters", [MODEL_DRAFTER]), "drafters",
                                                                   (str, dict))))
    needs_hidden = {p: p != AUTOREGRESSIVE and parse_policy(p).needs_hidden for p in policies}
    seed, top_k, top_p = int(grid.get("seed", 0)), int(grid.get("top_k", 0)), float(grid.get("top_p", 1.0))
    chat = bool(grid.get("chat", True))
    pairs = _list(grid.get("pairs", []), "pairs", dict)
    prompt_sets = _list(grid.get("prompts", []), "prompts", dict)
    for t, b, v in itertools.product(temps, budgets, verifiers):  # validates names and ranges up front
        DecodeConfig(max_new_tokens=b, verifier=v, sampling=SamplingConfig(t, top_k, top_p, seed))

    loaded = []
    for ps in prompt_sets:
        _known(ps, PROMPTS_KEYS, "prompts")
        if "file" not in ps:
            raise ValueError(f"grid: prompts entry {ps!r} needs 'file'")
        f = Path(ps["file"]).expanduser()
        f = f if f.is_absolute() else (base / f if (base / f).exists() else Path.cwd() / f)
        prompts = load_prompts(f, limit=ps.get("limit"), per_category=ps.get("per_category"),
                               categories=ps.get("categories"))
        loaded.append((ps.get("name") or Path(ps["file"]).stem, str(ps["file"]), _shards(prompts, shard_size)))

    tasks: dict[str, Task] = {}
    for pair in pairs:
        _known(pair, PAIR_KEYS, "pairs")
        if "target" not in pair:
            raise ValueError(f"grid: pair {pair!r} needs 'target'")
        dtype = DTYPE_NAMES.get(str(pair.get("dtype", "auto")))
        if dtype is None:
            raise ValueError(f"grid: unknown dtype {pair.get('dtype')!r}; choose from fp32, bf16, fp16, auto")
        target, draft = str(pair["target"]), (str(pair["draft"]) if pair.get("draft") else None)
        label = pair.get("name") or (f"{Path(target).name}+{Path(draft).name}" if draft else Path(target).name)
        models = {"target": _model_ref(target, base), "draft": _model_ref(draft, base) if draft else None}
        for (pset, pfile, shards), budget, temp, policy, drafter, verifier in itertools.product(
                loaded, budgets, temps, policies, drafters, verifiers):
            ar = policy == AUTOREGRESSIVE
            free = not ar and drafter != MODEL_DRAFTER
            if not ar and not free and draft is None:
                continue  # a pair without a draft model: the baseline and model-free drafters only
            if free and (needs_hidden[policy] or verifier in MULTI_DRAFT):
                continue  # no hidden states, one block: the CLI refuses these too
            config = {"target": target, "draft": draft if not (ar or free) else None, "dtype": dtype,
                      "policy": policy, "verifier": "token" if ar else verifier, "temperature": temp,
                      "top_k": top_k, "top_p": top_p, "seed": seed, "max_new_tokens": budget, "chat": chat}
            if free:  # only here: the ids of draft-model and baseline tasks are those of older sweeps
                config["drafter"] = drafter
            for task_name, shard_index, ps in shards:
                shard = tuple({"text": p.text, "category": p.category, "question_id": p.question_id} for p in ps)
                tid = make_task_id(config, shard)
                if tid in tasks:
                    continue
                meta = {"pair": label, "prompt_set": pset, "prompts_file": pfile, "task": task_name,
                        "shard": shard_index, "shard_hash": make_task_id({}, shard)}
                tasks[tid] = Task(tid, config, shard, meta,
                                  {"target": models["target"], "draft": None if ar or free else models["draft"]})
    if not tasks:
        raise ValueError("grid: no tasks (needs at least one pair, one prompts file and one policy)")
    return list(tasks.values())


# ------------------------------------------------------------------ traces on disk


def trace_path(out_dir: str | os.PathLike, task_id: str) -> Path:
    return Path(out_dir) / "traces" / f"{task_id}.jsonl"


def valid_trace(path: str | os.PathLike, task_id: str):
    """The loaded trace when `path` is a complete, valid trace of `task_id`; None otherwise."""
    from engine.trace.format import TraceError, load_trace

    p = Path(path)
    if not p.is_file():
        return None
    try:
        t = load_trace(p)
    except (TraceError, OSError, ValueError):
        return None
    if not t.complete or (t.header.get("sweep") or {}).get("task_id") != task_id:
        return None
    return t


def publish(tmp: Path, final: Path) -> bool:
    """Move a finished temp trace onto its final name atomically; False if another attempt got there
    first. A hard link never overwrites, so two racing attempts (a worker the driver took for dead
    that was only unreachable) cannot both publish. Where the filesystem has no hard links, os.replace
    (atomic too; a race then leaves the last of two whole traces)."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        return False
    except OSError:
        os.replace(tmp, final)
        return True
    tmp.unlink(missing_ok=True)
    return True


# ------------------------------------------------------------------ the worker (a Ray actor)


class SweepWorker:
    """Runs tasks; keeps the last `cache_pairs` loaded pairs. Wrapped with ray.remote by the driver."""

    def __init__(self, threads: int | None = None, device: str = "auto", cache_pairs: int = 2) -> None:
        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one per model load in every worker's log otherwise
        if threads:
            torch.set_num_threads(threads)
        self.device = device
        self.cache_pairs = cache_pairs
        self._pairs: dict[tuple, Any] = {}
        self.tasks_run = 0

    def ping(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname()}

    def _pair(self, task: Task, want_hidden: bool = False):
        from engine.core.load import check_pair, load_model

        key = (task.pair_key, want_hidden)
        if key in self._pairs:
            self._pairs[key] = self._pairs.pop(key)  # most recently used last
            return self._pairs[key]
        while len(self._pairs) >= self.cache_pairs:
            self._pairs.pop(next(iter(self._pairs)))
        dtype = task.config["dtype"]
        target = load_model(_resolve_ref(task.models["target"]), dtype, self.device, role="target")
        draft = None
        if task.models["draft"] is not None:
            draft = load_model(_resolve_ref(task.models["draft"]), dtype, self.device, role="draft", target=target,
                               want_hidden=want_hidden)
            check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
        self._pairs[key] = (target, draft)
        return target, draft

    def run(self, task: Task, out_dir: str, tmp_name: str) -> dict[str, Any]:
        from engine.decode import DecodeConfig
        from engine.drafters.modelfree import make_model_free
        from engine.core.load import eos_token_ids
        from engine.policies.base import parse_policy
        from engine.trace.prompts import encode
        from engine.run import Request, run_requests
        from engine.core.sampling import SamplingConfig

        load_plugins()
        final = trace_path(out_dir, task.task_id)
        info = self.ping()
        if valid_trace(final, task.task_id) is not None:  # written by an attempt that died after the rename
            return {"status": "present", **info}
        c = task.config
        ar = c["policy"] == AUTOREGRESSIVE
        policy = None if ar else parse_policy(c["policy"])
        # Policies that read draft hidden states (PACER) get a draft loaded with want_hidden.
        target, draft = self._pair(task, want_hidden=bool(policy is not None and policy.needs_hidden))
        # A model-free drafter is built fresh per task: suffix:corpus=1 learns from the requests it saw.
        draft_lm = (None if ar else make_model_free(c["drafter"], target.lm.vocab_size) if c.get("drafter")
                    else draft.lm)
        tok = target.tokenizer
        if tok is None:
            raise ValueError(f"target {c['target']!r} has no tokenizer; cannot encode text prompts")
        requests = [Request(encode(tok, p["text"], chat=c["chat"]), p["text"], p["category"], p["question_id"])
                    for p in task.prompts]
        cfg = DecodeConfig(max_new_tokens=c["max_new_tokens"], verifier=c["verifier"],
                           sampling=SamplingConfig(c["temperature"], c["top_k"], c["top_p"], c["seed"]))
        tmp = final.parent / tmp_name
        final.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        try:
            summary = run_requests(target.lm, draft_lm, policy, cfg, requests, tmp,
                                   eos_ids=eos_token_ids(target), decode_text=lambda ids: tok.decode(ids),
                                   progress=False,
                                   header_extra={"sweep": {"task_id": task.task_id, "config": c, **task.meta,
                                                           "worker": info},
                                                 "command": "python -m engine sweep"})
            published = publish(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if not published:
            return {"status": "present", **info}
        self.tasks_run += 1
        return {"status": "written", "summary": summary, "wall_s": time.perf_counter() - t0, **info}


# ------------------------------------------------------------------ the driver


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


# ------------------------------------------------------------------ summary


def summary_rows(out_dir: str | os.PathLike, task_ids: list[str] | None = None,
                 loaded: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per complete task trace in out_dir/traces (restricted to `task_ids` when given);
    `loaded` maps task ids to traces already loaded (and validated) by the caller."""
    from engine.trace.format import TraceError, load_trace

    tdir = Path(out_dir) / "traces"
    paths = ([trace_path(out_dir, t) for t in task_ids] if task_ids is not None
             else sorted(p for p in tdir.glob("*.jsonl") if not p.name.startswith(".")))
    rows = []
    for p in paths:
        t = (loaded or {}).get(p.stem)
        if t is None:
            if not p.is_file():
                continue
            try:
                t = load_trace(p)
            except TraceError:
                continue
        sw = t.header.get("sweep")
        if not t.complete or not sw:
            continue
        s = t.footer.get("summary") or t.summary
        c = sw["config"]
        rows.append({
            "task_id": sw["task_id"], "pair": sw.get("pair"), "target": c["target"],
            "draft": c["draft"] or c.get("drafter"), "drafter": drafter_of(c), "dtype": c["dtype"],
            "policy": c["policy"], "policy_name": c["policy"].split(":")[0],
            "verifier": c["verifier"], "temperature": c["temperature"], "top_k": c["top_k"], "top_p": c["top_p"],
            "seed": c["seed"], "max_new_tokens": c["max_new_tokens"], "chat": c["chat"],
            "prompt_set": sw.get("prompt_set"), "task": sw.get("task"), "shard": sw.get("shard"),
            "shard_hash": sw.get("shard_hash"), "prompts": len(t.requests),
            "device": (t.header.get("target") or {}).get("device"),
            "worker_host": (sw.get("worker") or {}).get("host"),
            "tokens_per_s": s["tokens_per_s"], "new_tokens": s["new_tokens"], "target_calls": s["target_calls"],
            "emitted_per_call_incl_bonus": s["mean_emitted_per_call_incl_bonus"],
            "accepted_per_call_excl_bonus": s["mean_accepted_per_call_excl_bonus"],
            "acceptance_rate": s["draft_acceptance_rate"], "drafted_tokens": s["drafted_tokens"],
            "decode_ms": s["decode_ms"], "trace": str(p.relative_to(out_dir)), "created": t.header.get("created"),
        })
    return rows


def drafter_of(config: dict[str, Any]) -> str:
    """A task config's drafter: 'none' (autoregressive), 'model' (the pair's draft) or a model-free spec."""
    if config["policy"] == AUTOREGRESSIVE:
        return NO_DRAFTER
    return config.get("drafter") or MODEL_DRAFTER


def with_settings(df):
    """`df` with `drafter` (filled in for summaries written before it existed: every drafted task then used
    the draft model) and `setting`, the row label of the heatmap and tables: the policy, prefixed with the
    drafter ('lookup:n=10,ngram=2 · fixed:4') as soon as any row uses a model-free drafter — rows of two
    drafters with one policy must not be pooled."""
    df = df.copy()
    if df.empty:
        df["drafter"], df["setting"] = [], []
        return df
    ar = df["policy"] == AUTOREGRESSIVE
    given = df["drafter"] if "drafter" in df.columns else [None] * len(df)
    df["drafter"] = [NO_DRAFTER if a else (d if isinstance(d, str) and d else MODEL_DRAFTER)
                     for a, d in zip(ar, given)]
    mixed = bool((~df["drafter"].isin([NO_DRAFTER, MODEL_DRAFTER])).any())
    df["setting"] = [p if a or not mixed else f"{d} · {p}" for a, d, p in zip(ar, df["drafter"], df["policy"])]
    return df


def add_speedup(df):
    """Add `speedup`: tokens/s over the autoregressive task with the same target, sampling, budget and shard
    (and `drafter` / `setting`, see with_settings)."""
    import numpy as np

    df = with_settings(df)
    if df.empty:
        df["speedup"] = []
        return df
    base = df[df["policy"] == AUTOREGRESSIVE][BASELINE_KEYS + ["tokens_per_s"]]
    base = base.drop_duplicates(BASELINE_KEYS).rename(columns={"tokens_per_s": "baseline_tokens_per_s"})
    df = df.merge(base, on=BASELINE_KEYS, how="left")
    df["speedup"] = np.where(df["baseline_tokens_per_s"] > 0, df["tokens_per_s"] / df["baseline_tokens_per_s"],
                             np.nan)
    return df


def write_summary(out_dir: str | os.PathLike, task_ids: list[str] | None = None,
                  loaded: dict[str, Any] | None = None) -> Path:
    import pandas as pd

    df = add_speedup(pd.DataFrame(summary_rows(out_dir, task_ids, loaded)))
    path = Path(out_dir) / SUMMARY_NAME
    tmp = path.with_name(f".{SUMMARY_NAME}.{os.getpid()}.tmp")
    df.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return path


def load_sweep_summary(out_dir: str | os.PathLike):
    """The sweep's per-task table (pandas.DataFrame): DIR/summary.parquet, else rebuilt from DIR/traces."""
    import pandas as pd

    p = Path(out_dir) / SUMMARY_NAME
    if p.is_file():
        return pd.read_parquet(p)
    if not (Path(out_dir) / "traces").is_dir():
        raise FileNotFoundError(f"{out_dir}: not a sweep folder (no {SUMMARY_NAME}, no traces/)")
    return add_speedup(pd.DataFrame(summary_rows(out_dir)))


def speedup_matrix(df, index: str = "setting", columns: str = "task"):
    """setting (drafter × policy, see with_settings) × task speedup over autoregressive, pooled over shards:
    (Σ tokens / Σ decode time) of the setting divided by the same for the autoregressive tasks on the same
    shards. Filter `df` to one pair / verifier / temperature / budget first (rows of several would be pooled)."""
    import pandas as pd

    if df.empty or not (df["policy"] == AUTOREGRESSIVE).any():
        return pd.DataFrame()
    if "setting" not in df.columns:  # a summary written before drafters were a grid key
        df = with_settings(df)
    keys = [k for k in BASELINE_KEYS if k in df.columns]
    ar = df[df["policy"] == AUTOREGRESSIVE]
    spec = df[df["policy"] != AUTOREGRESSIVE].merge(
        ar[keys + ["new_tokens", "decode_ms"]].drop_duplicates(keys), on=keys, suffixes=("", "_ar"))
    if spec.empty:
        return pd.DataFrame()
    g = spec.groupby([index, columns])[["new_tokens", "decode_ms", "new_tokens_ar", "decode_ms_ar"]].sum()
    ratio = (g["new_tokens"] / g["decode_ms"]) / (g["new_tokens_ar"] / g["decode_ms_ar"])
    return ratio.unstack(columns)


# ------------------------------------------------------------------ CLI


def add_parser(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of decode configurations on Ray (resumable)")
    p.add_argument("grid", help="grid TOML (see docs/sweeps.md)")
    p.add_argument("--out", required=True, help="sweep folder: traces/, summary.parquet, sweep-log.jsonl")
    p.add_argument("--workers", type=int, default=None,
                   help="actors to start (default: one per GPU in the cluster, else one per CPU)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: $RAY_ADDRESS, else local)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per worker (default: grid's, else torch's)")
    p.add_argument("--max-attempts", type=int, default=3, help="attempts per task when workers die")
    p.add_argument("--dry-run", action="store_true", help="list the tasks and which are done; run nothing")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(a) -> int:
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
