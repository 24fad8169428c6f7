"""Range checks of the decode command's numbers, before anything is loaded or written.

Why a separate pass: argparse checks types, not ranges, and the engine's own checks (DecodeConfig,
SamplingConfig, the policies, the multi-draft config) run at different moments — some only after
two models have loaded for a minute, one (`--limit -3`) never, where a negative limit silently
decoded the wrong prompts. Checking every number here first means a bad command costs nothing,
leaves no file behind, and says what is wrong in one line: "--top-p must be in (0, 1], got 1.5".
"""

from __future__ import annotations

import math
from typing import Any

MAX_K = 16  # drafts per step: engine.drafters.multi.MultiDraftConfig's own ceiling
MAX_NEW_TOKENS = 100_000  # DecodeConfig's ceiling
MAX_THREADS = 1024


def _num(name: str, v: Any, lo: float, hi: float, lo_open: bool = False, integer: bool = False) -> None:
    if v is None:
        return
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok and integer:
        ok = float(v).is_integer()
    if ok:
        ok = (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        lo_b = "(" if lo_open else "["
        raise ValueError(f"{name} must be {'an integer ' if integer else ''}in {lo_b}{lo:g}, {hi:g}], got {v!r}")


def split_specs(text: str, what: str = "--configs") -> list[str]:
    """A list of policy/config specs: ';'-separated when any spec carries its own commas
    (`confidence:0.5,trim=1;heuristic`), else ','-separated. A ','-split that leaves a bare `key=value`
    piece means a spec's own comma was taken as a separator: refused with the fix, not parsed as a
    policy named `trim=1`."""
    sep = ";" if ";" in text else ","
    out = [s.strip() for s in text.split(sep) if s.strip()]
    if sep == ",":
        for piece in out:
            if "=" in piece and ":" not in piece:
                raise ValueError(f"{what}: {piece!r} looks like a parameter of the spec before it; separate "
                                 f"specs with ';' when one has commas, e.g. 'ar;confidence:0.5,trim=1'")
    return out


def check_decode_args(a) -> None:
    """ValueError (one line, naming the flag) for any out-of-range number of `python -m engine decode`."""
    _num("--max-new-tokens", a.max_new_tokens, 1, MAX_NEW_TOKENS, integer=True)
    _num("--temperature", a.temperature, 0, 100)
    _num("--top-k", a.top_k, 0, 10_000_000, integer=True)
    _num("--top-p", a.top_p, 0, 1, lo_open=True)
    _num("--k", a.k, 1, MAX_K, integer=True)
    _num("--limit", a.limit, 1, 10_000_000, integer=True)
    _num("--per-task", a.per_task, 1, 10_000_000, integer=True)
    _num("--threads", a.threads, 1, MAX_THREADS, integer=True)
    _num("--seed", a.seed, 0, 2**63 - 1, integer=True)
    if a.draft:
        if a.policy != "oracle":  # γ, thresholds, trim: each policy checks its own parameters
            from engine.policies.base import parse_policy

            parse_policy(a.policy)
    elif a.k != 1:
        raise ValueError(f"--k {a.k} needs a draft model and a multi-draft verifier")
