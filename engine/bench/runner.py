"""One benchmark configuration on one prompt: our engine (`run_ours`) or HF transformers' own
generation (`run_hf`), timed and counted the same way, one `RunResult` each (engine.bench.bench
interleaves them and aggregates).

A configuration is a spec string:

    ar                          our autoregressive decoding (every speedup's baseline)
    POLICY                      a window policy with the run's draft (fixed:4, heuristic, pacer, …)
    POLICY@DRAFTER              the policy with a model-free drafter of its own (fixed:10@lookup:n=10)
    oracle                      the greedy hindsight window (T = 0 only; a registered policy whose
                                for_request computes each prompt's look-ahead before the clock)
    hf:ar | hf:lookup:N         HF generate() plain / with its prompt lookup (target only)
    hf:constant:γ | hf:heuristic:γ0 | hf:confidence:t   HF assisted generation, recorded per step

Model time is what the models' forward calls take (`_ForwardTimer`: forward hooks, device-synchronised
through engine.measure.sync); wall time minus model time is the engine's own overhead.

HF assisted generation is driven through `target.generate(assistant_model=draft)` with the knobs it
reads from `assistant_model.generation_config` (constant γ with the confidence stop disabled by
threshold 0.0 — `None` would silently mean 0.4 —, the "heuristic" schedule, and the 0.4 confidence
stop). Target and draft forwards are counted with forward pre-hooks.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.core.sampling import SamplingConfig
from engine.decode import DecodeConfig, decode
from engine.measure import forward_curve, median_ms, sync, timed_ms
from engine.policies.base import parse_policy


# The bench's configurations when none are named (engine.bench.bench.BenchConfig): every policy of the first
# benchmark issue and HF's three assisted modes.
DEFAULT_CONFIGS = ("ar", "fixed:1", "fixed:2", "fixed:4", "fixed:6", "fixed:8", "heuristic", "confidence",
                   "cumulative", "entropy", "hf:constant:4", "hf:heuristic:5", "hf:confidence:0.4")


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
    # target calls per verified window {k: calls} (k = 0: autoregressive steps); {} = unknown (HF's
    # internal prompt lookup). What engine.bench.modelled prices.
    windows: dict[int, int] = field(default_factory=dict)
    weights: str = "dense"  # the weights path the pair ran on (engine.kernels.quant.WEIGHTS)
    # drafting calls (window ≥ 1) per accepted count {a: calls}: per-position acceptance ({} = unknown)
    accepted_counts: dict[int, int] = field(default_factory=dict)
    # tokens the draft model cached without drafting (its prompt, and catch-ups after autoregressive steps):
    # work AR never does, priced by engine.bench.modelled at the probe's per-token prefill cost
    draft_prefill_tokens: int = 0
    draft_prefill_s: float = 0.0  # the wall time those catch-ups took, measured (inside wall_s)


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
    head, which `engine.core.lm.HFModel` calls directly when it needs hidden states or scores a
    reduced vocabulary (a hook on the causal LM alone would count that time as overhead). A drafter
    that wraps a draft model (phrase, multi-draft, autoregressive: its `.lm`) is unwrapped, so its
    model's forwards count as model time, not as the drafter's bookkeeping."""
    m = getattr(lm, "model", None)
    if not isinstance(m, torch.nn.Module):
        inner = getattr(lm, "lm", None)
        return _hf_modules(inner) if inner is not None and inner is not lm else []
    out = [m]
    if hasattr(m, "get_decoder"):
        out.append(m.get_decoder())
    if hasattr(m, "get_output_embeddings") and m.get_output_embeddings() is not None:
        out.append(m.get_output_embeddings())
    if getattr(lm, "sub_head", None) is not None:
        out.append(lm.sub_head)
    if getattr(lm, "lean_step", None) is not None:  # the one-call decoder's direct step (engine.core.lm)
        out.append(lm.lean_step)
    return out


def applies(spec: str, temperature: float) -> bool:
    """The hindsight oracle is defined for greedy decoding only (engine.policies.oracle); it skips T > 0."""
    return not (spec == "oracle" and temperature > 0)


def make_policy(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos):
    """None for 'ar'; else the policy of this prompt (`for_request`: the hindsight oracle gets its
    look-ahead here, before any timing starts)."""
    if spec == "ar":
        return None
    from engine.run import policy_for

    return policy_for(parse_policy(spec), target, draft, cfg, ids, eos)


def split_config(spec: str) -> tuple[str, str | None]:
    """`POLICY@DRAFTER` → (policy, model-free drafter spec); a bare policy uses the run's `--draft`.

    `fixed:10@lookup:n=10,ngram=2` drafts by prompt lookup with a fixed cap of 10 in the same run
    (and on the same prompts, interleaved) as `heuristic` with the draft model — so a model draft and
    model-free drafts are compared side by side. Only drafters that load no second model go after '@':
    model-free ones, `block:PATH` and `eagle:PATH` (small networks on the target's own features); a second draft
    model would double the memory for what two bench runs do as well. `fixed:3@ctx:256` is the run's own
    draft model reading the prompt's first 64 and last 256 tokens (engine.drafters.autoregressive.DraftContext),
    beside `fixed:3` on the whole prompt.
    """
    pol, at, drafter = spec.partition("@")
    if not at:
        return spec, None
    from engine.drafters import drafter_kind
    from engine.drafters.autoregressive import is_context

    if pol in ("ar", "oracle") or pol.startswith("hf:") or not (
            is_context(drafter) or drafter_kind(drafter) in ("model-free", "block", "eagle")):
        raise ValueError(f"config {spec!r}: '@' takes a window policy before it and a model-free, block or eagle "
                         "drafter (lookup:…, suffix:…, block:PATH, eagle:PATH) or the draft model's context window "
                         "(ctx:W[,sink=S]) after it")
    return pol, drafter


def policy_specs(configs) -> list[str]:
    """The policies `parse_policy` builds: not 'ar', 'oracle' (per prompt) or HF's 'hf:…'."""
    return [split_config(s)[0] for s in configs if s not in ("ar", "oracle") and not s.startswith("hf:")]


def _hf_needs_draft(spec: str) -> bool:
    """`hf:ar` and `hf:lookup:N` (HF's prompt lookup) run on the target alone."""
    return spec != "hf:ar" and not spec.startswith("hf:lookup:")


def run_ours(spec: str, target, draft, ids: list[int], cfg: DecodeConfig, eos, writer=None,
             request_id: int = 0, meta: dict | None = None, decode_text=None) -> RunResult:
    """One prompt through engine.run.RequestRun; with a TraceWriter its request, steps and end are
    appended after the clock stops (file I/O is not the engine's cost)."""
    from engine.run import Request, RequestRun

    policy = make_policy(split_config(spec)[0], target, draft, ids, cfg, eos)
    timer = _ForwardTimer(*_hf_modules(target), *([] if spec == "ar" else _hf_modules(draft)))
    m = meta or {}
    req = Request(list(ids), m.get("prompt_text", ""), m.get("category", ""), m.get("question_id"))
    run = RequestRun(target, None if spec == "ar" else draft, policy, cfg, req, request_id, writer, eos, decode_text,
                     defer_writes=True)
    calls, drafted, accepted, dropped, prefill_ms = 0, 0, 0, 0, 0.0
    draft_lm = None if spec == "ar" else _forward_lm(draft)
    prefilled0, prefill_s0 = getattr(draft_lm, "prefilled", 0), getattr(draft_lm, "prefill_s", 0.0)
    windows: dict[int, int] = {}
    acc_counts: dict[int, int] = {}
    try:
        for rec in run:
            calls += 1
            drafted += rec.window
            windows[rec.window] = windows.get(rec.window, 0) + 1
            if rec.window:
                acc_counts[rec.accepted] = acc_counts.get(rec.accepted, 0) + 1
            accepted += rec.accepted
            dropped += int(rec.policy_fields.get("dropped", 0))
            prefill_ms += rec.t_prefill_ms
    finally:
        timer.close()
    out = run.output
    return RunResult(spec, cfg.sampling.temperature, "", None, len(out), run.wall_s, calls, drafted, accepted,
                     drafted + dropped, out, dropped, timer.s, prefill_ms / 1e3, windows, accepted_counts=acc_counts,
                     draft_prefill_tokens=getattr(draft_lm, "prefilled", 0) - prefilled0,
                     draft_prefill_s=getattr(draft_lm, "prefill_s", 0.0) - prefill_s0)


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
            sync(target)
            t0 = time.perf_counter()
            with torch.inference_mode():
                y = target.model.generate(x, **kw)
            sync(target)
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
    windows: dict[int, int] = {}
    for s in steps:
        windows[s.window] = windows.get(s.window, 0) + 1
    if spec == "hf:ar":
        windows = {0: calls}
    return RunResult(spec, cfg.sampling.temperature, "", None, len(out), wall, calls, drafted, accepted,
                     drafted, out, 0, timer.s, first.first_s or 0.0, windows)


def _forward_lm(draft):
    """The LM whose forward a drafter's step costs: the draft itself when it runs forwards, else the
    model it wraps (`.lm`, unwrapped as in _hf_modules); None for a model-free draft."""
    while draft is not None and not hasattr(draft, "extend"):
        inner = getattr(draft, "lm", None)
        draft = inner if inner is not draft else None
    return draft


PREFILL_PROBE = 256  # tokens of the draft's prefill probe: a Spec-Bench prompt's order (50–900), and ~0.5 s on the 0.5B


def prefill_ms_per_token(lm, ids: list[int], reps: int = 3) -> float:
    """Median ms per token of `lm.prefill` over PREFILL_PROBE tokens (ids repeated) on an empty cache: what
    one token of a draft's catch-up costs (compute-bound, ~15× cheaper per token than a 1-token forward);
    nan for an LM without a logits-free prefill."""
    if lm is None or not hasattr(lm, "prefill") or not ids:
        return float("nan")
    feed = (list(ids) * (PREFILL_PROBE // len(ids) + 1))[:PREFILL_PROBE]
    times = []
    for _ in range(reps):
        lm.reset()  # every repeat on an empty cache: a prompt's catch-up, not a long context's
        times.append(timed_ms(lambda: lm.prefill(feed), lm) / len(feed))
    lm.reset()
    return statistics.median(times)


def eagle_token_ms(target, draft, ids: list[int], reps: int = 5, k: int = 4) -> float:
    """Median ms per drafted token of an EAGLE-style head (a draft of k tokens ÷ k) on a synced context;
    nan for any other drafter. The first draft, which feeds the context's features, is not timed
    (catch-up, as for a draft model): what is left is the head's own per-token cost, its c numerator."""
    from engine.drafters.eagle import EagleDrafter

    if not isinstance(draft, EagleDrafter) or len(ids) < 3:
        return float("nan")
    from engine.core.lm import prefill
    from engine.core.sampling import SamplingConfig
    from engine.drafters.base import KEEP_ALL

    ft = draft.verify_target(target)
    ft.reset()
    prefill(ft, list(ids[:-1]))
    draft.reset(list(ids))
    sc, gen = SamplingConfig(), torch.Generator()
    ms = median_ms(lambda: draft.draft(list(ids), k, KEEP_ALL, sc, gen), reps, warmup=1, device=ft) / k
    ft.reset()
    return ms


def block_step_ms(target, draft, ids: list[int], reps: int = 5) -> float:
    """Median ms of one block-drafter forward (`BlockDrafter.block_logits`) anchored after `ids`: a block drafter
    proposes its whole block in one forward, so it is priced per drafting step, not per drafted token; nan for
    any other drafter. The first call, which projects the context, is not timed (catch-up, as for a draft model)."""
    if not hasattr(draft, "block_logits") or len(ids) < 2:
        return float("nan")
    from engine.core.lm import prefill

    ft = draft.verify_target(target)
    ft.reset()
    prefill(ft, list(ids[:-1]))
    draft.reset(list(ids))
    ms = median_ms(lambda: draft.block_logits(ids[-1], len(ids) - 1), reps, warmup=1, device=ft)
    ft.reset()
    return ms


def measure_costs(target, draft, ids: list[int], reps: int = 5) -> dict[str, Any]:
    """Median ms of a 1-token draft forward (nan for model-free drafts), of the draft's prefill per token
    (`prefill_ms_per_token`) and of k-token target forwards on a warm cache, the lower of two rounds. Why two:
    the cost-aware window is primed with these costs, and one disturbed probe (a draft read at 96 ms instead
    of ~37 on 2026-12-05) made drafting look hopeless for a whole run (docs/log/2026-12-05-dense-kernel.md)."""
    lm = _forward_lm(draft)
    rounds = []
    for _ in range(2):  # a disturbed probe reads slow, never fast: the lower of two rounds' medians is kept
        rounds.append((forward_curve(lm, ids, (1,), reps)[1] if lm is not None else eagle_token_ms(target, draft, ids, reps),
                       forward_curve(target, ids, (1, 2, 4, 8, 16), reps), prefill_ms_per_token(lm, ids)))
    t_draft = min(r[0] for r in rounds)
    tk = {k: min(r[1][k] for r in rounds) for k in rounds[0][1]}
    return {"t_draft_ms": t_draft, "t_target_ms": tk, "c": t_draft / tk[1],
            # each model's own weights path: a mixed pair's c is a quantized draft's time over a dense target's
            "target_weights": getattr(target, "weights", "dense"), "draft_weights": getattr(lm, "weights", None),
            "verify_growth": {k: v / tk[1] for k, v in tk.items()},
            "t_draft_prefill_ms": min(r[2] for r in rounds), "t_draft_step_ms": block_step_ms(target, draft, ids, reps)}


def run_config(spec: str, target, draft, ids: list[int], temperature: float, seed: int, eos, max_new_tokens: int,
               writer=None, request_id: int = 0, meta: dict | None = None, decode_text=None) -> RunResult:
    """`spec` on one prompt at one temperature: our engine, or HF's for `hf:…` configs."""
    dc = DecodeConfig(max_new_tokens=max_new_tokens, sampling=SamplingConfig(temperature=temperature, seed=seed))
    fn = run_hf if spec.startswith("hf:") else run_ours
    return fn(spec, target, draft, ids, dc, eos, writer, request_id, meta, decode_text)
