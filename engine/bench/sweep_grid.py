"""Sweep grids → tasks: `load_grid` reads a grid TOML, `expand_grid` turns it into tasks, each one
configuration on one shard of prompts with a content-addressed id (engine.bench.sweep runs them).

    task id   = sha256 of the canonical task config + the shard's prompts (text, category, id):
                the same work always has the same id, whatever the grid file looks like around it.
    layout    DIR/traces/<task_id>.jsonl (trace_path), DIR/summary.parquet, DIR/sweep-log.jsonl

Grid format (docs/examples/sweep-tiny.toml is a runnable one):

    shard_size = 4                 # prompts per task; a shard never mixes Spec-Bench tasks
    max_new_tokens = [64]          # int or list
    temperatures = [0.0, 1.0]      # float or list
    verifiers = ["token"]          # names from engine.verify.VERIFIERS
    policies = ["autoregressive", "fixed:4", {name = "confidence", params = {threshold = 0.4, max = 12}}]
    drafters = ["model", "lookup:n=10,ngram=2", {name = "suffix", params = {n = 16}}]   # default ["model"]
    seed = 0, top_k = 0, top_p = 1.0, chat = true, device = "auto", threads = 1 (torch threads per worker)
    [[pairs]]     target = "...", draft = "..." (omit: baseline and model-free drafters only), dtype, name,
                  weights (dense | quantized | int8 | int4: engine.kernels.quant; default dense; or
                  "target=dense,draft=quantized": each model its own path, engine.models.pair_weights)
    [[prompts]]   file = "...", per_task = 2 (or per_category), limit = 12, categories = ["qa"], name = "label"

Relative model and prompt paths are resolved against the grid file's folder (then the current
folder); anything that is not a path is passed to engine.models.load.load_model as a name.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
# Modules that register extra policies or verifiers when imported (engine.policies.base.register_policy).
PLUGIN_MODULES = ("engine.policies.pacer",)


@dataclass(frozen=True)
class Task:
    task_id: str
    config: dict[str, Any]  # canonical, hashed: what decodes
    prompts: tuple[dict[str, Any], ...]  # the shard, hashed: [{"text", "category", "question_id"}]
    meta: dict[str, Any]  # not hashed: labels and where to find things
    models: dict[str, Any]  # how a worker finds the models: {"target": {...}, "draft": {...} | None}

    @functools.cached_property
    def pair_key(self) -> tuple:
        return (json.dumps(self.models, sort_keys=True), self.config["dtype"], self.config.get("weights", "dense"))

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
    from engine.drafters.factory import eagle_path, is_eagle

    if is_eagle(spec):  # a head on the target's own features: no draft model either (its path, as written)
        try:
            eagle_path(spec)
        except (ValueError, OSError) as e:
            raise ValueError(f"grid: {str(e).splitlines()[0]}") from None
        return spec
    if not is_model_free(spec):
        raise ValueError(f"grid: unknown drafter {spec!r}; choose from {MODEL_DRAFTER} (the pair's draft), "
                         "lookup[:n=,ngram=,pick=], suffix[:n=,depth=,p=,corpus=], eagle:PATH")
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


PAIR_KEYS = {"name", "target", "draft", "dtype", "weights"}
PROMPTS_KEYS = {"file", "name", "limit", "per_task", "per_category", "categories"}  # per_category: old spelling


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
    from engine.policies.base import parse_policy
    from engine.spec import RunSpec
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
    needs_hidden = {p: p != AUTOREGRESSIVE and parse_policy(p).needs().hidden for p in policies}
    seed, top_k, top_p = int(grid.get("seed", 0)), int(grid.get("top_k", 0)), float(grid.get("top_p", 1.0))
    chat = bool(grid.get("chat", True))
    pairs = _list(grid.get("pairs", []), "pairs", dict)
    prompt_sets = _list(grid.get("prompts", []), "prompts", dict)
    for t, b, v in itertools.product(temps, budgets, verifiers):  # names and ranges up front (engine.spec)
        errors = RunSpec(verifier=v, temperature=t, top_k=top_k, top_p=top_p, seed=seed, max_new_tokens=b).check()
        if errors:
            raise ValueError(f"grid: {errors[0]}")

    loaded = [_prompt_set(ps, base, shard_size) for ps in prompt_sets]
    tasks: dict[str, Task] = {}
    for pair in pairs:
        target, draft, dtype, weights, label, models = _pair(pair, base)
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
            if weights != "dense":  # likewise: a dense pair's task ids are unchanged
                config["weights"] = weights
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


def _prompt_set(ps: dict, base: Path, shard_size: int) -> tuple[str, str, list]:
    """(name, file as written, shards) of one `[[prompts]]` entry; a relative file is found beside the grid,
    else in the working directory."""
    from engine.trace.prompts import load_prompts

    _known(ps, PROMPTS_KEYS, "prompts")
    if "file" not in ps:
        raise ValueError(f"grid: prompts entry {ps!r} needs 'file'")
    f = Path(ps["file"]).expanduser()
    f = f if f.is_absolute() else (base / f if (base / f).exists() else Path.cwd() / f)
    prompts = load_prompts(f, limit=ps.get("limit"), per_category=ps.get("per_task", ps.get("per_category")),
                           categories=ps.get("categories"))
    return ps.get("name") or Path(ps["file"]).stem, str(ps["file"]), _shards(prompts, shard_size)


def _pair(pair: dict, base: Path) -> tuple[str, str | None, Any, str, str, dict]:
    """(target, draft, dtype, weights label, pair label, model references) of one `[[pairs]]` entry, each
    wrong key or value refused in one line."""
    from engine.models.pair_weights import parse

    _known(pair, PAIR_KEYS, "pairs")
    if "target" not in pair:
        raise ValueError(f"grid: pair {pair!r} needs 'target'")
    dtype = DTYPE_NAMES.get(str(pair.get("dtype", "auto")))
    if dtype is None:
        raise ValueError(f"grid: unknown dtype {pair.get('dtype')!r}; choose from fp32, bf16, fp16, auto")
    try:
        weights = parse(str(pair.get("weights", "dense")), "weights").label
    except ValueError as e:
        raise ValueError(f"grid: pair {pair.get('name') or pair['target']!r}: {e}") from None
    target, draft = str(pair["target"]), (str(pair["draft"]) if pair.get("draft") else None)
    label = pair.get("name") or (f"{Path(target).name}+{Path(draft).name}" if draft else Path(target).name)
    models = {"target": _model_ref(target, base), "draft": _model_ref(draft, base) if draft else None}
    return target, draft, dtype, weights, label, models


def trace_path(out_dir: str | os.PathLike, task_id: str) -> Path:
    return Path(out_dir) / "traces" / f"{task_id}.jsonl"
