"""Why a real speculative step costs more than its parts: the target's k-token forward timed alone and
inside a draft→verify rhythm, interleaved in one process.

`python -m engine step-probe --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype fp32`
(CLI: engine/cli/probes.py)

The replay cost model (engine.offline.costmodel) prices a step from forwards timed back to back on one model
(`engine.offline.reference.measure_timings`): t_target(k) with k copies of one token, t_draft(1). Real decoding
alternates the models, feeds distinct tokens and grows the cache. This probe times t_target(k) under
each of these conditions, round-robin so machine drift hits every condition alike:

    alone/repeat      k copies of one token, previous call on the same model (the cost model's view)
    alone/distinct    k distinct tokens of a real continuation
    after-draft       the draft has just drafted k − 1 tokens (one forward each), as in a step
                      with window γ = k − 1 — only the target's call is timed
    draft-after-target  one draft token right after a target call (vs `draft alone`)
    hf-call           k distinct tokens through the model as HF's generate() calls it (2-D attention
                      mask + cache_position) instead of our `extend` (position_ids only)
    plain-linear      k distinct tokens with the (W xᵀ)ᵀ linears of engine.models.load switched off

and reports medians and the ratio to `alone/repeat`. A ratio near 1 everywhere says the parts add up
and the gap lies elsewhere (Python, cache bookkeeping); a large `after-draft` ratio says the models
evict each other's weights from the caches/TLB (memory-bound weights streamed from RAM either way,
so only what stays resident between calls can differ).
"""

from __future__ import annotations

import statistics
from typing import Any

from engine.measure import timed_ms

KS = (1, 2, 5)  # window γ = 0, 1, 4: autoregressive, fixed:1, fixed:4


def _hf_style(lm, tokens: list[int]) -> None:
    """One forward as HF's generate() makes it, on `lm`'s own cache (then booked into lm.length)."""
    import torch

    base = lm.length
    x = torch.tensor([tokens], dtype=torch.long, device=lm.device)
    with torch.inference_mode():
        lm.model(input_ids=x, attention_mask=torch.ones(1, base + len(tokens), dtype=torch.long, device=lm.device),
                 cache_position=torch.arange(base, base + len(tokens), device=lm.device), use_cache=True,
                 **lm.cache_kwargs())
    lm.length = base + len(tokens)


def _linears(lm, skinny: bool) -> None:
    """Switch the (W xᵀ)ᵀ linears of a dense fp32 model (engine.kernels.accelerate: its fp32 path) on or off."""
    import torch

    from engine.kernels.accelerate import accelerate

    if skinny:
        accelerate(lm.model, "dense")
        return
    for m in lm.model.modules():
        if isinstance(m, torch.nn.Linear) and "forward" in m.__dict__:
            del m.forward


def probe(target, draft, context: list[int], continuation: list[int], repeats: int = 5,
          ks=KS) -> dict[str, Any]:
    """Median ms per condition and k (see the module docstring). `continuation` supplies distinct
    tokens (≥ max(ks)); both caches hold `context` and are cropped back after every call."""
    if len(continuation) < max(ks):
        raise ValueError(f"continuation needs at least {max(ks)} tokens")
    for lm in (target, draft):
        lm.reset()
        lm.extend(context)
    base_t, base_d = target.length, draft.length
    times: dict[str, list[float]] = {}

    def rec(name: str, ms: float) -> None:
        times.setdefault(name, []).append(ms)

    def target_call(tokens: list[int]) -> float:
        ms = timed_ms(lambda: target.extend(tokens), target)
        target.crop(base_t)
        return ms

    # warm-up: one call per shape on both models
    for k in ks:
        target_call(continuation[:k])
    draft.extend(continuation[:1])
    draft.crop(base_d)
    for _ in range(repeats):
        for k in ks:
            rec(f"alone/repeat k={k}", target_call(context[-1:] * k))
            rec(f"alone/distinct k={k}", target_call(continuation[:k]))
            for i in range(max(1, k - 1)):  # the draft drafts k − 1 tokens, one forward each
                draft.extend(continuation[i:i + 1])
            draft.crop(base_d)
            rec(f"after-draft k={k}", target_call(continuation[:k]))
            if hasattr(target, "model") and hasattr(target, "cache_kwargs"):  # a transformers model
                ms = timed_ms(lambda: _hf_style(target, continuation[:k]), target)
                target.crop(base_t)
                rec(f"hf-call k={k}", ms)
                skinny = any("forward" in m.__dict__ for m in target.model.modules())
                _linears(target, False)
                rec(f"plain-linear k={k}", target_call(continuation[:k]))
                _linears(target, skinny)
        rec("draft alone", timed_ms(lambda: draft.extend(continuation[:1]), target))
        draft.crop(base_d)
        rec("draft alone", timed_ms(lambda: draft.extend(continuation[:1]), target))
        draft.crop(base_d)
        target_call(continuation[:2])
        rec("draft-after-target", timed_ms(lambda: draft.extend(continuation[:1]), target))
        draft.crop(base_d)
    med = {k: statistics.median(v) for k, v in times.items()}
    ref = {k: med[f"alone/repeat k={k}"] for k in ks}
    rows = []
    for name, ms in med.items():
        k = int(name.rsplit("=", 1)[1]) if "k=" in name else None
        base = ref[k] if k is not None else med["draft alone"]
        rows.append({"condition": name, "median_ms": round(ms, 2), "ratio": round(ms / base, 3),
                     "n": len(times[name])})
    for lm in (target, draft):
        lm.reset()
    return {"context_len": len(context), "repeats": repeats, "rows": rows}


if __name__ == "__main__":  # recorded `python -m engine.bench.step_probe …` commands run as `python -m engine step-probe …`
    import sys

    from engine.__main__ import main

    sys.exit(main(["step-probe", *sys.argv[1:]]))
