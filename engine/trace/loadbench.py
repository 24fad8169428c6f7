"""Trace loading speed: `python -m engine loadbench [--steps 10000,100000,200000] [--repeat 3]`.

Writes synthetic traces of the given sizes (JSONL, and Parquet via `engine.trace.format.to_parquet`) to a
temporary folder and prints the best-of-`repeat` wall time of `engine.trace.format.load_trace` for each —
the full validation, every derived field recomputed. Figures are recorded in docs/benchmarks.md.

The synthetic steps look like a greedy fixed:4 run (4 drafts, 0–4 accepted, probabilities with 7
digits, timings with 4), ~600 bytes a line like the bundled SmolLM2 traces, 200 steps per request.
"""

from __future__ import annotations

import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from engine.trace.format import (SCHEMA, VERSION, load_trace, request_end_record, request_record, summarize,
                                 to_parquet)


def synthetic_records(n_steps: int, per_request: int = 200, seed: int = 0):
    """Yield the records of a valid trace with `n_steps` steps (header first, footer last)."""
    rng = np.random.default_rng(seed)
    n_req = max(1, -(-n_steps // per_request))
    yield {"type": "header", "schema": SCHEMA, "version": VERSION, "created": "2026-01-01T00:00:00+00:00",
           "target": {"name": "synthetic-target", "vocab_size": 49152, "dtype": "bfloat16", "device": "cpu",
                      "reduced_vocab": None},
           "draft": {"name": "synthetic-draft", "vocab_size": 49152, "dtype": "bfloat16", "device": "cpu",
                     "reduced_vocab": None},
           "policy": {"name": "fixed", "spec": "fixed:4", "params": {"gamma": 4}}, "verifier": "token",
           "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}, "max_new_tokens": 5 * per_request,
           "prompts": [{"request_id": r, "question_id": r, "category": "writing"} for r in range(n_req)],
           "software": {"python": platform.python_version()}, "command": "engine.trace.loadbench"}
    steps, ends, done = [], [], 0
    for rid in range(n_req):
        prompt = rng.integers(0, 49152, 60).tolist()
        yield request_record(rid, prompt, "synthetic", "writing", rid)
        ctx, out = len(prompt), []
        n = min(per_request, n_steps - done)
        for k in range(n):
            draft = rng.integers(0, 49152, 4).tolist()
            a = int(rng.integers(0, 5))
            last = int(rng.integers(0, 49152))
            q = np.round(rng.random(4), 7).tolist()
            s = {"request_id": rid, "step": k, "context_len": ctx, "window_cap": 4, "draft_tokens": draft,
                 "q_draft": q, "p_target": np.round(rng.random(4), 7).tolist(),
                 "accept_probs": [1.0] * a + [0.0] * (4 - a), "draft_entropy": np.round(rng.random(4) * 3, 7).tolist(),
                 "accepted": a, "emitted_tokens": draft[:a] + [last], "correction": None if a == 4 else last,
                 "bonus": last if a == 4 else None, "stop_reason": "cap",
                 "t_draft_ms": round(float(rng.random() * 40), 4), "t_verify_ms": round(float(1 + rng.random() * 60), 4),
                 "t_prefill_ms": 250.0 if k == 0 else 0.0, "finished": "max_new_tokens" if k == n - 1 else None,
                 "policy_fields": {}, "all_drafts": None, "chosen": 0, "decisions": None,
                 "t_rule_ms": 0.05, "type": "step", "window": 4, "emitted": a + 1}
            ctx += a + 1
            out += s["emitted_tokens"]
            steps.append({k2: s[k2] for k2 in ("request_id", "window", "accepted", "emitted", "t_draft_ms",
                                                "t_verify_ms", "t_prefill_ms")})
            yield s
        done += n
        end = request_end_record(rid, out, "max_new_tokens", 1.0)
        ends.append(end)
        yield end
    yield {"type": "footer", "summary": summarize(steps, ends)}


def write_synthetic(path: Path, n_steps: int) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for r in synthetic_records(n_steps):
            f.write(json.dumps(r) + "\n")
    return path


def best_time(path: Path, repeat: int) -> tuple[float, float]:
    """(best wall seconds, best process CPU seconds) over `repeat` loads. CPU time is reported too
    because a shared machine stretches wall time with other processes' load."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        t = load_trace(path)
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        del t
    return wall, cpu


def table(sizes: list[int], repeat: int):
    """Yield the markdown table's lines: header, then one row per size as it is measured."""
    yield "| steps | JSONL MB | JSONL load s (CPU s) | Parquet MB | Parquet load s (CPU s) |"
    yield "|---:|---:|---:|---:|---:|"
    with tempfile.TemporaryDirectory() as d:
        for n in sizes:
            js = write_synthetic(Path(d) / f"t{n}.jsonl", n)
            pq = Path(d) / f"t{n}.parquet"
            to_parquet(load_trace(js), pq)
            (jw, jc), (pw, pc) = best_time(js, repeat), best_time(pq, repeat)
            yield (f"| {n:,} | {js.stat().st_size / 1e6:.1f} | {jw:.2f} ({jc:.2f}) | "
                   f"{pq.stat().st_size / 1e6:.1f} | {pw:.2f} ({pc:.2f}) |")


if __name__ == "__main__":  # recorded `python -m engine.trace.loadbench …` commands run as `python -m engine loadbench …`
    import sys

    from engine.__main__ import main

    sys.exit(main(["loadbench", *sys.argv[1:]]))
