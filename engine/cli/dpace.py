"""`python -m engine dpace ...`: block-drafter (DFlash-style) training objectives.

Two targets (`--target`): `tiny` (a byte-level model trained here, the default) and `smollm2`
(SmolLM2-135M-Instruct, the demo target). `--target smollm2` switches every default to
`BlockTrainConfig.for_target("smollm2")`; flags given on the command line override it.

    prepare   train the tiny byte-level target and generate its greedy self-distillation data
    prepare-smollm2   SmolLM2's greedy answers to ShareGPT prompts (resumable) → data.safetensors
    train     one run (objective, α/γ, seed); resumable, skipped when finished
    sweep     the objective comparison: main objectives and/or the α sweep over several seeds
    online    decode a few Spec-Bench dev prompts with each run's drafter (τ online, CPU speedup)
    speed     interleaved CPU wall-clock speedup vs autoregressive (AR and block decoding alternate)
    report    summary table + copy of the training traces into a results directory
    export    the best run's drafter + the tiny target, with a model card (models/block-drafter-tiny)
    extract-qwen   Qwen2.5-Coder-1.5B features in shards (resumable; engine/train/blockdata/extract.py)
    train-qwen     a block drafter for it from the shards (checkpointed, resumable; blockdata/train.py)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from engine.paths import SPEC_BENCH_DEV
from engine.cli.common import add_per_task

# The Spec-Bench dev questions sit beside the checkout (../shared), as for every other benchmark command.


def _seeds(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(",") if x.strip())


def add_parser(sub) -> None:
    from engine.config import add_dataclass_args
    from engine.train.dpace.fit import BlockTrainConfig
    from engine.train.dpace.targets import SmolDataConfig
    from engine.train.dpace.tiny_target import TinyConfig
    from engine.train.blockdata.extract import ExtractConfig
    from engine.train.blockdata.train import QwenTrainConfig

    import argparse

    p = sub.add_parser("dpace", help="block-drafter training objectives (D-PACE vs fixed schedules)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_subparsers(dest="dpace_cmd", required=True)
    pr = s.add_parser("prepare", help="tiny target + its greedy data")
    add_dataclass_args(pr, TinyConfig)
    pr.set_defaults(func=cmd_prepare)
    ps = s.add_parser("prepare-smollm2", help="SmolLM2 greedy answers + block data")
    add_dataclass_args(ps, SmolDataConfig)
    ps.set_defaults(func=cmd_prepare_smollm2)
    tr = s.add_parser("train", help="one training run")
    add_dataclass_args(tr, BlockTrainConfig, unset_default=True)
    tr.set_defaults(func=cmd_train)
    sw = s.add_parser("sweep", help="all objectives × seeds (same data, steps, anchors)")
    add_dataclass_args(sw, BlockTrainConfig, unset_default=True)
    sw.add_argument("--seeds", default="0,1,2")
    sw.add_argument("--which", default="all", choices=["all", "main", "alpha"])
    sw.add_argument("--shard", default="0/1", help="i/n: run every n-th config starting at i (parallel workers)")
    sw.set_defaults(func=cmd_sweep)
    on = s.add_parser("online", help="online τ and CPU speedup of finished runs")
    on.add_argument("--data-dir", default="")
    on.add_argument("--runs-dir", default="")
    on.add_argument("--target", default="tiny", choices=["tiny", "smollm2"])
    on.add_argument("--block-size", type=int, default=8)
    on.add_argument("--prompts", default=SPEC_BENCH_DEV)
    add_per_task(on, 3, dest="per_category")
    on.add_argument("--max-new-tokens", type=int, default=160)
    on.add_argument("--prompt-len", type=int, default=48, help="bytes of each prompt kept (the training prompt length)")
    on.add_argument("--traces-dir", default="", help="also write a decode trace per run here")
    on.add_argument("--threads", type=int, default=1)
    on.add_argument("--shard", default="0/1", help="i/n: evaluate every n-th run starting at i (parallel workers)")
    on.add_argument("--runs", default="", help="comma-separated run tags (default: every finished run)")
    on.set_defaults(func=cmd_online)
    sp = s.add_parser("speed", help="interleaved CPU wall-clock speedup vs autoregressive for some runs")
    sp.add_argument("runs", nargs="+", help="run tags (directories under the runs dir)")
    sp.add_argument("--data-dir", default="")
    sp.add_argument("--runs-dir", default="")
    sp.add_argument("--target", default="tiny", choices=["tiny", "smollm2"])
    sp.add_argument("--prompts", default=SPEC_BENCH_DEV)
    add_per_task(sp, 1, dest="per_category")
    sp.add_argument("--max-new-tokens", type=int, default=160)
    sp.add_argument("--reps", type=int, default=2)
    sp.add_argument("--threads", type=int, default=1)
    sp.add_argument("--windows", default="", help="extra windows w < B−1 to time with the same drafter, e.g. 1,3")
    sp.set_defaults(func=cmd_speed)
    rp = s.add_parser("report", help="summary table and training traces into a results dir")
    rp.add_argument("--runs-dir", default="")
    rp.add_argument("--target", default="tiny", choices=["tiny", "smollm2"])
    rp.add_argument("--block-size", type=int, default=8)
    rp.add_argument("--out", default="docs/results/dpace")
    rp.set_defaults(func=cmd_report)
    rq = s.add_parser("report-qwen", help="the objective comparison over the Qwen runs (train-qwen) into a results dir")
    rq.add_argument("--runs-dir", default="")
    rq.add_argument("--block-size", type=int, default=16)
    rq.add_argument("--out", default="docs/results/dpace-qwen")
    rq.set_defaults(func=cmd_report_qwen)
    xq = s.add_parser("extract-qwen", help="Qwen2.5-Coder-1.5B layer features in resumable shards")
    add_dataclass_args(xq, ExtractConfig)
    xq.set_defaults(func=cmd_extract_qwen)
    tq = s.add_parser("train-qwen", help="a block drafter for Qwen2.5-Coder-1.5B from the feature shards")
    add_dataclass_args(tq, QwenTrainConfig)
    tq.set_defaults(func=cmd_train_qwen)
    ex = s.add_parser("export", help="copy the best run's drafter + the tiny target into a model dir")
    ex.add_argument("--data-dir", default="")
    ex.add_argument("--runs-dir", default="")
    ex.add_argument("--target", default="tiny", choices=["tiny", "smollm2"])
    ex.add_argument("--block-size", type=int, default=16)
    ex.add_argument("--out", default="", help="default models/block-drafter-tiny or models/block-drafter-smollm2")
    ex.add_argument("--run", default="", help="export this run tag instead of the highest offline τ (smollm2)")
    ex.set_defaults(func=cmd_export)


def cmd_prepare(a) -> int:
    from engine.config import dataclass_from_args
    from engine.train.dpace.tiny_target import TinyConfig, prepare

    print(prepare(dataclass_from_args(TinyConfig, a)))
    return 0


def cmd_prepare_smollm2(a) -> int:
    from engine.config import dataclass_from_args
    from engine.train.dpace.targets import SmolDataConfig, prepare_smollm2

    print(prepare_smollm2(dataclass_from_args(SmolDataConfig, a)))
    return 0


def _train_config(a):
    from engine.config import override
    from engine.train.dpace.fit import BlockTrainConfig

    return override(BlockTrainConfig.for_target(a.target or "tiny"), a)


def cmd_train(a) -> int:
    import json

    from engine.train.dpace.fit import train_run

    print(json.dumps(train_run(_train_config(a)), indent=1))
    return 0


def cmd_sweep(a) -> int:
    from engine.train.dpace.features import FeatureData
    from engine.train.dpace.fit import sweep_configs, tiny_dir, train_run

    base = _train_config(a)
    cfgs = sweep_configs(base, _seeds(a.seeds), a.which)
    i, n = (int(x) for x in a.shard.split("/"))
    cfgs = cfgs[i::n]
    data = FeatureData(tiny_dir(base), tuple(base.target_layers), base.threads)
    for k, c in enumerate(cfgs):
        f = train_run(c, data=data)
        print(f"[{k + 1}/{len(cfgs)}] {c.tag}: tau_offline {f['tau_offline']:.3f} ± {f['tau_se']:.3f} "
              f"({f['train_wall_s']:.0f} s)", flush=True)
    return 0


def _runs(a) -> Path:
    from engine.train.dpace.fit import BlockTrainConfig, runs_dir

    return runs_dir(dataclasses.replace(BlockTrainConfig.for_target(a.target), runs_dir=a.runs_dir))


def cmd_online(a) -> int:
    import sys

    from engine.train.dpace.fit import BlockTrainConfig, tiny_dir
    from engine.train.dpace.eval import online_eval

    runs = _runs(a)
    dirs = [d for d in sorted(runs.glob(f"B{a.block_size}-*")) if (d / "final.json").is_file()]
    if a.runs:
        dirs = [d for d in dirs if d.name in set(a.runs.split(","))]
    if not dirs:
        raise ValueError(f"no finished B={a.block_size} runs under {runs}")
    i, n = (int(x) for x in a.shard.split("/"))
    dirs = dirs[i::n]
    root = tiny_dir(dataclasses.replace(BlockTrainConfig.for_target(a.target), data_dir=a.data_dir))
    res = online_eval(dirs, root, a.prompts, a.per_category, a.max_new_tokens, a.prompt_len,
                      Path(a.traces_dir) if a.traces_dir else None, a.threads,
                      command="python -m engine " + " ".join(sys.argv[1:]))
    for k, v in res.items():
        print(f"{k}: tau_online {v['tau_online']:.3f}  speedup_cpu {v['speedup_cpu']:.2f}x  "
              f"exact={v['outputs_equal_ar']}")
    return 0


def cmd_report(a) -> int:
    from engine.train.dpace.report import markdown_table, write_results

    res = write_results(_runs(a), a.block_size, Path(a.out))
    print(markdown_table(res["summary"]))
    return 0


def cmd_report_qwen(a) -> int:
    """The Qwen runs (train-qwen) live in their own folder, tagged qwen-B…; the result records the machine."""
    import sys

    from engine.models.load import machine_description
    from engine.train.blockdata.train import QwenTrainConfig, qwen_runs_dir
    from engine.train.dpace.report import markdown_table, write_results
    from engine.train.eagle.report import cpu_flags, software

    runs = qwen_runs_dir(QwenTrainConfig(runs_dir=a.runs_dir))
    res = write_results(runs, a.block_size, Path(a.out), "qwen-",
                        {"machine": machine_description(), "cpu_flags": cpu_flags(), "software": software(),
                         "command": "python -m engine " + " ".join(sys.argv[1:])})
    print(markdown_table(res["summary"]))
    return 0


def cmd_export(a) -> int:
    import sys

    from engine.train.dpace.fit import BlockTrainConfig, tiny_dir
    from engine.train.dpace.export import export_best

    root = tiny_dir(dataclasses.replace(BlockTrainConfig.for_target(a.target), data_dir=a.data_dir))
    if a.target == "smollm2":
        import json

        from engine.train.dpace.export import export_best_smollm2

        out = Path(a.out or "models/block-drafter-smollm2")
        summ = Path("docs/results/dpace-smollm2/summary.json")
        summary = json.loads(summ.read_text())["summary"] if summ.is_file() else None
        cmd = ("`python -m engine dpace prepare-smollm2`, then the runs in docs/dpace.md §7, then `python -m engine "
               + " ".join(sys.argv[1:]) + "`")
        print(export_best_smollm2(_runs(a), root, out, a.block_size, cmd, summary, tag=a.run))
        return 0
    cmd = ("`python -m engine dpace prepare`, then the sweep in docs/dpace.md §6, then `python -m engine "
           + " ".join(sys.argv[1:]) + "`")
    print(export_best(_runs(a), root, Path(a.out or "models/block-drafter-tiny"), a.block_size, cmd))
    return 0


def cmd_extract_qwen(a) -> int:
    import json

    from engine.config import dataclass_from_args
    from engine.train.blockdata.extract import ExtractConfig, extract

    print(json.dumps(extract(dataclass_from_args(ExtractConfig, a)), indent=1))
    return 0


def cmd_train_qwen(a) -> int:
    import json

    from engine.config import dataclass_from_args
    from engine.train.blockdata.train import QwenTrainConfig, train_qwen

    print(json.dumps(train_qwen(dataclass_from_args(QwenTrainConfig, a)), indent=1))
    return 0


def cmd_speed(a) -> int:
    from engine.train.dpace.fit import BlockTrainConfig, tiny_dir
    from engine.train.dpace.eval import interleaved_speed

    runs = _runs(a)
    root = tiny_dir(dataclasses.replace(BlockTrainConfig.for_target(a.target), data_dir=a.data_dir))
    res = interleaved_speed([runs / t for t in a.runs], root, a.prompts, a.per_category, a.max_new_tokens,
                            reps=a.reps, threads=a.threads, windows=_seeds(a.windows))
    for k, v in res.items():
        print(f"{k}: speedup {v['speedup_cpu_interleaved']:.2f}x (AR {v['ar_s']:.1f} s, block {v['block_s']:.1f} s)")
        for w, x in v["by_window"].items():
            print(f"    window {w}: speedup {x['speedup']:.2f}x  tau {x['tau']:.3f}  calls {x['target_calls']}")
    return 0
