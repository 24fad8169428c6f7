"""`python -m engine bench`: policies and HF assisted generation, interleaved (engine.bench.bench).

Worked example (the Makefile's `bench` target):
    python -m engine bench --per-task 1 --max-new-tokens 48 --threads 1 --temperatures 0 \\
        --out docs/results/bench-smollm2-greedy.json --markdown docs/benchmarks.md
"""

from __future__ import annotations

from pathlib import Path

from engine.cli import common


def add_parser(sub) -> None:
    from engine.bench.bench import DEFAULT_CONFIGS, BenchConfig

    p = sub.add_parser("bench", help="benchmark policies and HF assisted generation, interleaved")
    common.add_target(p)
    common.add_draft(p, help="draft model, or a model-free drafter (lookup:…, suffix:…), phrase:model=DRAFT,… or "
                             "block:PATH (a saved block drafter)")
    common.add_prompts(p, per_task=BenchConfig.per_category, limit=False)
    p.add_argument("--tasks", default="", help="comma-separated Spec-Bench tasks to keep (default: all), "
                                                "e.g. summarization,rag")
    common.add_max_new_tokens(p, BenchConfig.max_new_tokens)
    common.add_temperatures(p, ",".join(f"{t:g}" for t in BenchConfig.temperatures))
    common.add_seed(p, BenchConfig.seed)
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                   help="comma (or ';' when a spec has commas) list; 'ar', policies, POLICY@lookup:…|suffix:…|block:PATH "
                        "(a drafter of its own for that config), POLICY@ctx:W (the draft model reading the prompt's "
                        "first 64 and last W tokens), hf:MODE:VAL (MODE constant|heuristic|confidence|"
                        "lookup), 'oracle' (greedy)")
    common.add_device(p)
    common.add_weights(p, several=True)
    p.add_argument("--warmup", type=int, default=BenchConfig.warmup, help="untimed runs per config on the first prompt")
    common.add_out(p, "JSON result path (rewritten after every prompt: a kill keeps the prompts done)")
    p.add_argument("--markdown", default=None, help="append a dated table to this file (e.g. docs/benchmarks.md)")
    p.add_argument("--machine", default=None, help="machine description (default: CPU model, cores and flags)")
    p.add_argument("--trace-dir", default=None,
                   help="also write one trace per configuration and temperature here (e.g. traces/qwen)")
    add_bandwidth(p)
    p.set_defaults(func=cmd_bench)


def add_bandwidth(p) -> None:
    """--bandwidth-mib: the read-bandwidth probe recorded with the result (engine.bench.bandwidth)."""
    p.add_argument("--bandwidth-mib", type=int, default=512,
                   help="MiB the read-bandwidth probe streams before the run, for each row's roofline fraction "
                        "(0: no probe)")


def cmd_bench(a) -> int:
    from engine.bench.bench import (BenchConfig, append_markdown, check_configs, format_table, load_draft, policy_specs,
                                    run_bench)
    from engine.cli.checks import split_specs
    from engine.models.load import eos_token_ids, load_model, machine_description, software_versions
    from engine.policies.base import parse_policy
    from engine.trace.jsonio import write_json_atomic

    common.set_threads(a.threads)
    cfg = BenchConfig(configs=tuple(split_specs(a.configs)), temperatures=common.floats(a.temperatures, "--temperatures"),
                      max_new_tokens=a.max_new_tokens, per_category=a.per_task, seed=a.seed, warmup=a.warmup,
                      tasks=tuple(t.strip() for t in a.tasks.split(",") if t.strip()))
    if "ar" not in cfg.configs:
        raise ValueError("the benchmark needs 'ar' in --configs: every speedup is relative to it")
    check_configs(cfg, a.draft)  # every configuration × temperature: engine.spec.RunSpec.check, before any load
    paths = common.weights_list(a.weights)
    from engine.bench.roofline_record import check_pair_paths, probe, record

    check_pair_paths(paths, a.draft, a.dtype, a.device)  # refusals and fallbacks, one line each, before any load
    bandwidth = probe(a.bandwidth_mib, a.threads)
    hidden = any(parse_policy(s).needs().hidden for s in policy_specs(cfg.configs))
    target = load_model(a.target, a.dtype, a.device, role="target", weights=paths[0].target)
    draft_lm = load_draft(a.draft, target, a.dtype, a.device, want_hidden=hidden, weights=paths[0].draft)
    more = []
    for pw in paths[1:]:  # the same pair on each further path (each model on its own path: PairWeights)
        t = load_model(a.target, a.dtype, a.device, role="target", weights=pw.target)
        more.append((t.lm, load_draft(a.draft, t, a.dtype, a.device, want_hidden=hidden, weights=pw.draft)))
    command = common.command_line()
    machine = a.machine or machine_description()
    extra = {"command": command, "machine": machine, "software": software_versions(), "prompts_file": str(a.prompts)}
    from engine.bench import busy

    s0 = busy.sample()
    pairs = [(target.lm, draft_lm), *more]
    checkpoint = ((lambda r: write_json_atomic(record(r, pairs, bandwidth) | extra, a.out))
                  if a.out else None)  # a kill keeps the prompts done
    result = run_bench(target.lm, draft_lm, target.tokenizer, a.prompts, cfg, eos=eos_token_ids(target),
                       trace_dir=a.trace_dir, header_extra=extra, checkpoint=checkpoint, more_paths=tuple(more))
    result = record(result, pairs, bandwidth, busy.busy_between(s0, busy.sample()))
    result.update(extra)
    print(format_table(result))
    from engine.bench.roofline_record import summary_line

    print(summary_line(result))
    if a.out:
        write_json_atomic(result, a.out)
    if a.markdown:
        append_markdown(result, Path(a.markdown), command, machine)
    return 0
