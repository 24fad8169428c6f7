"""Sweep summaries: one row per complete task trace (config columns, task, tokens/s and the per-call
figures of engine.metrics, speedup over the autoregressive task on the same shard), written to
DIR/summary.parquet and read back by the Sweeps page. Nothing here imports torch or ray, so the app can
import `load_sweep_summary` / `speedup_matrix` cheaply.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.bench.sweep_grid import AUTOREGRESSIVE, MODEL_DRAFTER, NO_DRAFTER, SUMMARY_NAME, trace_path
from engine.metrics import ACCEPTANCE_RATE, ACCEPTED_PER_CALL, EMITTED_PER_CALL, canonical_frame

# Columns that, with the shard, identify the autoregressive baseline of a speculative row.
BASELINE_KEYS = ["target", "dtype", "temperature", "top_k", "top_p", "seed", "max_new_tokens", "chat", "shard_hash"]


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
            EMITTED_PER_CALL: s[EMITTED_PER_CALL], ACCEPTED_PER_CALL: s[ACCEPTED_PER_CALL],
            ACCEPTANCE_RATE: s[ACCEPTANCE_RATE], "drafted_tokens": s["drafted_tokens"],
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

    from engine.trace.jsonio import atomic_path

    df = add_speedup(pd.DataFrame(summary_rows(out_dir, task_ids, loaded)))
    path = Path(out_dir) / SUMMARY_NAME
    with atomic_path(path, suffix=f".{os.getpid()}.tmp") as tmp:
        df.to_parquet(tmp, index=False)
    return path


def load_sweep_summary(out_dir: str | os.PathLike):
    """The sweep's per-task table (pandas.DataFrame): DIR/summary.parquet, else rebuilt from DIR/traces."""
    import pandas as pd

    p = Path(out_dir) / SUMMARY_NAME
    if p.is_file():  # a summary written before engine.metrics: its columns under the new names
        return canonical_frame(pd.read_parquet(p))
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
