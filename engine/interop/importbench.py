"""Peer-import speed and memory: `python -m engine importbench [--requests 10000] [--steps 64] [--k 4]`.

Writes a vLLM offline file of the given size (detailed per-request spec-decode metrics, the shape
vLLM 0.32 writes: ~2.4 kB a request at 64 verify steps) to a temporary folder and times the whole
`python -m engine import vllm` path — read, parse, build the trace records, validate them with the
loader's rules, write the trace atomically — in this process, reporting wall and CPU seconds and the
growth of the process's maximum RSS.

A second case times a 70-byte file that claims 2²⁴ output tokens (more steps than one import
expands): it must be refused at once, without building a step.

Worked example (the figures depend on the machine; docs/results/importbench-*.json holds measured ones):

    requests=10000 steps/request=64 K=4 file=26.2 MB  import 19.2 s wall, 12.0 s CPU  RSS growth 1202 MB  steps 650000
    over-limit claim refused in 0.001 s, peak traced 0.008 MB (target < 2 s and < 500 MB: met): claim.jsonl: …
"""

from __future__ import annotations

import json
import platform
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from engine.interop.formats import import_peer
from engine.interop.peer import PeerError


def vllm_file(path: Path, requests: int, steps: int, K: int, seed: int = 0) -> int:
    """A detailed vLLM offline file: `requests` records of `steps` verify steps each; its size in bytes."""
    rng = np.random.default_rng(seed)
    head = {"type": "speclab.peer_header", "engine": "vllm", "vllm_version": "0.32.0", "target": "synthetic-target",
            "draft": "synthetic-draft", "method": "draft", "num_speculative_tokens": K, "max_tokens": 4096,
            "temperature": 0.0, "created": "2026-12-01T00:00:00Z"}
    with open(path, "w") as f:
        f.write(json.dumps(head) + "\n")
        for r in range(requests):
            acc = rng.integers(0, K + 1, steps).tolist()
            n, A = len(acc), sum(acc)
            m = {"num_spec_tokens": K, "acceptance_histogram": [acc.count(j) for j in range(K + 1)],
                 "num_spec_steps": n, "num_accepted_draft_tokens": A, "num_draft_tokens": n * K,
                 "mean_acceptance_length": 1.0 + A / n, "draft_acceptance_rate": A / (n * K),
                 "per_step_accepted": acc, "per_step_drafted": [K] * n}
            n_out = 1 + A + n
            rec = {"request_id": str(r), "prompt_token_ids": rng.integers(0, 150_000, 64).tolist(),
                   "token_ids": rng.integers(0, 150_000, n_out).tolist(), "finish_reason": "stop",
                   "spec_decode_metrics": m}
            f.write(json.dumps(rec) + "\n")
    return path.stat().st_size


def _measure(src: Path, out: Path, traced: bool) -> dict[str, Any]:
    """One import: wall and CPU seconds (CPU time too, because a shared machine's wall time includes
    waiting for a core), and the peak of traced allocations when `traced` (tracemalloc slows Python
    several-fold, so the large case is measured untraced and its memory read from the RSS)."""
    if traced:
        tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    err = None
    try:
        t = import_peer("vllm", src, out)
        n_steps = len(t.steps)
    except PeerError as e:
        err, n_steps = str(e), 0
    res = {"wall_s": round(time.perf_counter() - t0, 3), "cpu_s": round(time.process_time() - c0, 3),
           "steps": n_steps, "error": err}
    if traced:
        res["peak_traced_mb"] = round(tracemalloc.get_traced_memory()[1] / 1e6, 3)
        tracemalloc.stop()
    return res


def run(requests: int = 10_000, steps: int = 64, K: int = 4) -> dict[str, Any]:
    """Both cases (module docstring) as one JSON-able result."""
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        big = d / "vllm-big.jsonl"
        size = vllm_file(big, requests, steps, K)
        claim = d / "claim.jsonl"
        claim.write_bytes(b'{"choices":[{"text":"x"}],"usage":{"completion_tokens":16777216},"metrics":{'
                          b'"speculative_decoding":{"num_spec_tokens":2,"acceptance_histogram":[1,0,0],'
                          b'"num_spec_steps":1,"num_accepted_draft_tokens":0,"num_draft_tokens":2,'
                          b'"mean_acceptance_length":1.0,"draft_acceptance_rate":0.0}}}\n')
        refused = _measure(claim, d / "claim-out.jsonl", traced=True)
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        imported = _measure(big, d / "big-out.jsonl", traced=False)
        imported["max_rss_growth_mb"] = round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024, 1)
    return {"benchmark": "importbench", "python": platform.python_version(), "machine": platform.machine(),
            "requests": requests, "steps_per_request": steps, "K": K, "file_mb": round(size / 1e6, 1),
            "import": imported, "over_limit_claim": refused,
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def lines(res: dict[str, Any]) -> list[str]:
    i, c = res["import"], res["over_limit_claim"]
    return [f"requests={res['requests']} steps/request={res['steps_per_request']} K={res['K']} "
            f"file={res['file_mb']} MB  import {i['wall_s']} s wall, {i['cpu_s']} s CPU  RSS growth "
            f"{i['max_rss_growth_mb']} MB  steps {i['steps']}" + (f"  REFUSED: {i['error']}" if i["error"] else ""),
            f"over-limit claim refused in {c['wall_s']} s, peak traced {c['peak_traced_mb']} MB "
            f"(target < 2 s and < 500 MB: {'met' if c['error'] and c['wall_s'] < 2 and c['peak_traced_mb'] < 500 else 'NOT met'})"
            f": {c['error']}",
            f"max RSS of this process {res['max_rss_mb']} MB"]
