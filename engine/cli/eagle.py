"""`python -m engine eagle ...`: the EAGLE-style head for Qwen2.5-Coder-1.5B (engine/train/eagle/).

    features   the target's layer features and labels in resumable shards (the session's local cache)
    train      one run (resumable from its checkpoint; a finished run is not retrained)
    export     copy a run's head into models/eagle-qwen2.5-coder-1.5b with its model card
    report     the runs' curves and finals into docs/results/eagle-*.json
"""

from __future__ import annotations

import json


def add_parser(sub) -> None:
    from engine.config import add_dataclass_args
    from engine.train.blockdata.extract import ExtractConfig
    from engine.train.eagle.train import EagleTrainConfig

    p = sub.add_parser("eagle", help="EAGLE-style head for the Qwen target: features, train, export, report")
    s = p.add_subparsers(dest="eagle_cmd", required=True)
    f = s.add_parser("features", help="target features in shards (resumable; defaults: engine.train.eagle)")
    add_dataclass_args(f, ExtractConfig, unset_default=True)
    f.set_defaults(func=cmd_features)
    t = s.add_parser("train", help="train one head (checkpointed, resumable)")
    add_dataclass_args(t, EagleTrainConfig)
    t.set_defaults(func=cmd_train)
    e = s.add_parser("export", help="copy a run's head into models/ with a model card")
    e.add_argument("--run", required=True, help="the run's folder (…/eagle-runs-qwen/<tag>)")
    e.add_argument("--out", default="models/eagle-qwen2.5-coder-1.5b")
    e.set_defaults(func=cmd_export)
    r = s.add_parser("report", help="curves and finals of runs into a results JSON")
    r.add_argument("--runs", nargs="+", required=True, help="run folders")
    r.add_argument("--out", required=True, help="docs/results/eagle-<name>.json")
    r.add_argument("--command", default="", help="the command that made the runs (recorded)")
    r.set_defaults(func=cmd_report)
    w = s.add_parser("windows", help="every window rule replayed exactly over greedy AR traces with the head")
    w.add_argument("--head", required=True, help="head directory (models/eagle-qwen2.5-coder-1.5b)")
    w.add_argument("--bench", required=True, help="a bench result with the head's cost probe (costs.by_drafter)")
    w.add_argument("--k-max", type=int, default=8)
    w.add_argument("--c", type=float, default=None, help="the head's cost ratio (default: the bench's probe)")
    w.add_argument("--out", required=True)
    w.add_argument("traces", nargs="+", help="greedy AR traces of the target (the bench's ar-t0.jsonl)")
    w.set_defaults(func=cmd_windows)


def cmd_features(a) -> int:
    from engine.config import override
    from engine.train.blockdata.extract import extract
    from engine.train.eagle import features_config

    print(json.dumps(extract(override(features_config(), a)), indent=1))
    return 0


def cmd_train(a) -> int:
    from engine.config import dataclass_from_args
    from engine.train.eagle.train import EagleTrainConfig, train

    final = train(dataclass_from_args(EagleTrainConfig, a))
    print(json.dumps({k: v for k, v in final.items() if k != "curve"}, indent=1))
    return 0


def cmd_export(a) -> int:
    from engine.train.eagle.report import export

    print(export(a.run, a.out))
    return 0


def cmd_report(a) -> int:
    from engine.train.eagle.report import report

    print(report(a.runs, a.out, a.command))
    return 0


def cmd_windows(a) -> int:
    from engine.train.eagle.windows import run

    res = run(a.head, a.traces, a.bench, a.out, a.k_max, a.c)
    o = res["tasks"]["overall"]
    print(f"overall: best fixed {o['best_fixed']} {o[o['best_fixed']]['speedup']:.2f}×, best confidence "
          f"{o['best_confidence']} {o[o['best_confidence']]['speedup']:.2f}× ({o['confidence_over_best_fixed']:.3f}× "
          f"the best fixed), oracle {o['oracle']['speedup']:.2f}× ({o['oracle_over_best_fixed']:.3f}×); lag-1 "
          f"acceptance autocorrelation {o['acceptance_lag1_autocorrelation']}")
    return 0
