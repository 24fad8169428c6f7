"""Range checks of the decode command's numbers, before anything is loaded or written.

Why a separate pass: argparse checks types, not ranges. The run's own rules are engine.spec.RunSpec.check
(stated once, before any model loads); this module adds the CLI's numbers (`--limit -3` once silently
decoded the wrong prompts) and the list splitting of --configs. A bad command costs nothing, leaves no
file behind, and says what is wrong in one line: "--top-p must be in (0, 1], got 1.5".
"""

from __future__ import annotations

from typing import Any

from engine.spec import FLAGS, MAX_K, MAX_NEW_TOKENS, RunSpec, range_error  # noqa: F401 (re-exported)

import os

MAX_THREADS = os.cpu_count() or 1  # more threads than cores only adds spin-wait


def _num(name: str, v: Any, lo: float, hi: float, lo_open: bool = False, integer: bool = False) -> None:
    err = range_error(name, v, lo, hi, lo_open, integer)
    if err:
        raise ValueError(err)


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


def decode_spec(a) -> RunSpec:
    """The run `python -m engine decode` asks for (engine.spec.RunSpec); `--weights target=…,draft=…` gives
    the draft model its own path (engine.models.pair_weights)."""
    from engine.models.pair_weights import parse

    pw = parse(getattr(a, "weights", "dense"))
    return RunSpec(target=a.target, draft=a.draft or None, policy=a.policy, verifier=a.verifier, k=a.k,
                   temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, seed=a.seed,
                   max_new_tokens=a.max_new_tokens, dtype=a.dtype, device=a.device,
                   weights=pw.target, draft_weights=pw.draft if pw.mixed else None,
                   draft_context=context_spec(getattr(a, "draft_context", None)))


def context_spec(flag: str | None) -> str:
    """`--draft-context 256` / `256,sink=8` → the RunSpec's "ctx:256" / "ctx:256,sink=8"; None → ""."""
    if flag is None or not str(flag).strip():
        return ""
    flag = str(flag).strip()
    return flag if flag.startswith("ctx:") else f"ctx:{flag}"


def check_decode_args(a) -> RunSpec:
    """The decode command's RunSpec, or ValueError (one line, naming the flag) for the first thing
    it refuses: RunSpec.check (numbers, verifier, K, drafter, policy) and the CLI's own numbers."""
    spec = decode_spec(a)
    errors = spec.check(labels=FLAGS)
    for name, v, hi in (("--limit", a.limit, 10_000_000), ("--per-task", a.per_task, 10_000_000),
                        ("--threads", a.threads, MAX_THREADS)):
        err = range_error(name, v, 1, hi, integer=True)
        if err:
            errors.append(err)
    if errors:
        raise ValueError(errors[0])
    return spec
