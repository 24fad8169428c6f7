"""The modelled speedup of a bench row: the run's own counts priced at the run's own median costs, in the
terms of engine.cost (t(m) = forward_ms, t_d, t_p, t_step: the one cost vocabulary's milliseconds view).

Wall clock on a shared CPU moves by more than the gaps between policies (two configurations making
identical target calls have read 1.22× and 0.73× on one prompt), so every bench row also gives a
figure that depends only on what the run did and on one cost curve measured at its start
(engine.bench.runner.measure_costs: medians of warm forwards):

    T_model(run) = Σ_k n_k · t_target(k + 1)  +  d · t_draft  +  P · t_prefill  +  S · t_step
    modelled_speedup_vs_ar = (Σ tokens / Σ T_model) ÷ (Σ tokens_AR / Σ T_model,AR)   over a row's prompts

n_k = target calls that verified k drafts (k = 0: an autoregressive step), t_target(m) = a forward
of m tokens (interpolated linearly between the measured 1, 2, 4, 8, 16; extrapolated past 16), fitted
non-decreasing first (pool adjacent violators: a wider forward is not cheaper, and one noisy probe
of t(1) above t(2) — 0.69× once on a loaded machine — priced every AR step dearer than a verify),
d = draft forwards (drafted tokens incl. those dropped unverified), t_draft = one draft token's
forward — an EAGLE-style head after '@' its own probe (costs["by_drafter"]; `POLICY@ctx:W`, the run's draft model
reading a context window, the run's own probe), 0 for a drafter without
a network of its own per token (lookup, suffix), whose scan is bookkeeping. P = tokens the draft model cached without drafting (RunResult.draft_prefill_tokens:
the prompt, once it first drafts, and every catch-up over > 8 tokens after autoregressive steps), t_prefill =
the probe's per-token draft prefill (engine.bench.runner.prefill_ms_per_token). S = drafting steps (Σ_{k≥1} n_k),
t_step = one block-drafter forward (engine.bench.runner.block_step_ms): a block drafter has no per-token draft
cost (t_draft is nan for it) but one forward per drafting step; results before 2026-12-05 lack t_step and price
it at 0, as they priced the block drafter's draft at 0. Why P: on a 700-token prompt
the draft's prefill (~1.6 s on the 0.5B here) outweighs what 48 tokens of drafting save, so a window that
declines it (the cost-aware one) and a window that pays it are not comparable without it; results without a
prefill probe (before 2026-12-05) price P at 0. The target's prompt prefill is excluded on both sides.
What it leaves out, by design: the short catch-up inside a step's first draft forward (1–8 tokens in one
memory-bound forward, priced as one draft token), context-length growth of the verify cost, and non-model
overhead — the wall-clock row keeps those. None when a run's windows are unknown (HF's internal prompt lookup).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from engine.cost import forward_ms, probe_ms


def target_ms(costs: Mapping[str, Any], tokens: int) -> float:
    """t_target(tokens) from the run's measured curve (engine.cost.forward_ms: keys 1, 2, 4, …, isotonic)."""
    return forward_ms(costs, tokens)


def own_drafter(config: str) -> bool:
    """A `POLICY@DRAFTER` config whose drafter is not the run's draft model (`POLICY@ctx:W` is that model,
    reading a context window: priced with the run's own probe)."""
    _, at, drafter = config.partition("@")
    return bool(at) and not drafter.startswith("ctx:")


def draft_ms(costs: Mapping[str, Any], config: str) -> float:
    """t_draft for a config: the run's draft forward; for a `POLICY@DRAFTER` config the probe of that
    drafter (costs["by_drafter"]: an EAGLE-style head), else 0 (model-free: its scan is bookkeeping)."""
    t = probe_ms((costs.get("by_drafter") or {}).get(config) or {}, "t_draft_ms") if own_drafter(config) else \
        probe_ms(costs, "t_draft_ms")
    return 0.0 if not math.isfinite(t) else t


def prefill_ms(costs: Mapping[str, Any], config: str) -> float:
    """t_prefill: the probe's draft prefill per token; 0 without one (older results) or without a draft model."""
    t = probe_ms(costs, "t_draft_prefill_ms")
    return 0.0 if own_drafter(config) or not math.isfinite(t) else t


def run_model_ms(run: Any, costs: Mapping[str, Any]) -> float | None:
    """T_model of one RunResult (module doc); None when its windows are unknown."""
    windows = getattr(run, "windows", None) or {}
    if not windows:
        return None
    verify = sum(int(n) * target_ms(costs, int(k) + 1) for k, n in windows.items())
    catchup = getattr(run, "draft_prefill_tokens", 0) * prefill_ms(costs, run.config)
    t_step = probe_ms(costs, "t_draft_step_ms")
    blocks = 0.0
    if math.isfinite(t_step) and not own_drafter(run.config):  # a model-free drafter after '@' runs no block forward
        blocks = t_step * sum(int(n) for k, n in windows.items() if int(k) > 0)
    return verify + run.draft_calls * draft_ms(costs, run.config) + catchup + blocks


def modelled_speedup(runs: Iterable[Any], base: Iterable[Any], costs: Mapping[str, Any] | None) -> float | None:
    """Ratio of modelled token rates of `runs` and the autoregressive `base` runs (module doc)."""
    if not costs:
        return None
    def rate(rs):
        ms = [run_model_ms(r, costs) for r in rs]
        if not ms or any(m is None for m in ms) or not sum(ms) > 0:
            return None
        return sum(r.new_tokens for r in rs) / sum(ms)
    a, b = rate(list(runs)), rate(list(base))
    return None if a is None or b is None else a / b
