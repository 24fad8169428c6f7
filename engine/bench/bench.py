"""Benchmark harness: our engine (autoregressive, fixed γ, adaptive policies) against HF transformers'
own assisted generation with the same pair, interleaved so every ratio is measured side by side.

For each prompt the configurations (engine.bench.runner: one spec on one prompt) run back to back in a
rotated order (so drift in machine load hits every configuration alike). Metrics per configuration,
per Spec-Bench task and overall (names: engine.metrics):

    tokens_per_s             Spec-Bench's convention: mean over prompts of new_tokens / wall time
    speedup_vs_ar            mean tok/s ÷ mean tok/s of our autoregressive run (ratio of means)
    decode_speedup_vs_ar     the same over wall time minus the prompt's prefill: on a long prompt a
                             noisy prefill can dominate a short answer's wall time (ours: both models'
                             prefill; HF: the target's first forward, which also verifies HF's first
                             candidates in assisted / prompt-lookup modes)
    mean_emitted_per_call_incl_bonus    new tokens / target calls, incl. the bonus (1.00 for autoregressive)
    mean_accepted_per_call_excl_bonus   accepted drafts / target calls
    draft_acceptance_rate    accepted drafts / drafted tokens (None: nothing drafted, or drafts unknown)
    target_calls             verify forwards (prefill excluded)
    wasted_drafts            drafted tokens that were rejected or dropped unverified (trimming rules)
    prefill_share            the target's prompt prefill ÷ wall time (speculation cannot shorten it)
    draft_catchup_share      the draft model's lazy prefill and catch-ups (timed in the run) ÷ wall

The cost ratio c = t(draft forward, 1 token) / t(target forward, 1 token) is measured at the start
with warm KV caches, and t(k)/t(1) for the target's verify cost. Rows and tables: engine.bench.bench_report. The
CLI is engine/cli/bench.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from engine.bench.bench_report import aggregate, append_markdown, format_table
from engine.bench.runner import (DEFAULT_CONFIGS, RunResult, _forward_lm, _hf_needs_draft, applies, hf_kwargs,
                                 measure_costs, policy_specs, run_config, set_hf_mode, split_config)
from engine.core.sampling import SamplingConfig
from engine.decode import DecodeConfig
from engine.drafters.autoregressive import is_context
from engine.policies.base import parse_policy
from engine.trace.prompts import encode, load_prompts, task_of

__all__ = ["BenchConfig", "DEFAULT_CONFIGS", "RunResult", "aggregate", "append_markdown", "format_table", "load_draft",
           "policy_specs", "run_bench", "split_config", "trace_name"]


@dataclass(frozen=True)
class BenchConfig:
    configs: tuple[str, ...] = DEFAULT_CONFIGS  # every policy of the foundation issue + HF's three modes
    temperatures: tuple[float, ...] = (0.0, 0.7)  # greedy (Spec-Bench) and a common sampling setting
    max_new_tokens: int = 96  # long enough for acceptance to settle; keeps a CPU run under ~30 min
    per_category: int = 2  # prompts per Spec-Bench task (6 tasks): the CLI's --per-task
    tasks: tuple[str, ...] = ()  # only these Spec-Bench tasks (empty = all): e.g. the copy-heavy ones
    seed: int = 0
    warmup: int = 1  # untimed runs per configuration on the first prompt


def load_draft(spec: str, target, dtype: str, device: str, want_hidden: bool, weights: str | None = None):
    """The bench's drafter for `--draft SPEC` (engine.drafters.make_drafter): a draft model checked
    against the target's tokenizer, a model-free drafter (lookup / suffix), a draft model plus phrases
    (phrase:…) or a block drafter (block:PATH, which verifies with its own feature view of the target).
    `weights`: the draft model's own path (a mixed pair), None = the target's."""
    from engine.drafters import make_drafter

    return make_drafter(spec, target, dtype=dtype, device=device, want_hidden=want_hidden, weights=weights)[1]


def path_label(target, draft) -> str:
    """The pair's weights path as rows and folders name it: 'dense', or 'target=dense,draft=quantized' when
    the draft model runs on another path than its target (engine.models.pair_weights)."""
    from engine.models.pair_weights import PairWeights

    tw = getattr(target, "weights", "dense")
    return PairWeights(tw, getattr(_forward_lm(draft), "weights", None) or tw).label


def trace_name(spec: str, temperature: float) -> str:
    """File name of a config's trace: `fixed:4` at T = 0.7 → `fixed-4-t0.7.jsonl`."""
    safe = "".join(c if c.isalnum() or c == "." else "-" for c in spec).strip("-")
    return f"{safe}-t{temperature:g}.jsonl"


class _Traces:
    """One TraceWriter per (config, temperature), opened on first use, closed at the end."""

    def __init__(self, directory, target, draft, encoded, cfg: "BenchConfig", extra: dict) -> None:
        self.dir, self.target, self.draft, self.encoded, self.cfg, self.extra = directory, target, draft, encoded, cfg, extra
        self.writers: dict[tuple[str, float], Any] = {}
        self.drafts: dict[str, Any] = {}  # configs with their own model-free drafter (POLICY@DRAFTER)

    def get(self, spec: str, temp: float):
        if self.dir is None or (spec.startswith("hf:") and not _hf_needs_draft(spec)):
            # plain generate() and HF's prompt lookup: no steps we can record
            return None
        key = (spec, temp)
        if key not in self.writers:
            from engine.run import Request, make_header
            from engine.trace.format import TraceWriter

            dc = DecodeConfig(max_new_tokens=self.cfg.max_new_tokens, sampling=SamplingConfig(temperature=temp,
                                                                                                 seed=self.cfg.seed))
            reqs = [Request(ids, p.text, p.category, p.question_id) for p, ids in self.encoded]
            path = Path(self.dir) / trace_name(spec, temp)
            if spec.startswith("hf:"):
                from engine.bench.hf_record import hf_header

                set_hf_mode(spec, self.draft)
                x = torch.tensor([self.encoded[0][1]])
                header = hf_header(self.target.model, self.draft.model, hf_kwargs(dc, x, ()), spec=spec,
                                   prompts=[{"request_id": i, "question_id": r.question_id, "category": r.category}
                                            for i, r in enumerate(reqs)], **self.extra)
                header["sampling"]["seed"] = self.cfg.seed
            else:
                pol = None if spec == "ar" else parse_policy(split_config(spec)[0])  # names the rule in the header
                header = make_header(self.target, None if spec == "ar" else self.drafts.get(spec, self.draft), pol, dc,
                                     reqs, **self.extra)
            self.writers[key] = TraceWriter(path, header)
        return self.writers[key]

    def close(self, interrupted: bool = False) -> None:
        """Footers only for a finished run: an interrupted one leaves traces that load as interrupted
        (its header lists prompts it never reached), not as complete runs."""
        for w in self.writers.values():
            w.__exit__(KeyboardInterrupt if interrupted else None)


def config_specs(cfg: BenchConfig, draft: str | None = "model") -> list[tuple[str, "RunSpec"]]:
    """(config, RunSpec) for each of our configurations × temperature it applies to (engine.spec):
    `draft` names the run's drafter kind for a bare policy ("model": the bench's draft model)."""
    from engine.spec import RunSpec

    out = []
    for s in cfg.configs:
        if s == "ar" or s.startswith("hf:"):
            continue
        pol, own = split_config(s)
        ctx = own if is_context(own) else ""
        for t in cfg.temperatures:
            if applies(s, t):
                out.append((s, RunSpec(draft=draft if ctx else (own or draft), policy=pol, temperature=t, seed=cfg.seed,
                                       max_new_tokens=cfg.max_new_tokens, draft_context=ctx)))
    return out


def check_configs(cfg: BenchConfig, draft: str | None = "model") -> None:
    """The first refusal of any configuration (engine.spec.RunSpec.check), before any timing."""
    for spec, rs in config_specs(cfg, draft):
        errors = rs.check()
        if errors:
            raise ValueError(errors[0] if spec in errors[0] else f"config {spec!r}: {errors[0]}")


def run_bench(target, draft, tokenizer, prompts_file, cfg: BenchConfig, eos=(), progress=True,
              trace_dir=None, header_extra: dict | None = None, checkpoint=None,
              more_paths: tuple = ()) -> dict[str, Any]:
    """Every configuration on every prompt, interleaved; optional traces (one file per config and
    temperature, `trace_dir`) and a partial result written after each prompt (`checkpoint(result)`).

    `more_paths`: (target, draft) pairs of the same models on other weights paths (`--weights
    dense,quantized`): every configuration also runs on each, in the same rotation per prompt, with
    its speedup against that path's own AR (and the dense path's, `speedup_vs_dense_ar`)."""
    check_configs(cfg)  # refuse what the decoder would refuse mid-run, before any timing
    paths = _weights_paths(target, draft, more_paths)
    own = _own_drafters(cfg, paths)
    encoded = _encoded_prompts(prompts_file, cfg, tokenizer)
    costs = _probe_and_prime(paths, own, encoded[0][1])
    results: list[RunResult] = []
    mismatches: list[str] = []
    multi = len(paths) > 1
    from engine.models.pair_weights import parse

    traces = {}
    for w, (t, d) in paths.items():  # several paths: one trace folder per path
        traces[w] = _Traces(Path(trace_dir) / parse(w).slug if (trace_dir and multi) else trace_dir, t, d, encoded, cfg,
                            {**(header_extra or {}), "weights": w})
        traces[w].drafts = {s: dr for (pw, s), dr in own.items() if pw == w}
    decode_text = (lambda ids: tokenizer.decode(ids)) if tokenizer is not None else None

    def result() -> dict[str, Any]:
        return {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "config": {
            "configs": list(cfg.configs), "temperatures": list(cfg.temperatures), "max_new_tokens": cfg.max_new_tokens,
            "per_category": cfg.per_category, "prompts": len(encoded)},
            "target": target.name, "draft": draft.name, "dtype": str(target.dtype).replace("torch.", ""),
            "weights": list(paths), "costs": costs, "greedy_mismatches": mismatches, "rows": aggregate(results, costs),
            "complete": False, "runs": [{k: v for k, v in r.__dict__.items() if k != "output"} for r in results]}

    n_runs = sum(applies(s, t) for s in cfg.configs for t in cfg.temperatures) * len(encoded) * len(paths)
    bar = tqdm(total=n_runs, disable=not progress, unit="run", desc="bench")
    finished = False
    names = list(paths)
    try:
        for temp in cfg.temperatures:
            specs = tuple(s for s in cfg.configs if applies(s, temp))
            for w in range(cfg.warmup):
                for pw, (t, d) in paths.items():
                    for spec in specs:
                        run_config(spec, t, own.get((pw, spec), d), encoded[0][1], temp, cfg.seed, eos, 8)
            for i, (p, ids) in enumerate(encoded):
                order = [(pw, s) for s in specs[i % len(specs):] + specs[: i % len(specs)]
                         for pw in names[i % len(names):] + names[: i % len(names)]]
                meta = {"prompt_text": p.text, "category": p.category, "question_id": p.question_id}
                for pw, spec in order:
                    t, d = paths[pw]
                    bar.set_postfix_str(f"T={temp:g} q{p.question_id} {spec}" + (f" [{pw}]" if multi else ""))
                    r = run_config(spec, t, own.get((pw, spec), d), ids, temp, cfg.seed, eos, cfg.max_new_tokens,
                                   traces[pw].get(spec, temp), i, meta, decode_text)
                    r.task, r.question_id, r.weights = task_of(p.category), p.question_id, pw
                    results.append(r)
                    bar.update(1)
                if temp == 0.0 and "ar" in cfg.configs:
                    mismatches += _greedy_mismatches(results, p.question_id, names)
                if checkpoint is not None:
                    checkpoint(result())
        finished = True
    finally:
        for tr in traces.values():
            tr.close(interrupted=not finished)
        bar.close()
    out = result()
    out["complete"] = True
    return out


# ------------------------------------------------------------------ run_bench's steps


def _weights_paths(target, draft, more_paths: tuple) -> dict[str, tuple]:
    """Weights path label → (target, draft): the pair given, then each of `more_paths` (none twice)."""
    paths = {path_label(target, draft): (target, draft)}
    for t, d in more_paths:
        w = path_label(t, d)
        if w in paths:
            raise ValueError(f"--weights lists the {w} path twice")
        paths[w] = (t, d)
    return paths


def _own_drafters(cfg: BenchConfig, paths: dict[str, tuple]) -> dict[tuple[str, str], Any]:
    """(path, config) → the drafter a `POLICY@DRAFTER` configuration names, built on that path's target; a
    costaware window past its drafter's limit is refused here, before any timing."""
    from engine.drafters import make_drafter
    from engine.drafters.autoregressive import AutoregressiveDrafter, DraftContext, is_context
    from engine.spec import check_drafter

    def build(s: str, t, d):
        spec = split_config(s)[1]
        if is_context(spec):  # the path's own draft model through a context window
            return AutoregressiveDrafter(d, DraftContext.parse(spec))
        return make_drafter(spec, t)[1]

    own = {(w, s): build(s, t, d) for w, (t, d) in paths.items() for s in cfg.configs if "@" in s}
    for w, (_, d) in paths.items():
        for s in cfg.configs:
            if policy_specs([s]) and own.get((w, s), d) is not None:
                check_drafter(parse_policy(split_config(s)[0]), own.get((w, s), d))
    return own


def _encoded_prompts(prompts_file, cfg: BenchConfig, tokenizer) -> list[tuple[Any, list[int]]]:
    """(prompt, token ids) of the run; a task in `cfg.tasks` with no prompt is refused (a misspelt task would
    otherwise shrink the run silently)."""
    prompts = load_prompts(prompts_file, per_category=cfg.per_category, categories=list(cfg.tasks) or None)
    missing = set(cfg.tasks) - {task_of(p.category) for p in prompts} - {p.category for p in prompts}
    if missing:
        raise ValueError(f"--tasks: no prompts of task(s) {', '.join(sorted(missing))} in {Path(prompts_file).name}")
    return [(p, encode(tokenizer, p.text)) for p in prompts]


def _probe_and_prime(paths: dict[str, tuple], own: dict, ids: list[int]) -> dict[str, Any]:
    """The cost probe of every path (and of every drafter named after '@' that runs forwards of its own, e.g.
    eagle), each pair's book primed with it so the cost-aware window prices its first request with this run's
    costs; the result's `costs` block."""
    from engine.drafters.autoregressive import AutoregressiveDrafter
    from engine.run import pair_book

    by_path = {w: measure_costs(t, d, ids) for w, (t, d) in paths.items()}
    for w, (t, d) in paths.items():
        pair_book(t, d).prime(by_path[w])
    by_own = {}
    for (w, s), dr in own.items():
        t = paths[w][0]
        if isinstance(dr, AutoregressiveDrafter):  # the path's draft model through a context window: its probe
            pair_book(t, dr).prime(by_path[w])
            continue
        probe = measure_costs(t, dr, ids)
        if probe["t_draft_ms"] == probe["t_draft_ms"]:  # nan: a model-free or block drafter (priced per step)
            by_own[f"{s} [{w}]" if len(paths) > 1 else s] = probe
            pair_book(t, dr).prime(probe)
            pair_book(dr.verify_target(t), dr).prime(probe)  # the book the decode loop's policy reads
    costs = dict(next(iter(by_path.values())))
    if len(paths) > 1:
        costs["by_weights"] = by_path
    if by_own:
        costs["by_drafter"] = by_own
    return costs


def _greedy_mismatches(results: list[RunResult], question_id, names: list[str]) -> list[str]:
    """Greedy is exact against the same path's own AR output: the configurations of one prompt that differ."""
    out = []
    for pw in names:
        outs = {r.config: r.output for r in results
                if r.question_id == question_id and r.temperature == 0.0 and r.weights == pw}
        for conf, o in outs.items():
            if not conf.startswith("hf:") and o != outs["ar"]:
                out.append(f"{conf} q{question_id}" + (f" [{pw}]" if len(names) > 1 else ""))
    return out
