"""A prefill's cost per token, by length and by route: `python -m engine prefill`.

A prompt's prefill and a draft's catch-up cache tokens without logits (`HFModel.prefill`). On the quantized path
their products take the panel product (engine/kernels/qpanel.h) inside `qkernel.long_forward`; with
`SPECLAB_QPANEL=0` they take the routes they had before it — the one-row product up to `DENSE_ROWS` rows (the fused
C layers' up to 64), the de-quantised GEMM past it. For each model and weights path, this times `prefill` of L
tokens on an empty cache, per token, for every arm (quantized: `panel` and `one-row`, and `panel-vnni` where the
panel runs on AMX tiles; dense: `dense`), interleaved round by round and the best of `repeats` kept, at each L. Why per length: a draft's catch-ups are 9…64 tokens,
a Spec-Bench prompt 40…1,500, and each range has its own route.

    measure(lms, lengths, repeats) -> list[dict]   rows {model, weights, arm, tokens, ms_per_token, vs_one_row}
    format_prefill(rows) -> str                    a markdown table: ms a token per arm, and one-row ÷ panel
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Any

ARMS = {"dense": ("dense",), "quantized": ("panel", "one-row")}  # a weights path → the routes timed on it
# The switches each arm sets (every other one of them cleared): `one-row` the routes before the panel; `panel-vnni`
# (an arm only where the panel's sums run on AMX tiles, qkernel.panel_tiles) the panel on vpdpbusd, the same bits.
ROUTE_ENV = {"panel": {}, "dense": {}, "one-row": {"SPECLAB_QPANEL": "0"}, "panel-vnni": {"SPECLAB_QPANEL_TILES": "0"}}


def arms(weights: str) -> tuple[str, ...]:
    """The arms timed on a weights path here: the quantized path's panel on vpdpbusd too where it runs on tiles."""
    if weights == "dense":
        return ARMS["dense"]
    from engine.kernels import qkernel

    return ("panel", "panel-vnni", "one-row") if qkernel.panel_tiles() else ARMS["quantized"]


@contextmanager
def _route(arm: str):
    """The switches of `arm` (ROUTE_ENV) set for the calls within, the environment as it was after."""
    before = {k: os.environ.get(k) for k in ("SPECLAB_QPANEL", "SPECLAB_QPANEL_TILES")}
    for k in before:
        os.environ.pop(k, None)
    os.environ.update(ROUTE_ENV[arm])
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure(lms: dict[str, Any], lengths: tuple[int, ...], repeats: int = 3, ids: list[int] | None = None,
            progress=None) -> list[dict[str, Any]]:
    """Rows per (model label, arm, L): ms per token of `lm.prefill(ids[:L])` on an empty cache, the best of
    `repeats` rounds, every arm of every model once per round (interleaved; round r starts at arm r mod arms).
    `lms`: label → HFModel (its `weights` picks the arms); `ids`: the tokens fed (default: a fixed run of
    ordinary ids in every vocabulary)."""
    if repeats < 1 or not lengths or min(lengths) < 1:
        raise ValueError("prefill: repeats must be ≥ 1 and every length ≥ 1")
    if ids is None:  # ordinary ids inside every model's vocabulary, no long repeats
        v = min(int(getattr(lm, "vocab_size", 151936)) for lm in lms.values())
        base = min(100, v // 4)
        span = max(1, min(30000, v - base - 1))
        ids = [base + (1000 + 37 * i) % span for i in range(max(lengths))]
    if len(ids) < max(lengths):
        raise ValueError(f"prefill: {len(ids)} ids for a length of {max(lengths)}")
    best: dict[tuple[str, str, int], float] = {}
    for L in lengths:
        for r in range(repeats):
            for label, lm in lms.items():
                order = arms(lm.weights)
                # each round starts at another arm: the first after a model switch re-warms the caches (this
                # bench's first recording had `panel` first every round: 0.83–0.95× `one-row` where both took one route)
                for arm in order[r % len(order):] + order[:r % len(order)]:
                    with _route(arm):
                        lm.reset()
                        t = time.perf_counter()
                        lm.prefill(ids[:L])
                        dt = time.perf_counter() - t
                    key = (label, arm, L)
                    best[key] = min(best.get(key, float("inf")), dt)
            if progress is not None:
                progress.update(1)
        for lm in lms.values():
            lm.reset()
    rows = []
    for (label, arm, L), dt in best.items():
        base = best.get((label, "one-row", L))
        rows.append({"model": label, "weights": lms[label].weights, "arm": arm, "tokens": L,
                     "ms_per_token": 1e3 * dt / L, "vs_one_row": None if base is None else base / dt})
    return rows


def format_prefill(rows: list[dict[str, Any]]) -> str:
    """| model | tokens | ms a token per arm … | one-row ÷ panel |"""
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    lines = ["| model | tokens | " + " | ".join(f"{a} ms/token" for a in arms) + " | one-row ÷ panel |",
             "|---|---|" + "---|" * (len(arms) + 1)]
    for model, L in dict.fromkeys((r["model"], r["tokens"]) for r in rows):
        cells = {r["arm"]: r for r in rows if (r["model"], r["tokens"]) == (model, L)}
        ratio = cells.get("panel", {}).get("vs_one_row")
        lines.append(f"| {model} | {L} | " + " | ".join(f"{cells[a]['ms_per_token']:.3f}" if a in cells else "–"
                                                      for a in arms)
                     + f" | {'–' if ratio is None else f'{ratio:.2f}×'} |")
    return "\n".join(lines)
