"""The GGUF's own Q4_K blocks (`q4k`) against their re-quantisation to int4 groups on our qgemm kernel, interleaved
in one run: the products alone and a quantized 1.5B decode step.

    python scripts/q4k_vs_int4.py --out docs/results/q4k-vs-int4-<cpu>.json

Parts (each figure the best of `--rounds` interleaved rounds, 2 threads):
    gemv      QGemmLinear int4 against from_blocks (Q4_K) on the 1.5B's shapes, M = 1 and 4, from memory (enough distinct
              copies to pass the last-level cache) and, for one shape, in cache (2 copies): µs a call
    step      `python -m engine overhead --weights quantized --target qwen2.5-coder-1.5b` with SPECLAB_GGUF_BLOCKS=0 / 1,
              alternating processes: the one-token step in ms, median over rounds (needs `make models`; skipped
              without it)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = ((8960, 1536), (1536, 8960), (2048, 1536), (1536, 1536))  # gate / up, down, q|k|v, o


def gemv(rounds: int) -> list[dict]:
    import torch

    from engine.kernels import qkernel

    if qkernel.available() is not None:
        return []
    rows = []
    for (n, k), m, in_cache in [(s, 1, False) for s in SHAPES] + [(SHAPES[0], 4, False), (SHAPES[0], 1, True)]:
        copies = 2 if in_cache else max(3, int(4e8 / (n * k * 0.6)))
        g = torch.Generator().manual_seed(n + k)
        layers = []
        for _ in range(copies):
            w = torch.randn(n, k, generator=g) * 0.05
            layers.append((qkernel.QGemmLinear(w, None, 4), qkernel.QGemmLinear.from_blocks(qkernel.q4k_pack(w), None)))
        x = torch.randn(m, k, generator=g).to(torch.bfloat16)
        best = [float("inf"), float("inf")]
        for _ in range(rounds):
            for j in (0, 1):
                t = time.perf_counter()
                for pair in layers:
                    pair[j](x)
                best[j] = min(best[j], (time.perf_counter() - t) / copies)
        nbytes = [sum(b.numel() * b.element_size() for b in layers[0][j].buffers()) for j in (0, 1)]
        rows.append({"n": n, "k": k, "m": m, "in_cache": in_cache, "int4_us": best[0] * 1e6, "q4k_us": best[1] * 1e6,
                     "int4_bytes": nbytes[0], "q4k_bytes": nbytes[1], "q4k_over_int4": best[1] / best[0]})
        print(f"gemv {n}×{k} M={m}{' in cache' if in_cache else ''}: int4 {best[0] * 1e6:.0f} µs, "
              f"q4k {best[1] * 1e6:.0f} µs ({best[1] / best[0]:.3f}×)", flush=True)
    return rows


def step(rounds: int) -> dict | None:
    from engine.models.provision import installed

    if not installed("qwen2.5-coder-1.5b"):
        return None
    ms = {"0": [], "1": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for q in ("0", "1"):
                out = Path(tmp) / f"{q}-{r}.json"
                env = {**os.environ, "SPECLAB_GGUF_BLOCKS": q, "GOMP_SPINCOUNT": "20000"}
                subprocess.run([sys.executable, "-m", "engine", "overhead", "--weights", "quantized", "--target",
                                "qwen2.5-coder-1.5b", "--threads", "2", "--dtype", "bf16", "--out", str(out)],
                               env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                ms[q].append(json.loads(out.read_text())["rows"][0]["step_ms"])
                print(f"step round {r + 1}, SPECLAB_GGUF_BLOCKS={q}: {ms[q][-1]:.2f} ms", flush=True)
    med = {q: sorted(v)[len(v) // 2] for q, v in ms.items()}
    return {"int4_step_ms": ms["0"], "q4k_step_ms": ms["1"], "int4_median_ms": med["0"], "q4k_median_ms": med["1"],
            "q4k_over_int4": med["1"] / med["0"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--step-rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if a.rounds < 1 or a.step_rounds < 1 or a.threads < 1:
        sys.exit("--rounds, --step-rounds and --threads must be ≥ 1")

    import torch

    from engine.kernels.kernel_build import cpu_flags
    from engine.models.load import machine_description, software_versions

    torch.set_num_threads(a.threads)
    rec = {"kind": "q4k-vs-int4", "gemv": gemv(a.rounds), "step": step(a.step_rounds),
           "threads": a.threads, "machine": machine_description(),
           "cpu_flags": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma"))),
           "software": software_versions(),
           "command": "python " + " ".join(["scripts/q4k_vs_int4.py", *sys.argv[1:]]),
           "date": datetime.date.today().isoformat(), "experiment": "scripts/q4k_vs_int4.py"}
    Path(a.out).write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
