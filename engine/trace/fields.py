"""Field checks shared by the project's validating loaders (reference runs, D-PACE training traces).

Each loader passes its own `fail(where, field, msg)`, which raises that loader's one-line error type,
so messages read the same everywhere: "<file>: line N: field 'k[i]': <what is wrong>".
"""

from __future__ import annotations

import math
from typing import Callable

Fail = Callable[[str, str, str], None]


def number_list(d: dict, k: str, where: str, n: int, lo: float, hi: float, fail: Fail,
                integer: bool = False, per: str = "") -> None:
    """d[k] must be a list of n finite numbers (integers if `integer`) within [lo, hi] (± 1e-6)."""
    v = d.get(k)
    if not isinstance(v, list):
        fail(where, k, f"expected a list, got {type(v).__name__}")
    if len(v) != n:
        fail(where, k, f"has {len(v)} entries, expected {n}{f' ({per})' if per else ''}")
    for i, x in enumerate(v):
        ok = isinstance(x, int) if integer else isinstance(x, (int, float))
        if not ok or isinstance(x, bool):
            fail(where, f"{k}[{i}]", f"expected {'an integer' if integer else 'a number'}, got {type(x).__name__}")
        if not math.isfinite(x) or not lo - 1e-6 <= x <= hi + 1e-6:
            fail(where, f"{k}[{i}]", f"{x} outside [{lo}, {hi}]")
