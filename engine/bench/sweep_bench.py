"""The same sweep with 1 and with N local Ray workers: wall-clock ratio (docs/benchmarks.md).

    python -m engine sweep-bench                                   # tiny grid, 1 vs 2 workers, 2 runs each
    python -m engine sweep-bench --grid docs/examples/sweep-smollm2.toml --workers 1 2
    python -m engine sweep-bench --make-tiny                       # only build the tiny models

Each run does the whole grid into a fresh folder (nothing is skipped), all in one Ray session, in
ABBA order (1, 2, 2, 1 workers); the ratio is of median wall times. Wall time covers actor start
(torch import), model loading in each actor, decoding and the summary; Ray's own start (~5 s) is not
included.

`make_tiny_models` builds the untrained two-layer Llama pair of the tests with a character-level
tokenizer (lower-case letters, digits, punctuation; no EOS), so text prompts encode to varied ids.
"""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

from engine.paths import REPO_ROOT

REPO = REPO_ROOT
TINY_DIR = REPO / "runs" / "sweep-tiny" / "models"
TINY_GRID = REPO / "docs" / "examples" / "sweep-tiny.toml"
TINY_CHARS = " etaoinshrdlucmfwypvbgkqjxz0123456789.,?!:;-()'\"/"


def tiny_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0}
    for ch in TINY_CHARS:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def make_tiny_models(root: str | os.PathLike = TINY_DIR, noise: float = 0.1, seed: int = 0, layers: int = 2,
                     hidden: int = 32) -> tuple[Path, Path]:
    """Write root/target and root/draft (target + `noise` × std weight noise); returns their paths."""
    import torch

    root = Path(root)
    from engine.models.tiny import tiny_llama

    target = tiny_llama(seed, layers=layers, hidden=hidden)
    draft = tiny_llama(seed + 1, layers=layers, hidden=hidden)
    draft.load_state_dict(target.state_dict())
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * p.std() * torch.randn(p.shape, generator=g))
    tok = tiny_tokenizer()
    out = []
    for name, model in (("target", target), ("draft", draft)):
        d = root / name
        model.save_pretrained(d)
        tok.save_pretrained(d)
        out.append(d)
    return out[0], out[1]


def bench(grid_path: str, worker_counts: list[int], threads: int | None, keep: str | None,
          repeat: int = 2) -> dict:
    """Run the grid once per worker count per round, in ABBA order (1,2,2,1,...) so that a load that
    drifts during the benchmark hits every count alike; report the median wall time per count."""
    import statistics

    import ray

    from engine.models.load import software_versions
    from engine.bench.sweep import expand_grid, init_ray, load_grid, run_sweep

    grid = load_grid(grid_path)
    n_tasks = len(expand_grid(grid))
    init_ray(num_cpus=max(worker_counts))
    order = [n for r in range(repeat) for n in (worker_counts if r % 2 == 0 else worker_counts[::-1])]
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="sweep-bench-"))
    runs = []
    for i, n in enumerate(order):
        out = root / f"run{i}-workers{n}"
        if out.exists():
            raise ValueError(f"{out} exists: the benchmark needs fresh folders")
        load0 = os.getloadavg()
        r = run_sweep(grid, out, workers=n, threads=threads, progress=False)
        if r.failed:
            raise RuntimeError(f"{len(r.failed)} tasks failed: {next(iter(r.failed.values()))}")
        runs.append({"workers": n, "wall_s": round(r.wall_s, 2), "startup_s": round(r.startup_s, 2),
                     "tasks": r.executed, "tokens": r.tokens, "load_before": [round(x, 2) for x in load0]})
        print(f"workers={n}: {r.executed} tasks, {r.tokens} tokens, {r.wall_s:.2f} s wall "
              f"(first worker ready after {r.startup_s:.2f} s; load average before "
              f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f})", flush=True)
    med = {n: statistics.median(x["wall_s"] for x in runs if x["workers"] == n) for n in worker_counts}
    base = worker_counts[0]
    ratios = {n: med[base] / med[n] for n in worker_counts[1:]}
    for n, q in ratios.items():
        print(f"median wall: {base} worker(s) {med[base]:.2f} s, {n} workers {med[n]:.2f} s -> "
              f"speedup {q:.2f}x ({repeat} runs each)")
    ray.shutdown()
    return {"grid": grid_path, "tasks": n_tasks, "runs": runs, "median_wall_s": med, "ratio": ratios,
            "cpus": os.cpu_count(), "software": {**software_versions(), "ray": ray.__version__},
            "host": platform.node()}


if __name__ == "__main__":  # recorded `python -m engine.bench.sweep_bench …` commands run as `python -m engine sweep-bench …`
    import sys

    from engine.__main__ import main

    sys.exit(main(["sweep-bench", *sys.argv[1:]]))
