"""Measurement probes, one subcommand each:

    python -m engine step-probe --target T --draft D   why a real step costs more than its parts
                                                       (engine.bench.step_probe)
    python -m engine gpu-check --out gpu-check.json    exactness on the device in fp32 and the pair's
                                                       cost curves (engine.bench.gpu_check; CUDA or CPU)
    python -m engine loadbench --steps 10000,200000    trace loading speed (engine.trace.loadbench)
    python -m engine importbench --requests 10000      peer-import speed and memory (engine.interop.importbench)
    python -m engine overhead --weights dense,quantized  Python and framework share of a decode step
                                                       (engine.bench.overhead)
    python -m engine kernels                           the weight-only matmul kernels side by side
                                                       (engine.bench.kernels)
    python -m engine kernels --status [--model NAME]   which kernel path each model runs on here, and why
                                                       (engine.kernels.accelerate)
    python -m engine prefill --model M --weights W     a prefill's ms per token by length and route
                                                       (engine.bench.prefill)
"""

from __future__ import annotations

from engine.cli import common


def add_parser(sub) -> None:
    from engine.bench.step_probe import KS

    p = sub.add_parser("step-probe", help="time the target's k-token forward alone and inside a draft→verify rhythm")
    common.add_target(p, default=None)
    common.add_draft(p, default=None, required=True)
    common.add_device(p, dtype="fp32", device="cpu", threads=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--context", type=int, default=256, help="tokens of context in both caches")
    p.add_argument("--ks", default=",".join(map(str, KS)), help="forward widths k to time, e.g. 1,2,5 or 1,11")
    common.add_out(p, "write the result as JSON")
    p.set_defaults(func=cmd_step_probe)

    from engine.bench.gpu_check import VOCAB

    g = sub.add_parser("gpu-check", help="exactness on the device (fp32) and the realistic pair's cost curves")
    g.add_argument("--device", default="auto", help="cpu | cuda | auto")
    g.add_argument("--dtype", default="bf16", help="cost-curve dtype: bf16 | fp32 | fp16 (exactness always runs in fp32)")
    g.add_argument("--layers", type=int, default=None, help="cut every model to N layers (tests)")
    g.add_argument("--vocab", type=int, default=VOCAB)
    g.add_argument("--context", type=int, default=256)
    g.add_argument("--reps", type=int, default=10)
    common.add_out(g, "write the result as JSON")
    g.set_defaults(func=cmd_gpu_check)

    o = sub.add_parser("overhead", help="the share of a one-token decode step spent outside kernels, per weights path")
    common.add_target(o, default="qwen2.5-coder-1.5b")
    common.add_device(o, dtype="bf16", device="cpu", threads=2)
    common.add_weights(o, several=True)
    o.add_argument("--steps", type=int, default=8)
    o.add_argument("--repeats", type=int, default=3)
    o.add_argument("--context", type=int, default=256, help="tokens of context in the cache")
    o.add_argument("--busy", action="store_true",
                   help="also time each path beside a process that holds one core: at --threads and at the threads "
                        "the machine leaves free (engine.bench.cores.choose_threads)")
    common.add_out(o, "write the result as JSON")
    o.set_defaults(func=cmd_overhead)

    kp = sub.add_parser("kernels", help="bf16 (torch and ours), torch int4/int8 and our qgemm kernels on the Qwen shapes, interleaved")
    kp.add_argument("--ms", default="1,2,4,8,16", help="rows per call (1 = AR step, k+1 = verify of k drafts)")
    kp.add_argument("--repeats", type=int, default=20)
    kp.add_argument("--threads", type=int, default=2)
    kp.add_argument("--status", action="store_true",
                    help="time nothing: say which kernel path each weights path (and --model) runs on here, and why")
    kp.add_argument("--model", action="append", default=[], metavar="NAME",
                    help="with --status: load this model (repeatable) and print the path it got")
    kp.add_argument("--weights", default="dense", help="with --status --model: the weights path to load on")
    kp.add_argument("--dtype", default="auto", help="with --status --model: fp32, bf16 or auto")
    common.add_out(kp, "write the result as JSON")
    kp.set_defaults(func=cmd_kernels)

    pf = sub.add_parser("prefill", help="a prefill's ms per token by length, on the panel product and the one-row "
                                        "routes (quantized) and the dense path, interleaved")
    pf.add_argument("--model", action="append", required=True, metavar="NAME", help="a model (repeatable)")
    pf.add_argument("--weights", default="quantized", help="comma-separated weights paths: quantized, dense")
    pf.add_argument("--lengths", default="16,32,64,128,256,1024", help="prompt tokens per prefill")
    pf.add_argument("--repeats", type=int, default=3)
    pf.add_argument("--threads", type=int, default=2)
    pf.add_argument("--dtype", default="auto")
    common.add_out(pf, "write the result as JSON")
    pf.set_defaults(func=cmd_prefill)

    lb = sub.add_parser("loadbench", help="trace loading speed on synthetic JSONL and Parquet traces")
    lb.add_argument("--steps", default="10000,100000,200000", help="comma-separated step counts")
    lb.add_argument("--repeat", type=int, default=3, help="loads per file; the best is reported")
    lb.set_defaults(func=cmd_loadbench)

    ib = sub.add_parser("importbench", help="peer-import speed and memory on a synthetic vLLM file")
    ib.add_argument("--requests", type=int, default=10_000)
    ib.add_argument("--steps", type=int, default=64, help="verify steps per request")
    ib.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    common.add_out(ib, "write the result as JSON")
    ib.set_defaults(func=cmd_importbench)


def cmd_kernels(a) -> int:
    from engine.bench.kernels import compare, format_kernels
    from engine.kernels import qkernel
    from engine.models.load import machine_description, software_versions
    from engine.trace.jsonio import write_json_atomic

    if a.model and not a.status:
        raise ValueError("--model goes with --status (the timing table runs on random weights)")
    if a.status:
        return _kernel_status(a)
    ms = tuple(common.ints(a.ms, "--ms"))
    if a.repeats < 1 or min(ms) < 1 or max(ms) > 64:
        raise ValueError("--repeats must be ≥ 1 and every M in 1..64")
    common.set_threads(a.threads)
    rows = compare(ms=ms, repeats=a.repeats)
    print(format_kernels(rows))
    if qkernel.available() is not None:
        print(f"(no qgemm kernel here: {qkernel.available()})")
    if a.out:
        write_json_atomic({"rows": rows, "threads": a.threads, "machine": machine_description(),
                           "software": software_versions(), "command": common.command_line()}, a.out)
    return 0


def cmd_overhead(a) -> int:
    from engine.bench.overhead import busy_rows, format_overhead, measure
    from engine.models.load import load_model, machine_description, software_versions
    from engine.trace.jsonio import write_json_atomic
    from engine.trace.prompts import encode

    if a.steps < 1 or a.repeats < 1 or a.context < 8:
        raise ValueError("--steps and --repeats must be ≥ 1 and --context ≥ 8")
    common.set_threads(a.threads)
    paths = common.weights_list(a.weights)
    rows = []
    for w in dict.fromkeys(pw.target for pw in paths):  # one model: the target's path of each
        t = load_model(a.target, a.dtype, a.device, role="target", weights=w)
        ids = encode(t.tokenizer, measure.__doc__ * 40, chat=False)[: a.context]
        rows.append(measure(t.lm, ids, a.steps, a.repeats) | {"condition": "quiet", "threads": a.threads})
        if a.busy:
            rows += busy_rows(t.lm, ids, a.steps, a.repeats, a.threads, rows[-1]["step_ms"])
        del t
    print(format_overhead(rows))
    if a.out:
        write_json_atomic({"target": a.target, "dtype": a.dtype, "threads": a.threads, "rows": rows,
                           "machine": machine_description(), "software": software_versions(),
                           "command": common.command_line()}, a.out)
    return 0


def cmd_step_probe(a) -> int:
    from engine.bench.step_probe import probe
    from engine.models.load import check_pair, load_model, machine_description
    from engine.trace.jsonio import write_json_atomic
    from engine.trace.prompts import encode

    ks = tuple(sorted(set(common.ints(a.ks, "--ks"))))
    if a.repeats < 1 or a.context < 8 or min(ks) < 1 or max(ks) > 64:
        raise ValueError("--repeats must be ≥ 1, --context ≥ 8 and every k in 1..64")
    common.set_threads(a.threads)
    target = load_model(a.target, a.dtype, a.device, role="target")
    draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    import engine.bench.step_probe as sp

    ids = encode(target.tokenizer, sp.__doc__ * 8, chat=False)  # any long text: the module's docstring
    if len(ids) < a.context + max(ks):
        raise ValueError(f"the probe text has {len(ids)} tokens, fewer than --context + {max(ks)}")
    res = probe(target.lm, draft.lm, ids[:a.context], ids[a.context:a.context + max(ks)], a.repeats, ks)
    res.update(target=a.target, draft=a.draft, dtype=a.dtype, threads=a.threads, machine=machine_description(),
               command=common.command_line())
    for r in res["rows"]:
        print(f"{r['condition']:24s} {r['median_ms']:10.1f} ms  ×{r['ratio']:.2f} (n={r['n']})")
    if a.out:
        write_json_atomic(res, a.out)
    return 0


def cmd_gpu_check(a) -> int:
    """Exit status 1 when speculative output differs from autoregressive output on the device."""
    import json

    from engine.bench.gpu_check import run
    from engine.trace.jsonio import write_json_atomic

    if a.dtype not in ("bf16", "fp32", "fp16"):
        raise ValueError(f"--dtype must be bf16, fp32 or fp16, got {a.dtype!r}")
    res = run(a.device, a.dtype, a.layers, a.vocab, a.context, a.reps)
    print(json.dumps(res, indent=1))
    if a.out:
        write_json_atomic(res, a.out)
    return 0 if res["exactness_fp32"]["all_equal"] else 1


def cmd_loadbench(a) -> int:
    from engine.trace.loadbench import table

    for line in table(list(common.ints(a.steps, "--steps")), a.repeat):
        print(line, flush=True)
    return 0


def cmd_importbench(a) -> int:
    from engine.interop.importbench import lines, run
    from engine.trace.jsonio import write_json_atomic

    res = run(a.requests, a.steps, a.k)
    for line in lines(res):
        print(line, flush=True)
    if a.out:
        write_json_atomic(res, a.out)
    return 0 if res["import"]["error"] is None and res["over_limit_claim"]["error"] else 1


def _kernel_status(a) -> int:
    """`kernels --status`: the builds, the path per weights path, and each --model's KernelReport."""
    from engine.kernels.accelerate import status
    from engine.models.load import load_model

    print("\n".join(status()))
    for name in a.model:
        loaded = load_model(name, a.dtype, "cpu", role="model", weights=a.weights)
        print(f"{name}: {loaded.kernels.summary()}")
    return 0


def cmd_prefill(a) -> int:
    from datetime import datetime, timezone

    from tqdm import tqdm

    from engine.bench import bandwidth
    from engine.bench.prefill import format_prefill, measure
    from engine.kernels.quant import check_weights
    from engine.models.load import load_model, machine_description, software_versions
    from engine.trace.jsonio import write_json_atomic

    lengths = tuple(common.ints(a.lengths, "--lengths"))
    paths = [w.strip() for w in a.weights.split(",") if w.strip()]
    bad = [w for w in paths if check_weights(w)]
    if bad or not paths or a.repeats < 1 or min(lengths) < 1:
        raise ValueError(check_weights(bad[0]) if bad else "--weights names no path; --repeats and every length ≥ 1")
    common.set_threads(a.threads)
    lms = {f"{m} · {w}": load_model(m, a.dtype, role="model", weights=w).lm for m in a.model for w in paths}
    probe = bandwidth.measure()
    with tqdm(total=len(lengths) * a.repeats, desc="prefill rounds") as bar:
        rows = measure(lms, lengths, a.repeats, progress=bar)
    print(format_prefill(rows))
    print(f"(read bandwidth {probe.gb_per_s:.1f} GB/s, {a.threads} threads)")
    if a.out:
        write_json_atomic({"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "rows": rows,
                           "threads": a.threads, "bandwidth": probe.to_dict(), "machine": machine_description(),
                           "software": software_versions(), "command": common.command_line()}, a.out)
    return 0
