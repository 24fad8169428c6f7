"""`python -m engine roofline`: the machine's read bandwidth, and every model on every weights path
against it (engine.bench.roofline_run; the arithmetic: engine.bench.roofline; the probe:
engine.bench.bandwidth).

Worked example (a quiet machine; writes docs/results/roofline-<cpu>.json):
    python -m engine roofline --models qwen2.5-coder-1.5b,qwen2.5-coder-0.5b,smollm2-135m \\
        --paths bf16,quantized,fp32 --per-task 2 --max-new-tokens 64 --threads 2

    python -m engine roofline --bandwidth-only        the probe alone (a few seconds)
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.cli import common


def add_parser(sub) -> None:
    from engine.bench.bandwidth import BandwidthConfig
    from engine.bench.roofline_run import PATHS, RooflineConfig

    p = sub.add_parser("roofline", help="read bandwidth, bytes per token and each path's fraction of the memory roofline")
    p.add_argument("--models", default=",".join(RooflineConfig.models),
                   help="comma-separated models, each run on every path (default: the Qwen pair and SmolLM2-135M)")
    p.add_argument("--paths", default=",".join(RooflineConfig.paths),
                   help=f"comma-separated weights paths: {', '.join(PATHS)} (bf16 / fp32: dense at that dtype)")
    common.add_prompts(p, per_task=RooflineConfig.per_task, limit=False)
    common.add_max_new_tokens(p, RooflineConfig.max_new_tokens)
    p.add_argument("--threads", type=int, default=RooflineConfig.threads, help="torch threads for the probe and the runs")
    p.add_argument("--warmup-tokens", type=int, default=RooflineConfig.warmup_tokens)
    p.add_argument("--bandwidth-mib", type=int, default=BandwidthConfig.nbytes // 2**20,
                   help="bytes the bandwidth probe streams, in MiB (≥ 512 on a real measurement)")
    p.add_argument("--repeats", type=int, default=BandwidthConfig.repeats, help="bandwidth probe passes (median)")
    p.add_argument("--round-probes", type=int, default=RooflineConfig.round_repeats,
                   help="probe passes beside every round (a prompt on every path), each run's fraction against the "
                        "probes around it: a shared host's bandwidth drifts; 0 = only before and after the runs")
    p.add_argument("--bandwidth-only", action="store_true", help="measure and print the bandwidth, nothing else")
    common.add_out(p, "JSON result path (default docs/results/roofline-<cpu>.json; '' writes none)")
    p.set_defaults(func=cmd_roofline)


def cmd_roofline(a) -> int:
    from engine.bench.bandwidth import BandwidthConfig, measure
    from engine.bench.roofline_run import RooflineConfig, check, format_rows, run_roofline
    from engine.cli.peers import lscpu
    from engine.kernels.kernel_build import this_cpu
    from engine.models.load import load_model, machine_description, software_versions
    from engine.paths import REPO_ROOT
    from engine.trace.jsonio import write_json_atomic
    from engine.trace.prompts import encode, load_prompts

    common.set_threads(a.threads)
    bw = BandwidthConfig(nbytes=a.bandwidth_mib * 2**20, threads=a.threads, repeats=a.repeats)
    cfg = RooflineConfig(models=tuple(m.strip() for m in a.models.split(",") if m.strip()),
                         paths=tuple(p.strip() for p in a.paths.split(",") if p.strip()), per_task=a.per_task,
                         max_new_tokens=a.max_new_tokens, threads=a.threads, warmup_tokens=a.warmup_tokens, bandwidth=bw,
                         round_repeats=a.round_probes)
    check(cfg)  # every refusal before the probe or a model
    if a.bandwidth_only:
        r = measure(bw)
        print(f"read bandwidth {r.gb_per_s:.2f} GB/s ({a.bandwidth_mib} MiB, {a.threads} threads, median of {a.repeats}: "
              + ", ".join(f"{s * 1e3:.1f}" for s in r.seconds) + " ms)")
        return 0
    from engine.bench.roofline_run import PATHS
    from engine.models.pair_weights import announce

    for p in cfg.paths:  # a path this CPU cannot run: refused, or its fallback said in one line, before loading
        announce(PATHS[p][1], PATHS[p][0])
    prompts = load_prompts(a.prompts, per_category=a.per_task)
    cpu = lscpu()
    result = run_roofline(cfg, prompts, lambda m, dt, w: load_model(m, dt, "cpu", role="model", weights=w), encode)
    result.update(command=common.command_line(), machine=machine_description(), lscpu=cpu,
                  software=software_versions(), prompts_file=str(a.prompts))
    if os.environ.get("SPECLAB_EXPERIMENT"):  # its file is named by the CPU, so the experiment cannot stamp it
        result["experiment"] = os.environ["SPECLAB_EXPERIMENT"]
    print(format_rows(result["rows"]))
    out = a.out if a.out is not None else str(REPO_ROOT / "docs" / "results" / f"roofline-{this_cpu()}.json")
    if out:
        write_json_atomic(result, out)
        print(f"wrote {out}")
    return 0
