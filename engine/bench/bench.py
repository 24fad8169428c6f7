"""Benchmark harness: our engine (autoregressive, fixed γ, adaptive policies) against HF transformers'
own assisted generation with the same pair, interleaved so every ratio is measured side by side.

For each prompt the configurations run back to back in a rotated order (so drift in machine load
hits every configuration alike). Metrics per configuration, per Spec-Bench task and overall:

    tokens/s                 Spec-Bench's convention: mean over prompts of new_tokens / wall time
    speedup                  mean tok/s ÷ mean tok/s of our autoregressive run (ratio of means)
    speedup excl. prefill    the same over wall time minus the prompt's prefill: on a long prompt a
                             noisy prefill can dominate a short answer's wall time (ours: both models'
                             prefill; HF: the target's first forward, which also verifies HF's first
                             candidates in assisted / prompt-lookup modes)
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
from engine.measure import forward_curve, sync
from engine.paths import SPEC_BENCH_DEV
from engine.policies.base import parse_policy
from engine.trace.prompts import encode, load_prompts, task_of
from engine.core.sampling import SamplingConfig

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
    model_s: float = 0.0  # time inside the models' forward calls; wall_s − model_s = non-model overhead
    prefill_s: float = 0.0  # the prompt's prefill inside wall_s (see the module docstring)


class _Counter:
    def __init__(self, module) -> None:
        self.n = 0
        self.h = module.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.n += 1

    def close(self) -> None:
        self.h.remove()


def _device_of(module):
    p = next(module.parameters(), None)
    return None if p is None else p.device


class _ForwardTimer:
    """Wall time spent inside `module`'s forward calls (pre/post hooks; device-synchronised);
    `first_s` is the first top-level call's share of it."""

    def __init__(self, *modules) -> None:
        self.s = 0.0
        self.first_s: float | None = None
        self._t0 = 0.0
        self._depth = 0
        self.hs = []
        for m in modules:
            if m is not None:
                self.hs += [m.register_forward_pre_hook(self._pre), m.register_forward_hook(self._post)]

    def _pre(self, module, *_):
        if self._depth == 0:
            sync(_device_of(module))
            self._t0 = time.perf_counter()
        self._depth += 1

    def _post(self, module, *_):
        self._depth -= 1
        if self._depth == 0:
            sync(_device_of(module))
            dt = time.perf_counter() - self._t0
            self.s += dt
            if self.first_s is None:
                self.first_s = dt

    def close(self) -> None:
        for h in self.hs:
            h.remove()


def _hf_modules(lm) -> list:
    """The modules whose forward calls are model time: the causal LM, and its decoder and output
    head, which `engine.core.load.HFModel` calls directly when it needs hidden states or scores a
    reduced vocabulary (a hook on the causal LM alone would count that time as overhead)."""
    m = getattr(lm, "model", None)
    if not isinstance(m, torch.nn.Module):
        return []
    out = [m]
    if hasattr(m, "get_decoder"):
        out.append(m.get_decoder())
    if hasattr(m, "get_output_embeddings") and m.get_output_embeddings() is not None:
        out.append(m.get_output_embeddings())
    if getattr(lm, "sub_head", None) is not None:
        out.append(lm.sub_head)
    return out


def applies(spec: str, temperature: float) -> bool:
    """The hindsight oracle is defined for greedy decoding only (engine.policies.oracle); it skips T > 0."""
    return not (spec == "oracle" and temperature > 0)


def make_policy(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos):
    """None for 'ar'; the hindsight oracle gets its look-ahead here, before any timing starts."""
    if spec == "ar":
        return None
    if spec == "oracle":
        from engine.policies.oracle import HindsightOracle

        return HindsightOracle.for_prompt(target, draft, ids, cfg.max_new_tokens, eos)
    return parse_policy(spec)


def split_config(spec: str) -> tuple[str, str | None]:
    """`POLICY@DRAFTER` → (policy, model-free drafter spec); a bare policy uses the run's `--draft`.

    `fixed:10@lookup:n=10,ngram=2` drafts by prompt lookup with a fixed cap of 10 in the same run
    (and on the same prompts, interleaved) as `heuristic` with the draft model — so a model draft and
    model-free drafts are compared side by side. Only model-free drafters go after '@': a second
    draft model would double the memory for what two bench runs do as well.
    """
    pol, at, drafter = spec.partition("@")
    if not at:
        return spec, None
    from engine.drafters.modelfree import is_model_free

    if pol in ("ar", "oracle") or pol.startswith("hf:") or not is_model_free(drafter):
        raise ValueError(f"config {spec!r}: '@' takes a window policy before it and a model-free drafter "
                         "(lookup:…, suffix:…) after it")
    return pol, drafter


def policy_specs(configs) -> list[str]:
    """The policies `parse_policy` builds: not 'ar', 'oracle' (per prompt) or HF's 'hf:…'."""
    return [split_config(s)[0] for s in configs if s not in ("ar", "oracle") and not s.startswith("hf:")]


def _hf_needs_draft(spec: str) -> bool:
    """`hf:ar` and `hf:lookup:N` (HF's prompt lookup) run on the target alone."""
    return spec != "hf:ar" and not spec.startswith("hf:lookup:")


def run_ours(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos, writer=None,
             request_id: int = 0, meta: dict | None = None, decode_text=None) -> RunResult:
    """One prompt through engine.decode; with a TraceWriter its request, steps and end are appended."""
    policy = make_policy(split_config(spec)[0], target, draft, ids, cfg, eos)
    timer = _ForwardTimer(*_hf_modules(target), *([] if spec == "ar" else _hf_modules(draft)))
    t0 = time.perf_counter()
    out, calls, drafted, accepted, dropped, prefill_ms = [], 0, 0, 0, 0, 0.0
    steps = []
    try:
        for rec in decode(target, None if spec == "ar" else draft, ids, policy, cfg, eos_ids=eos,
                          request_id=request_id):
            out.extend(rec.emitted_tokens)
            calls += 1
            drafted += rec.window
            accepted += rec.accepted
            dropped += int(rec.policy_fields.get("dropped", 0))
            prefill_ms += rec.t_prefill_ms
            if writer is not None:
                steps.append(rec)  # written after the clock stops: file I/O is not the engine's cost
        wall = time.perf_counter() - t0
    finally:
        timer.close()
    if writer is not None:
        writer.write({"type": "request", "request_id": request_id, "prompt_ids": list(ids), **(meta or {})})
        for rec in steps:
            writer.step(rec)
        writer.write({"type": "request_end", "request_id": request_id, "output_ids": out,
                      "output_text": decode_text(out) if decode_text else "", "finished": steps[-1].finished,
                      "new_tokens": len(out), "wall_ms": round(wall * 1e3, 3)})
    return RunResult(spec, cfg.sampling.temperature, "", None, len(out), wall, calls, drafted, accepted,
                     drafted + dropped, out, dropped, timer.s, prefill_ms / 1e3)


def hf_kwargs(cfg: DecodeConfig, x: torch.Tensor, eos) -> dict[str, Any]:
    sc = cfg.sampling
    kw: dict[str, Any] = dict(do_sample=not sc.greedy, max_new_tokens=cfg.max_new_tokens,
                              attention_mask=torch.ones_like(x), eos_token_id=list(eos) or None,
                              pad_token_id=(list(eos) or [0])[0])
    if not sc.greedy:
        kw.update(temperature=sc.temperature, top_k=sc.top_k or None, top_p=sc.top_p)
    return kw


def set_hf_mode(spec: str, draft) -> None:
    """HF's window knobs on the assistant's generation_config for `hf:constant:γ`, `hf:heuristic:γ0`,
    `hf:confidence:t` (threshold 0.0 disables the confidence stop: None would silently mean 0.4).
    `hf:lookup:N` needs no assistant: it is `prompt_lookup_num_tokens=N` (see `hf_kwargs`)."""
    _, mode, val = spec.split(":")
    if mode == "lookup":
        return
    gc = draft.model.generation_config
    gc.num_assistant_tokens_schedule = "constant" if mode in ("constant", "confidence") else "heuristic"
    gc.num_assistant_tokens = int(val) if mode != "confidence" else 20
    gc.assistant_confidence_threshold = float(val) if mode == "confidence" else 0.0


def run_hf(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos, writer=None,
           request_id: int = 0, meta: dict | None = None, decode_text=None) -> RunResult:
    """HF transformers on the same models: `hf:ar` is plain `generate()`; `hf:lookup:N` is `generate()`
    with HF's prompt lookup (`prompt_lookup_num_tokens=N`, its default 2-gram match): counted by its
    target calls only, its drafts are internal to HF; `hf:MODE:VAL` is assisted generation, recorded step
    by step (engine.bench.hf_record) so its rows carry acceptance and traces."""
    from engine.bench.hf_record import record_assisted

    x = torch.tensor([ids], device=target.device)
    kw = hf_kwargs(cfg, x, eos)
    if not cfg.sampling.greedy:
        torch.manual_seed(cfg.sampling.seed)
    timer = _ForwardTimer(*_hf_modules(target), *(_hf_modules(draft) if _hf_needs_draft(spec) else []))
    first = _ForwardTimer(target.model)  # the target's first forward: the prompt's prefill
    tc = _Counter(target.model)
    try:
        if not _hf_needs_draft(spec):
            if spec.startswith("hf:lookup:"):
                kw["prompt_lookup_num_tokens"] = int(spec.split(":")[2])
            t0 = time.perf_counter()
            with torch.inference_mode():
                y = target.model.generate(x, **kw)
            wall = time.perf_counter() - t0
            out, steps = y[0, len(ids):].tolist(), []
        else:
            set_hf_mode(spec, draft)
            rec = record_assisted(target.model, draft.model, x, kw, writer=writer, request_id=request_id,
                                  decode_text=decode_text, **(meta or {}))
            wall, out, steps = rec.wall_ms / 1e3, rec.output_ids, rec.steps
    finally:
        timer.close()
        first.close()
        tc.close()
    # generate() emits one token per forward, the prompt's prefill included (our AR feeds the prompt
    # without emitting, then one call per token): both make one target call per new token.
    calls = max(1, tc.n) if not _hf_needs_draft(spec) else len(steps)
    drafted = sum(s.window for s in steps)
    accepted = sum(s.accepted for s in steps)
    return RunResult(spec, cfg.sampling.temperature, "", None, len(out), wall, calls, drafted, accepted,
                     drafted, out, 0, timer.s, first.first_s or 0.0)


def measure_costs(target, draft, ids: list[int], reps: int = 5) -> dict[str, Any]:
    """Median ms of a 1-token draft forward and of k-token target forwards on a warm cache."""
    has_forward = hasattr(draft, "extend")  # model-free drafts: no forward
    t_draft = forward_curve(draft, ids, (1,), reps)[1] if has_forward else float("nan")
    tk = forward_curve(target, ids, (1, 2, 4, 8, 16), reps)
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
            base_dec = statistics.mean(_decode_tps(r) for r in base) if base else float("nan")
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
                dec = statistics.mean(_decode_tps(r) for r in rs)
                rows.append({"temperature": temp, "task": task, "config": conf, "prompts": len(rs),
                             "tokens_per_s": tps, "speedup_vs_ar": tps / base_tps,
                             "decode_tokens_per_s": dec, "decode_speedup_vs_ar": dec / base_dec,
                             "emitted_per_call_incl_bonus": tok / calls,
                             "acceptance_rate": (sum(r.accepted for r in rs) / drafted) if drafted else None,
                             "target_calls": calls, "new_tokens": tok,
                             # rejected + dropped drafts (HF runs: unknown, their drafts are not counted)
                             "wasted_drafts": None if conf.startswith("hf:") else wasted,
                             # wall time outside the models' forward calls: sampling, verification,
                             # cache bookkeeping, Python — per target call and as a share of wall time
                             "non_model_ms_per_call": 1e3 * sum(r.wall_s - r.model_s for r in rs) / calls,
                             "non_model_share": 1 - sum(r.model_s for r in rs) / sum(r.wall_s for r in rs)})
    return rows


def _decode_tps(r: RunResult) -> float:
    """New tokens per second of wall time after the prompt's prefill."""
    return r.new_tokens / max(r.wall_s - r.prefill_s, 1e-9)


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
                pol = None if spec == "ar" else (_oracle_stub() if spec == "oracle" else parse_policy(split_config(spec)[0]))
                header = make_header(self.target, None if spec == "ar" else self.drafts.get(spec, self.draft), pol, dc,
                                     reqs, **self.extra)
            self.writers[key] = TraceWriter(path, header)
        return self.writers[key]

    def close(self, interrupted: bool = False) -> None:
        """Footers only for a finished run: an interrupted one leaves traces that load as interrupted
        (its header lists prompts it never reached), not as complete runs."""
        for w in self.writers.values():
            w.__exit__(KeyboardInterrupt if interrupted else None)


def _oracle_stub():
    from engine.policies.oracle import HindsightOracle

    return HindsightOracle([], [])  # names the rule in a header; each prompt gets its own look-ahead


def run_bench(target, draft, tokenizer, prompts_file, cfg: BenchConfig, eos=(), progress=True,
              trace_dir=None, header_extra: dict | None = None, checkpoint=None) -> dict[str, Any]:
    """Every configuration on every prompt, interleaved; optional traces (one file per config and
    temperature, `trace_dir`) and a partial result written after each prompt (`checkpoint(result)`)."""
    for spec in policy_specs(cfg.configs):  # refuse what the decoder would refuse mid-run, before any timing
        if any(t > 0 for t in cfg.temperatures):
            if not parse_policy(spec).trim_exact_when_sampling:
                raise ValueError(f"{spec!r} drops drafts by value, exact for greedy decoding only: "
                                 "drop T > 0 from --temperatures or use trim=0")
    from engine.drafters.modelfree import make_model_free

    own = {s: make_model_free(split_config(s)[1], target.vocab_size) for s in cfg.configs if "@" in s}
    prompts = load_prompts(prompts_file, per_category=cfg.per_category)
    encoded = [(p, encode(tokenizer, p.text)) for p in prompts]
    costs = measure_costs(target, draft, encoded[0][1])
    results: list[RunResult] = []
    mismatches: list[str] = []
    traces = _Traces(trace_dir, target, draft, encoded, cfg, header_extra or {})
    traces.drafts = own
    decode_text = (lambda ids: tokenizer.decode(ids)) if tokenizer is not None else None

    def result() -> dict[str, Any]:
        return {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "config": {
            "configs": list(cfg.configs), "temperatures": list(cfg.temperatures), "max_new_tokens": cfg.max_new_tokens,
            "per_category": cfg.per_category, "prompts": len(encoded)},
            "target": target.name, "draft": draft.name, "dtype": str(target.dtype).replace("torch.", ""),
            "costs": costs, "greedy_mismatches": mismatches, "rows": aggregate(results),
            "complete": False, "runs": [{k: v for k, v in r.__dict__.items() if k != "output"} for r in results]}

    n_runs = sum(applies(s, t) for s in cfg.configs for t in cfg.temperatures) * len(encoded)
    bar = tqdm(total=n_runs, disable=not progress, unit="run", desc="bench")
    finished = False
    try:
        for temp in cfg.temperatures:
            specs = tuple(s for s in cfg.configs if applies(s, temp))
            for w in range(cfg.warmup):
                for spec in specs:
                    _run(spec, target, own.get(spec, draft), encoded[0][1], temp, cfg, eos, 8)
            for i, (p, ids) in enumerate(encoded):
                order = list(specs[i % len(specs):] + specs[: i % len(specs)])
                meta = {"prompt_text": p.text, "category": p.category, "question_id": p.question_id}
                for spec in order:
                    bar.set_postfix_str(f"T={temp:g} q{p.question_id} {spec}")
                    r = _run(spec, target, own.get(spec, draft), ids, temp, cfg, eos, cfg.max_new_tokens,
                             traces.get(spec, temp), i, meta, decode_text)
                    r.task, r.question_id = task_of(p.category), p.question_id
                    results.append(r)
                    bar.update(1)
                if temp == 0.0 and "ar" in cfg.configs:
                    outs = {r.config: r.output for r in results
                            if r.question_id == p.question_id and r.temperature == 0.0}
                    for conf, o in outs.items():
                        if not conf.startswith("hf:") and o != outs["ar"]:
                            mismatches.append(f"{conf} q{p.question_id}")
                if checkpoint is not None:
                    checkpoint(result())
        finished = True
    finally:
        traces.close(interrupted=not finished)
        bar.close()
    out = result()
    out["complete"] = True
    return out


def _run(spec, target, draft, ids, temp, cfg: BenchConfig, eos, n, writer=None, request_id=0, meta=None,
         decode_text=None):
    dc = DecodeConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=temp, seed=cfg.seed))
    fn = run_hf if spec.startswith("hf:") else run_ours
    return fn(spec, target, draft, ids, dc, eos, writer, request_id, meta, decode_text)


def format_table(result: dict[str, Any], tasks: bool = True) -> str:
    lines = []
    for temp in sorted({r["temperature"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["temperature"] == temp and (tasks or r["task"] == "overall")]
        lines.append(f"\nT = {temp} ({'greedy' if temp == 0 else 'sampling'})\n")
        lines.append("| task | config | tok/s | speedup vs AR | speedup excl. prefill | emitted/call (incl. bonus) "
                     "| acceptance | target calls | wasted drafts | non-model share |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            acc = f"{r['acceptance_rate']:.3f}" if r["acceptance_rate"] is not None else "–"
            wasted = r.get("wasted_drafts")
            dsp = f"{r['decode_speedup_vs_ar']:.2f}×" if "decode_speedup_vs_ar" in r else "–"
            lines.append(f"| {r['task']} | {r['config']} | {r['tokens_per_s']:.1f} | {r['speedup_vs_ar']:.2f}× | {dsp} | "
                         f"{r['emitted_per_call_incl_bonus']:.2f} | {acc} | {r['target_calls']} | "
                         f"{'–' if wasted is None else wasted} | "
                         f"{100 * r['non_model_share']:.1f} % |" if "non_model_share" in r else
                         f"{'–' if wasted is None else wasted} | – |")
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
    p.add_argument("--prompts", default=str(SPEC_BENCH_DEV))
    p.add_argument("--per-category", type=int, default=BenchConfig.per_category)
    p.add_argument("--max-new-tokens", type=int, default=BenchConfig.max_new_tokens)
    p.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                   help="comma (or ';' when a spec has commas) list; 'ar', policies, POLICY@lookup:…|suffix:… "
                        "(a model-free drafter for that config), hf:MODE:VAL (MODE constant|heuristic|confidence|"
                        "lookup), 'oracle' (greedy)")
    p.add_argument("--temperatures", default="0,0.7")
    p.add_argument("--dtype", default="auto", help="auto = bf16 where native (CUDA, avx512_bf16), else fp32")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--out", default=None, help="JSON result path")
    p.add_argument("--markdown", default=None, help="append a dated table to this file (e.g. docs/benchmarks.md)")
    p.add_argument("--machine", default=None, help="machine description (default: CPU model, cores and flags)")
    p.add_argument("--trace-dir", default=None,
                   help="also write one trace per configuration and temperature here (e.g. traces/qwen)")
    p.set_defaults(func=cmd_bench)


def cmd_bench(a) -> int:
    import sys

    from engine.core.load import check_pair, eos_token_ids, load_model

    if a.threads:
        torch.set_num_threads(a.threads)
    from engine.cli.checks import split_specs

    cfg = BenchConfig(configs=tuple(split_specs(a.configs)),
                      temperatures=tuple(float(t) for t in a.temperatures.split(",")),
                      max_new_tokens=a.max_new_tokens, per_category=a.per_category, warmup=a.warmup)
    if "ar" not in cfg.configs:
        raise ValueError("the benchmark needs 'ar' in --configs: every speedup is relative to it")
    ours = policy_specs(cfg.configs)
    for s in ours:
        parse_policy(s)
    target = load_model(a.target, a.dtype, a.device, role="target")
    hidden = any(parse_policy(s).needs_hidden for s in ours)
    from engine.drafters.modelfree import is_model_free, make_model_free

    if is_model_free(a.draft):  # lookup / suffix: only the target's vocabulary
        draft_lm = make_model_free(a.draft, target.lm.vocab_size)
    elif a.draft.startswith("phrase:"):  # a draft model extended with phrases (engine.drafters.phrase)
        from engine.drafters.phrase import load_phrase_drafter

        draft_lm = load_phrase_drafter(a.draft, target, a.dtype, a.device, want_hidden=hidden)[1]
    else:
        draft = load_model(a.draft, a.dtype, a.device, role="draft", target=target, want_hidden=hidden)
        check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
        draft_lm = draft.lm
    from engine.trace.jsonio import write_json_atomic
    from engine.core.load import machine_description

    command = " ".join(["python -m engine", *sys.argv[1:]])
    machine = a.machine or machine_description()
    extra = {"command": command, "machine": machine, "prompts_file": str(a.prompts)}
    checkpoint = (lambda r: write_json_atomic(r | extra, a.out)) if a.out else None  # a kill keeps the prompts done
    result = run_bench(target.lm, draft_lm, target.tokenizer, a.prompts, cfg, eos=eos_token_ids(target),
                       trace_dir=a.trace_dir, header_extra=extra, checkpoint=checkpoint)
    result.update(extra)
    print(format_table(result))
    if a.out:
        write_json_atomic(result, a.out)
    if a.markdown:
        append_markdown(result, Path(a.markdown), command, machine)
    return 0
