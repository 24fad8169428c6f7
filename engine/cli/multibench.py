"""`python -m engine multibench`: multi-draft and block verifiers over K, L and T (engine.bench.multibench).

Worked example: `python -m engine multibench --ks 1,3 --ls 8 --temperatures 0.4 --per-task 1` runs token
and block verification at K = 1 and rrs / kseq / spectr-gbv-published / rbv / kbv at K = 1 and 3, γ = 8,
T = 0.4, one prompt per Spec-Bench task. `--methods` takes engine.verify.VERIFIERS names (the old sd,
bv, gbv still parse). The JSON result goes to --out only when given (never into docs/ by default).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from engine.cli import common


def add_parser(sub) -> None:
    from engine.bench.multibench import MultiBenchConfig

    d = MultiBenchConfig()
    p = sub.add_parser("multibench", help="benchmark token, block, RRS, K-SEQ, SpecTr-GBV, RBV and KBV over K, L, T")
    common.add_target(p)
    common.add_draft(p)
    common.add_prompts(p, per_task=d.per_category)
    common.add_max_new_tokens(p, d.max_new_tokens)
    common.add_temperatures(p, ",".join(map(str, d.temps)))
    common.add_seed(p, d.seed)
    p.add_argument("--methods", default=",".join(d.methods), help="verifiers (engine.verify.VERIFIERS names)")
    p.add_argument("--ks", default=",".join(map(str, d.ks)), help="drafts per step K")
    p.add_argument("--ls", default=",".join(map(str, d.ls)), help="draft block lengths L (= γ)")
    p.add_argument("--tree-mode", default=d.tree_mode, choices=("tree", "batch"))
    p.add_argument("--draft-mode", default=d.draft_mode, choices=("auto", "batch", "sequential"))
    p.add_argument("--modes", action="store_true", help="also time batched/sequential drafting × tree/batch scoring")
    p.add_argument("--modes-only", action="store_true", help="only the component timings (no decoding grid)")
    p.add_argument("--paired", action="store_true",
                   help="the whole grid by paired verification (engine.bench.paired): per L and T one real run "
                   "drafting max(--ks) blocks, driven by --driver, with every other (method, K) judged on its drafts; "
                   "SR modelled from measured per-call costs and checked against real --check runs")
    p.add_argument("--driver", default="rbv", help="--paired: the lossless multi-draft verifier that drives each run")
    p.add_argument("--check", default="token", help="--paired: single-draft configurations also run for real")
    common.add_device(p)
    common.add_out(p, "JSON result path, rewritten after every prompt (default: none)")
    p.add_argument("--markdown", default=None, help="append a dated section to this file (e.g. docs/benchmarks.md)")
    p.add_argument("--machine", default=None, help="machine description (default: CPU model, cores and flags)")
    p.add_argument("--from-json", default=None, help="render (and --markdown append) an earlier or partial result; "
                   "comma-separated files are merged (e.g. one per temperature)")
    from engine.cli.bench import add_bandwidth

    add_bandwidth(p)
    p.set_defaults(func=cmd_multibench)


def _config(a):
    from engine.bench.multibench import METHODS, MultiBenchConfig, method_of

    methods = tuple(method_of(m.strip()) for m in a.methods.split(",") if m.strip())
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise ValueError(f"unknown method(s) {sorted(unknown)}; choose from {', '.join(METHODS)}")
    cfg = MultiBenchConfig(methods=methods, ks=common.ints(a.ks, "--ks"), ls=common.ints(a.ls, "--ls"),
                           temps=common.floats(a.temperatures, "--temperatures"), max_new_tokens=a.max_new_tokens,
                           per_category=a.per_task, limit=a.limit, seed=a.seed, tree_mode=a.tree_mode,
                           draft_mode=a.draft_mode)
    if any(t <= 0 for t in cfg.temps):
        raise ValueError("multi-draft benchmarks need T > 0 (K greedy drafts are identical)")
    return cfg


def cmd_multibench(a) -> int:
    from engine.bench.multibench import measure_modes, merge_results, run_multibench
    from engine.bench.multibench_report import append_markdown, format_tables
    from engine.models.load import check_pair, eos_token_ids, load_model, machine_description, software_versions
    from engine.trace.jsonio import write_json_atomic

    machine = a.machine or machine_description()
    versions = software_versions()

    def report(result: dict, command: str) -> int:
        """Print the tables and append the dated markdown section when asked."""
        if a.paired:
            from engine.bench.paired_report import append_paired_markdown as append, format_paired as fmt
        else:
            append, fmt = append_markdown, format_tables
        print(fmt(result))
        if a.markdown:
            # The machine that ran it, not the one re-rendering it (--from-json).
            append(result, Path(a.markdown), command, result.get("machine") or machine)
        return 0

    if a.from_json and a.paired:
        from engine.bench.paired import with_rows

        result = with_rows(json.loads(Path(a.from_json).read_text()))
        if a.machine:  # a run saved before results carried their machine
            result["machine"] = a.machine
        if a.out:
            write_json_atomic(result, a.out)
        return report(result, result.get("command", "?"))
    if a.from_json:
        result = merge_results([json.loads(Path(f).read_text()) for f in a.from_json.split(",")])
        return report(result, result.get("command", "?"))
    cfg = _config(a)
    if a.paired:
        from engine.bench.paired import PairedConfig

        pcfg = PairedConfig(methods=cfg.methods, ks=cfg.ks, ls=cfg.ls, temps=cfg.temps,
                            max_new_tokens=cfg.max_new_tokens, per_category=cfg.per_category, limit=cfg.limit,
                            seed=cfg.seed, driver=a.driver, check=tuple(c.strip() for c in a.check.split(",") if c.strip()))
    common.set_threads(a.threads)
    from engine.bench import busy
    from engine.bench.roofline_record import probe, record

    bandwidth = probe(a.bandwidth_mib, a.threads) if not a.modes_only else None
    target = load_model(a.target, a.dtype, a.device, role="target")
    draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    command = common.command_line()
    s0 = busy.sample()

    def save(result: dict) -> None:
        if bandwidth is not None:  # the machine's bandwidth, each row's roofline fraction, busy cores so far
            result.update(record(result, [(target.lm, draft.lm)], bandwidth, busy.busy_between(s0, busy.sample())))
        if a.out:
            result["command"] = command
            result["machine"], result["versions"] = machine, versions
            write_json_atomic(result, a.out)

    if a.modes_only:
        from engine.trace.prompts import encode, load_prompts

        p0 = load_prompts(a.prompts, limit=1, per_category=cfg.per_category)[0]
        ids = encode(target.tokenizer, p0.text)
        measure_modes(target.lm, draft.lm, ids, ks=(2,), ls=(4,), reps=1)  # warm-up
        result = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "target": target.lm.name,
                  "draft": draft.lm.name, "dtype": str(target.lm.dtype).replace("torch.", ""),
                  "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.__dict__.items()},
                  "prompts": [{"question_id": p0.question_id, "category": p0.category}], "rows": [],
                  "modes": measure_modes(target.lm, draft.lm, ids, ks=tuple(k for k in cfg.ks if k > 1) or (2,),
                                         ls=cfg.ls)}
        save(result)
        print(format_tables(result))
        return 0
    if a.paired:
        from engine.bench.paired import run_paired

        result = run_paired(target.lm, draft.lm, target.tokenizer, a.prompts, pcfg, eos=eos_token_ids(target),
                            checkpoint=save)
    else:
        result = run_multibench(target.lm, draft.lm, target.tokenizer, a.prompts, cfg, eos=eos_token_ids(target),
                                modes=a.modes, checkpoint=save)
    save(result)
    result["command"] = command
    return report(result, command)
