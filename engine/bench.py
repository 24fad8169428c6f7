"""Benchmark harness: our engine (autoregressive, fixed γ, adaptive policies) against HF transformers'
own assisted generation with the same pair, interleaved so every ratio is measured side by side.

For each prompt the configurations run back to back in a rotated order (so drift in machine load
hits every configuration alike). Metrics per configuration, per Spec-Bench task and overall:

    tokens/s                 Spec-Bench's convention: mean over prompts of new_tokens / wall time
    speedup                  mean tok/s ÷ mean tok/s of our autoregressive run (ratio of means)
    emitted per call         new tokens / target calls, incl. the bonus token (1.00 for autoregressive)
    acceptance rate          accepted drafts / drafted tokens (excl. bonus)
    target calls             verify forwards (prefill excluded)
    wasted drafts            drafted tokens that were rejected or dropped unverified (trimming rules)

The cost ratio c = t(draft forward, 1 token) / t(target forward, 1 token) is measured at the start
with warm KV caches, and t(k)/t(1) for the target's verify cost.

HF assisted generation is driven through `target.generate(assistant_model=draft)` with the knobs it
reads from `assistant_model.generation_config` (constant γ with the confidence stop disabled by
threshold 0.0 — `None` would silently mean 0.4 —, the "heuristic" schedule, and the 0.4 confidence
stop). Target and draft forwards are counted with forward pre-hooks.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from engine.decode import DecodeConfig, decode
from engine.policies import parse_policy
from engine.prompts import encode, load_prompts, task_of
from engine.sampling import SamplingConfig

DEFAULT_CONFIGS = ("ar", "fixed:1", "fixed:2", "fixed:4", "fixed:6", "fixed:8", "heuristic", "confidence",
                   "cumulative", "entropy", "hf:constant:4", "hf:heuristic:5", "hf:confidence:0.4")


@dataclass(frozen=True)
class BenchConfig:
    configs: tuple[str, ...] = DEFAULT_CONFIGS  # every policy of the foundation issue + HF's three modes
    temperatures: tuple[float, ...] = (0.0, 0.7)  # greedy (Spec-Bench) and a common sampling setting
    max_new_tokens: int = 96  # long enough for acceptance to settle; keeps a CPU run under ~30 min
    per_category: int = 2  # prompts per Spec-Bench task (6 tasks)
    seed: int = 0
    warmup: int = 1  # untimed runs per configuration on the first prompt


@dataclass
class RunResult:
    config: str
    temperature: float
    task: str
    question_id: Any
    new_tokens: int
    wall_s: float
    target_calls: int
    drafted: int = 0
    accepted: int = 0
    draft_calls: int = 0
    output: list[int] = field(default_factory=list)
    dropped: int = 0  # drafted but never verified (trimming rules): wasted draft work like a rejection


class _Counter:
    def __init__(self, module) -> None:
        self.n = 0
        self.h = module.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.n += 1

    def close(self) -> None:
        self.h.remove()


def applies(spec: str, temperature: float) -> bool:
    """The hindsight oracle is defined for greedy decoding only (engine.oracle); it skips T > 0."""
    return not (spec == "oracle" and temperature > 0)


def make_policy(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos):
    """None for 'ar'; the hindsight oracle gets its look-ahead here, before any timing starts."""
    if spec == "ar":
        return None
    if spec == "oracle":
        from engine.oracle import HindsightOracle

        return HindsightOracle.for_prompt(target, draft, ids, cfg.max_new_tokens, eos)
    return parse_policy(spec)


def policy_specs(configs) -> list[str]:
    """The configurations `parse_policy` builds: not 'ar', 'oracle' (per prompt) or HF's 'hf:…'."""
    return [s for s in configs if s not in ("ar", "oracle") and not s.startswith("hf:")]


def run_ours(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos) -> RunResult:
    policy = make_policy(spec, target, draft, ids, cfg, eos)
    t0 = time.perf_counter()
    out, calls, drafted, accepted, dropped = [], 0, 0, 0, 0
    for rec in decode(target, None if spec == "ar" else draft, ids, policy, cfg, eos_ids=eos):
        out.extend(rec.emitted_tokens)
        calls += 1
        drafted += rec.window
        accepted += rec.accepted
        dropped += int(rec.policy_fields.get("dropped", 0))
    wall = time.perf_counter() - t0
    return RunResult(spec, cfg.sampling.temperature, "", None, len(out), wall, calls, drafted, accepted,
                     drafted + dropped, out, dropped)


def run_hf(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos) -> RunResult:
    """`hf:constant:γ`, `hf:heuristic:γ0`, `hf:confidence:t` through transformers' assisted generation."""
    _, mode, val = spec.split(":")
    gc = draft.model.generation_config
    gc.num_assistant_tokens_schedule = "constant" if mode in ("constant", "confidence") else "heuristic"
    gc.num_assistant_tokens = int(val) if mode != "confidence" else 20
    gc.assistant_confidence_threshold = float(val) if mode == "confidence" else 0.0
    x = torch.tensor([ids], device=target.device)
    sc = cfg.sampling
    kw: dict[str, Any] = dict(do_sample=not sc.greedy, max_new_tokens=cfg.max_new_tokens,
                              attention_mask=torch.ones_like(x), eos_token_id=list(eos) or None,
                              pad_token_id=(list(eos) or [0])[0])
    if not sc.greedy:
        kw.update(temperature=sc.temperature, top_k=sc.top_k or None, top_p=sc.top_p)
        torch.manual_seed(sc.seed)
    tc, dc = _Counter(target.model), _Counter(draft.model)
    try:
        t0 = time.perf_counter()
        with torch.inference_mode():
            y = target.model.generate(x, assistant_model=draft.model, **kw)
        wall = time.perf_counter() - t0
    finally:
        tc.close(), dc.close()
    out = y[0, len(ids):].tolist()
    calls = max(1, tc.n - 1)  # the first target forward is the prompt prefill
    return RunResult(spec, sc.temperature, "", None, len(out), wall, calls, 0, 0, dc.n, out)


def measure_costs(target, draft, ids: list[int], reps: int = 10) -> dict[str, Any]:
    """Median ms of a 1-token draft forward and of k-token target forwards on a warm cache."""

    def timed(lm, k):
        ts = []
        lm.reset()
        lm.extend(ids)
        n = lm.length
        for _ in range(reps):
            t0 = time.perf_counter()
            lm.extend(ids[-1:] * k)
            ts.append((time.perf_counter() - t0) * 1e3)
            lm.crop(n)
        return statistics.median(ts)

    t_draft = timed(draft, 1) if draft is not None else float("nan")
    tk = {k: timed(target, k) for k in (1, 2, 4, 8, 16)}
    return {"t_draft_ms": t_draft, "t_target_ms": tk, "c": t_draft / tk[1],
            "verify_growth": {k: v / tk[1] for k, v in tk.items()}}


def aggregate(results: list[RunResult]) -> list[dict[str, Any]]:
    rows = []
    keys = sorted({(r.temperature, r.config) for r in results}, key=lambda k: (k[0], DEFAULT_CONFIGS.index(k[1])
                                                                                if k[1] in DEFAULT_CONFIGS else 99))
    tasks = sorted({r.task for r in results}) + ["overall"]
    for temp in sorted({r.temperature for r in results}):
        for task in tasks:
            sel = [r for r in results if r.temperature == temp and (task == "overall" or r.task == task)]
            base = [r for r in sel if r.config == "ar"]
            base_tps = statistics.mean(r.new_tokens / r.wall_s for r in base) if base else float("nan")
            for t, conf in keys:
                if t != temp:
                    continue
                rs = [r for r in sel if r.config == conf]
                if not rs:
                    continue
                tps = statistics.mean(r.new_tokens / r.wall_s for r in rs)
                tok = sum(r.new_tokens for r in rs)
                calls = sum(r.target_calls for r in rs)
                drafted = sum(r.drafted for r in rs)
                wasted = drafted - sum(r.accepted for r in rs) + sum(r.dropped for r in rs)
                rows.append({"temperature": temp, "task": task, "config": conf, "prompts": len(rs),
                             "tokens_per_s": tps, "speedup_vs_ar": tps / base_tps,
                             "emitted_per_call_incl_bonus": tok / calls,
                             "acceptance_rate": (sum(r.accepted for r in rs) / drafted) if drafted else None,
                             "target_calls": calls, "new_tokens": tok,
                             # rejected + dropped drafts (HF runs: unknown, their drafts are not counted)
                             "wasted_drafts": None if conf.startswith("hf:") else wasted})
    return rows


def run_bench(target, draft, tokenizer, prompts_file, cfg: BenchConfig, eos=(), progress=True) -> dict[str, Any]:
    for spec in policy_specs(cfg.configs):  # refuse what the decoder would refuse mid-run, before any timing
        if any(t > 0 for t in cfg.temperatures):
            if not parse_policy(spec).trim_exact_when_sampling:
                raise ValueError(f"{spec!r} drops drafts by value, exact for greedy decoding only: "
                                 "drop T > 0 from --temperatures or use trim=0")
    prompts = load_prompts(prompts_file, per_category=cfg.per_category)
    encoded = [(p, encode(tokenizer, p.text)) for p in prompts]
    costs = measure_costs(target, draft, encoded[0][1])
    results: list[RunResult] = []
    mismatches: list[str] = []
    n_runs = sum(applies(s, t) for s in cfg.configs for t in cfg.temperatures) * len(encoded)
    bar = tqdm(total=n_runs, disable=not progress, unit="run", desc="bench")
    for temp in cfg.temperatures:
        specs = tuple(s for s in cfg.configs if applies(s, temp))
        for w in range(cfg.warmup):
            for spec in specs:
                _run(spec, target, draft, encoded[0][1], temp, cfg, eos, 16)
        for i, (p, ids) in enumerate(encoded):
            order = list(specs[i % len(specs):] + specs[: i % len(specs)])
            for spec in order:
                r = _run(spec, target, draft, ids, temp, cfg, eos, cfg.max_new_tokens)
                r.task, r.question_id = task_of(p.category), p.question_id
                results.append(r)
                bar.update(1)
            if temp == 0.0 and "ar" in cfg.configs:
                outs = {r.config: r.output for r in results if r.question_id == p.question_id and r.temperature == 0.0}
                for conf, o in outs.items():
                    if not conf.startswith("hf:") and o != outs["ar"]:
                        mismatches.append(f"{conf} q{p.question_id}")
    bar.close()
    return {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "config": {
        "configs": list(cfg.configs), "temperatures": list(cfg.temperatures), "max_new_tokens": cfg.max_new_tokens,
        "per_category": cfg.per_category, "prompts": len(encoded)},
        "target": target.name, "draft": draft.name, "dtype": str(target.dtype).replace("torch.", ""),
        "costs": costs, "greedy_mismatches": mismatches, "rows": aggregate(results),
        "runs": [{k: v for k, v in r.__dict__.items() if k != "output"} for r in results]}


def _run(spec, target, draft, ids, temp, cfg: BenchConfig, eos, n):
    dc = DecodeConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=temp, seed=cfg.seed))
    if spec.startswith("hf:"):
        return run_hf(spec, target, draft, ids, dc, eos)
    return run_ours(spec, target, draft, ids, dc, eos)


def format_table(result: dict[str, Any], tasks: bool = True) -> str:
    lines = []
    for temp in sorted({r["temperature"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["temperature"] == temp and (tasks or r["task"] == "overall")]
        lines.append(f"\nT = {temp} ({'greedy' if temp == 0 else 'sampling'})\n")
        lines.append("| task | config | tok/s | speedup vs AR | emitted/call (incl. bonus) | acceptance | target calls "
                     "| wasted drafts |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for r in rows:
            acc = f"{r['acceptance_rate']:.3f}" if r["acceptance_rate"] is not None else "–"
            wasted = r.get("wasted_drafts")
            lines.append(f"| {r['task']} | {r['config']} | {r['tokens_per_s']:.1f} | {r['speedup_vs_ar']:.2f}× | "
                         f"{r['emitted_per_call_incl_bonus']:.2f} | {acc} | {r['target_calls']} | "
                         f"{'–' if wasted is None else wasted} |")
    c = result["costs"]
    growth = ", ".join(f"t({k})/t(1)={v:.2f}" for k, v in c["verify_growth"].items())
    t1 = c["t_target_ms"].get(1, c["t_target_ms"].get("1"))  # int keys in memory, str keys after JSON
    lines.append(f"\nCost ratio c = draft {c['t_draft_ms']:.2f} ms / target {t1:.2f} ms = "
                 f"{c['c']:.3f}; verify cost {growth}")
    if result["greedy_mismatches"]:
        lines.append(f"\nGreedy outputs differing from autoregressive: {', '.join(result['greedy_mismatches'])}")
    else:
        lines.append("\nEvery greedy run of our engine reproduced the autoregressive output exactly.")
    return "\n".join(lines)


def append_markdown(result: dict[str, Any], path: Path, command: str, machine: str) -> None:
    import platform

    import transformers

    head = (f"\n## {result['created'][:10]} — `{result['target']}` + `{result['draft']}` ({result['dtype']})\n\n"
            f"- command: `{command}`\n- machine: {machine}; Python {platform.python_version()}, torch "
            f"{torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads\n"
            f"- {result['config']['prompts']} prompts ({result['config']['per_category']} per task), "
            f"{result['config']['max_new_tokens']} new tokens max, configurations interleaved per prompt\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(head + format_table(result) + "\n")


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmark policies and HF assisted generation, interleaved")
    p.add_argument("--target", default="smollm2-135m")
    p.add_argument("--draft", default="smollm2-draft")
    p.add_argument("--prompts", default=str(Path(__file__).resolve().parents[2] / "shared/spec_bench/questions_dev.jsonl"))
    p.add_argument("--per-category", type=int, default=BenchConfig.per_category)
    p.add_argument("--max-new-tokens", type=int, default=BenchConfig.max_new_tokens)
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                   help="comma (or ';' when a spec has commas) list; 'ar', policies, hf:MODE:VAL, 'oracle' (greedy)")
    p.add_argument("--temperatures", default="0,0.7")
    p.add_argument("--dtype", default="auto", help="auto = bf16 where native (CUDA, avx512_bf16), else fp32")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--out", default=None, help="JSON result path")
    p.add_argument("--markdown", default=None, help="append a dated table to this file (e.g. docs/benchmarks.md)")
    p.add_argument("--machine", default="2-core x86-64 CPU, no GPU")
    p.set_defaults(func=cmd_bench)


def cmd_bench(a) -> int:
    import sys

    from engine.models import check_pair, eos_token_ids, load_model

    if a.threads:
        torch.set_num_threads(a.threads)
    sep = ";" if ";" in a.configs else ","  # ';' lets a spec carry its own commas (confidence:0.5,trim=1)
    cfg = BenchConfig(configs=tuple(s.strip() for s in a.configs.split(sep) if s.strip()),
                      temperatures=tuple(float(t) for t in a.temperatures.split(",")),
                      max_new_tokens=a.max_new_tokens, per_category=a.per_category, warmup=a.warmup)
    if "ar" not in cfg.configs:
        raise ValueError("the benchmark needs 'ar' in --configs: every speedup is relative to it")
    ours = policy_specs(cfg.configs)
    for s in ours:
        parse_policy(s)
    target = load_model(a.target, a.dtype, a.device, role="target")
    hidden = any(parse_policy(s).needs_hidden for s in ours)
    draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target, want_hidden=hidden)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    result = run_bench(target.lm, draft.lm, target.tokenizer, a.prompts, cfg, eos=eos_token_ids(target))
    print(format_table(result))
    command = " ".join(["python -m engine", *sys.argv[1:]])
    result["command"] = command
    if a.out:
        from engine.jsonio import write_json_atomic

        write_json_atomic(result, a.out)
    if a.markdown:
        append_markdown(result, Path(a.markdown), command, a.machine)
    return 0
