"""`python -m engine roofline`: every weights path of every model against the machine's memory roofline,
measured in one run (the CLI is engine/cli/roofline.py).

    run_roofline(cfg, prompts, load) -> dict     the result file's content (rows, bandwidth, busy, config)
    format_rows(rows) -> str                     its Markdown table

Per model, every path loads once (PATHS: bf16 and fp32 dense, the quantized fast path), and each prompt
runs autoregressively on every path back to back, the order rotated by one per prompt (load drift hits
every path alike). Per (model, path) row (engine.bench.roofline for the arithmetic):

    bytes_per_token          weight bytes a one-token step reads (LM head included, reduced head: its rows)
    roofline_tokens_per_s    R = bandwidth ÷ bytes_per_token
    decode_tokens_per_s      mean over prompts of new tokens ÷ (wall − prefill): one forward per token
    tokens_per_s             mean over prompts of new tokens ÷ wall (prefill included: Spec-Bench's convention)
    decode_roofline_fraction, roofline_fraction     the two speeds ÷ R
    kv_bytes_per_token       the KV cache a decode step reads too, at the request's mean decode context (prompt +
                             (new − 1) / 2 tokens, × kv_bytes_per_context_token), averaged over prompts
    decode_roofline_fraction_kv   decode-only tokens/s against the floor of weights + that KV read: the physics of
                             a long prompt (SmolLM2-135M at 1,500 tokens reads 35 MB of cache beside 269 MB of
                             weights; the 1.5B 43 MB beside 3.09 GB), where the weights-only fraction understates

The bandwidth is measured before the first model loads, again after the last run, and (`round_repeats` passes on
one resident buffer) before every round and after a model's last: a round is one prompt on every path. Each run is
compared with the mean of the probes just before and just after its round, and a row's fractions are the means of
its runs' (`summarize`). Why: a shared host's bandwidth drifts — 24–58 GB/s within minutes on a 2-core Zen 4 EPYC,
where the rule "the higher of the probes before and after" turned a SmolLM2 decode at ~0.75 of the bandwidth
beside it into 0.33, and (the other way) a dip before a run once made "1.42" of 0.86. The file keeps every probe
(`bandwidth_rounds`), R from their median, and `decode_roofline_fraction_best` against the highest (never
overstating); `round_repeats` 0 keeps the earlier rule. /proc/stat says whether another process held a core
meanwhile (engine.bench.busy).

Worked example: the 1.5B target on bf16 reads 3.09 GB a token; at 10.0 GB/s R = 3.24 tokens/s; 12
prompts × 64 tokens decoding at a mean 2.90 tokens/s (2.80 with prefill) → fractions 0.89 and 0.86.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable

from engine.bench import bandwidth as bw_probe
from engine.bench import busy
from engine.bench.roofline import bytes_per_token, fraction, roofline_tokens_per_s
from engine.bench.roofline_report import decode_fraction_cell, size

# path name → (dtype, weights): what `load_model` is given for it
PATHS = {"bf16": ("bf16", "dense"), "fp32": ("fp32", "dense"), "quantized": ("auto", "quantized"),
         "int8": ("auto", "int8"), "int4": ("auto", "int4")}


@dataclass(frozen=True)
class RooflineConfig:
    models: tuple[str, ...] = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m")  # target, draft, small pair
    paths: tuple[str, ...] = ("bf16", "quantized", "fp32")  # the lab's three weights paths
    per_task: int = 2  # 2 × 6 Spec-Bench tasks = 12 prompts, the issue's benchmark size
    max_new_tokens: int = 64  # the issue's benchmark length: long enough that prefill is a minority
    threads: int = 2  # the lab's machines have two cores; decode runs use both
    warmup_tokens: int = 8  # one untimed short run per (model, path): first calls build caches and kernels
    bandwidth: bw_probe.BandwidthConfig = field(default_factory=bw_probe.BandwidthConfig)
    # a probe (this many passes) beside every round, each run's fractions against the probes around it: a shared
    # host's read bandwidth swung 24–58 GB/s within minutes on a 2-core Zen 4 EPYC; 0 = before and after only
    round_repeats: int = 3


def check(cfg: RooflineConfig) -> None:
    """One line for the first thing the run cannot do, before anything loads."""
    bad = [p for p in cfg.paths if p not in PATHS]
    if bad:
        raise ValueError(f"--paths: unknown path {bad[0]!r}; choose from {', '.join(PATHS)}")
    if not cfg.models or not cfg.paths:
        raise ValueError("the roofline needs at least one model and one path")
    if len(set(cfg.paths)) != len(cfg.paths) or len(set(cfg.models)) != len(cfg.models):
        raise ValueError("name each model and each path once")
    if cfg.per_task < 1 or cfg.max_new_tokens < 1 or cfg.warmup_tokens < 0 or cfg.threads < 1 or cfg.round_repeats < 0:
        raise ValueError("--per-task, --max-new-tokens and --threads must be ≥ 1, --warmup-tokens and "
                         "--round-probes ≥ 0")
    bw_probe.check(cfg.bandwidth)


def time_ar(lm, ids: list[int], max_new_tokens: int, eos=()) -> dict[str, float]:
    """One autoregressive request through the engine's loop: new tokens, wall and prefill seconds."""
    from engine.decode import DecodeConfig
    from engine.run import Request, RequestRun

    run = RequestRun(lm, None, None, DecodeConfig(max_new_tokens=max_new_tokens), Request(list(ids)), eos_ids=eos)
    prefill_ms = sum(rec.t_prefill_ms for rec in run)
    return {"new_tokens": len(run.output), "wall_s": run.wall_s, "prefill_s": prefill_ms / 1e3, "prompt_tokens": len(ids)}


def _kv_read(r: dict[str, float], kv_per_context_token: int) -> float:
    """KV bytes a decode step of run r reads at its mean decode context: prompt + (new − 1) / 2 tokens."""
    return kv_per_context_token * (r["prompt_tokens"] + (r["new_tokens"] - 1) / 2)


def _paired(runs: list[dict[str, Any]], speeds: list[float], nbytes: list[float]) -> float | None:
    """Mean over runs of speed_i · bytes_i ÷ the bandwidth probed beside run i (None unless every run has one)."""
    bws = [r.get("bandwidth_gb_per_s") for r in runs]
    if not runs or not all(bws):
        return None
    return statistics.mean(fraction(v, n, b) for v, n, b in zip(speeds, nbytes, bws))


def summarize(runs: list[dict[str, float]], nbytes: int, gb_per_s: float | None,
              kv_per_context_token: int = 0, best_gb_per_s: float | None = None) -> dict[str, Any]:
    """A row's speeds and fractions from its per-prompt runs (means over prompts, as the bench); the KV-inclusive
    decode fraction where the runs record their prompt lengths and the model its KV bytes.

    Where every run carries the bandwidth probed beside it (`bandwidth_gb_per_s`), each fraction is the mean of the
    runs' own fractions, f = mean_i(v_i · bytes ÷ B_i), and `decode_roofline_fraction_best` the decode one against
    `best_gb_per_s` (the highest probe of the whole run: the most a path could have been asked for; default
    `gb_per_s`). Without them every fraction is against `gb_per_s`; R = `gb_per_s` ÷ bytes either way.

    Worked example: runs at 60 and 40 tokens/s of 0.25 GB probed at 30 and 20 GB/s → f = (0.50 + 0.50) / 2 = 0.50;
    against the best probe (30 GB/s) 50 · 0.25 / 30 = 0.42."""
    tps_r = [r["new_tokens"] / r["wall_s"] for r in runs]
    dec_r = [r["new_tokens"] / max(r["wall_s"] - r["prefill_s"], 1e-9) for r in runs]
    tps, dec = statistics.mean(tps_r), statistics.mean(dec_r)
    out = {"prompts": len(runs), "new_tokens": sum(r["new_tokens"] for r in runs),
           "roofline_tokens_per_s": roofline_tokens_per_s(nbytes, gb_per_s) if gb_per_s else None,
           "decode_tokens_per_s": dec, "tokens_per_s": tps,
           "decode_roofline_fraction": fraction(dec, nbytes, gb_per_s), "roofline_fraction": fraction(tps, nbytes, gb_per_s)}
    weights = [nbytes] * len(runs)
    paired = _paired(runs, dec_r, weights)
    if paired is not None:
        out["decode_roofline_fraction_best"] = fraction(dec, nbytes, best_gb_per_s or gb_per_s)
        out["decode_roofline_fraction"], out["roofline_fraction"] = paired, _paired(runs, tps_r, weights)
    if kv_per_context_token and all("prompt_tokens" in r for r in runs):
        kv = [_kv_read(r, kv_per_context_token) for r in runs]
        out["kv_bytes_per_token"] = statistics.mean(kv)
        if paired is not None:
            out["decode_roofline_fraction_kv"] = _paired(runs, dec_r, [nbytes + k for k in kv])
        else:
            out["decode_roofline_fraction_kv"] = (statistics.mean(d * (nbytes + k) for d, k in zip(dec_r, kv))
                                                  / (gb_per_s * 1e9) if gb_per_s else None)
    return out


def kernel_of(lm) -> str:
    """Which kernels the loaded path runs on: 'speclab bgemv', 'torch', or the quantized layers by type."""
    from collections import Counter

    from engine.kernels.dense_kernel import kernel_of as dense_kernel_of

    if getattr(lm, "weights", "dense") == "dense":
        return dense_kernel_of(lm.model)
    kinds = Counter(type(m).__name__ for m in lm.model.modules() if hasattr(m, "fmt"))
    return ", ".join(f"{n} {k}" for k, n in kinds.most_common())


def build_of(lm) -> str | None:
    """The kernel library build the loaded path runs on ('bgemv-amx', 'qgemm-avx512vnni', …), None on torch's: a
    run with a build forced (SPECLAB_QGEMM / SPECLAB_BGEMV, a proxy for another CPU's code) says so in its rows."""
    from engine.kernels import dense_kernel, qkernel

    if getattr(lm, "weights", "dense") == "dense":
        return dense_kernel.loaded_variant() if kernel_of(lm) == "speclab bgemv" else None
    ours = any(isinstance(m, qkernel.QGemmLinear) for m in lm.model.modules())
    return f"qgemm-{qkernel.variant()}" if ours and qkernel.variant() else None


def run_roofline(cfg: RooflineConfig, prompts: list, load: Callable[..., Any], encode: Callable[[Any, str], list[int]],
                 say: Callable[[str], None] = print) -> dict[str, Any]:
    """Every (model, path) of `cfg` on `prompts` (engine.trace.prompts.Prompt: `.text`, `.question_id`).
    `load(model, dtype, weights)` → engine.models.load.LoadedModel; `encode(tokenizer, text)` → ids."""
    import torch

    from engine.models.load import eos_token_ids

    check(cfg)
    if not prompts:
        raise ValueError("no prompts")
    before = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        buf = bw_probe.buffer(cfg.bandwidth)
        bw0 = bw_probe.measure(cfg.bandwidth, buf)
        say(f"read bandwidth {bw0.gb_per_s:.1f} GB/s ({cfg.bandwidth.nbytes / 2**20:.0f} MiB, {cfg.threads} threads, "
            f"median of {cfg.bandwidth.repeats})")
        round_cfg = replace(cfg.bandwidth, repeats=max(cfg.round_repeats, 1), warmup=0)  # on `buf`: already resident
        probes: list[dict[str, Any]] = []

        def probe(model: str, before_round: int) -> float:
            g = bw_probe.measure(round_cfg, buf).gb_per_s
            probes.append({"model": model, "before_round": before_round, "gb_per_s": g})
            return g

        s0, t0 = busy.sample(), time.perf_counter()
        rows: list[dict[str, Any]] = []
        for model in cfg.models:
            loaded = {}
            for p in cfg.paths:
                dtype, weights = PATHS[p]
                loaded[p] = load(model, dtype, weights)
            first = loaded[cfg.paths[0]]
            ids = [encode(first.tokenizer, pr.text) for pr in prompts]
            eos = eos_token_ids(first)
            runs: dict[str, list] = {p: [] for p in cfg.paths}
            for p, m in loaded.items():
                if cfg.warmup_tokens:
                    time_ar(m.lm, ids[0], cfg.warmup_tokens, eos)
            prev = probe(model, 0) if cfg.round_repeats else None
            for i, pr in enumerate(prompts):
                order = cfg.paths[i % len(cfg.paths):] + cfg.paths[: i % len(cfg.paths)]
                for p in order:
                    r = time_ar(loaded[p].lm, ids[i], cfg.max_new_tokens, eos)
                    runs[p].append(r | {"question_id": pr.question_id})
                    say(f"{model} [{p}] q{pr.question_id}: {r['new_tokens']} tokens, "
                        f"{r['new_tokens'] / r['wall_s']:.2f} tokens/s")
                if prev is not None:
                    nxt = probe(model, i + 1)
                    for p in order:  # the round's runs: the mean of the probes just before and just after it
                        runs[p][-1]["bandwidth_gb_per_s"] = (prev + nxt) / 2
                    prev = nxt
            for p in cfg.paths:
                lm = loaded[p].lm
                tb = bytes_per_token(lm)
                dtype, weights = PATHS[p]
                rows.append({"model": model, "path": p, "dtype": str(lm.dtype).replace("torch.", ""),
                             "weights": weights, "kernel": kernel_of(lm), "build": build_of(lm),
                             "reduced_head_rows": int(lm.vocab_subset.numel()) if lm.vocab_subset is not None else None,
                             **tb.to_dict(), "runs": runs[p]})
            del loaded, first
        report = busy.busy_between(s0, busy.sample())
        elapsed = time.perf_counter() - t0
        bw1 = bw_probe.measure(cfg.bandwidth, buf)
        del buf
        say(f"read bandwidth after the runs {bw1.gb_per_s:.1f} GB/s"
            + (f"; {report.line()}" if report is not None else ""))
    finally:
        torch.set_num_threads(before)
    every = [bw0.gb_per_s, bw1.gb_per_s] + [p["gb_per_s"] for p in probes]
    if probes:
        say(f"read bandwidth beside the rounds: {min(every):.1f}–{max(every):.1f} GB/s, median "
            f"{statistics.median(every):.1f}; each run compared with the probes around its round")
        ref, rule = statistics.median(every), ("each run's fractions against the mean of the probes just before and "
                                              "just after its round (a prompt on every path), a row's the mean of its "
                                              "runs'; R and bandwidth_gb_per_s: the median of every probe; "
                                              "decode_roofline_fraction_best: against the highest probe")
    else:
        ref, rule = max(every), "the higher of the probes before and after the runs"
    for r in rows:
        r.update(summarize(r["runs"], r["bytes_per_token"], ref, r.get("kv_bytes_per_context_token") or 0,
                           best_gb_per_s=max(every)))
        r["runs"] = r.pop("runs")  # after the figures, as before
    return {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "kind": "roofline",
            "config": {"models": list(cfg.models), "paths": list(cfg.paths), "prompts": len(prompts),
                       "question_ids": [p.question_id for p in prompts], "max_new_tokens": cfg.max_new_tokens,
                       "threads": cfg.threads, "warmup_tokens": cfg.warmup_tokens,
                       "order": "per model, each prompt on every path back to back, rotated by one per prompt"},
            "bandwidth": bw0.to_dict(), "bandwidth_after": bw1.to_dict(), "bandwidth_gb_per_s": ref,
            "bandwidth_rule": rule, "bandwidth_rounds": probes,
            "busy": report.to_dict() if report is not None else None, "elapsed_s": elapsed, "rows": rows}


def _f(v, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def format_rows(rows: list[dict[str, Any]]) -> str:
    """The result as a Markdown table, one line per (model, path)."""
    out = ["| model | path | kernel | bytes/token | roofline tok/s | decode tok/s | fraction (decode) | "
           "fraction (decode, weights + KV) | tok/s incl. prefill | fraction (incl. prefill) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['path']} | {r['kernel']} | {size(r['bytes_per_token'])} | "
                   f"{_f(r['roofline_tokens_per_s'], '.2f')} | {r['decode_tokens_per_s']:.2f} | "
                   f"{decode_fraction_cell(r)} | {_f(r.get('decode_roofline_fraction_kv'), '.2f')} | "
                   f"{r['tokens_per_s']:.2f} | {_f(r['roofline_fraction'], '.2f')} |")
    return "\n".join(out)
