"""Paired ("shadow") verification: every verifier of a grid judged on the same step's drafts.

A real decode step with K i.i.d. draft blocks of length γ gives, besides the verifier that drives the
run, everything another verifier needs: the blocks x^1..x^K, their draft rows q^k and the target
rows p^k (one tree pass scores all K). Because the blocks are i.i.d. draws from q, their first k are
a valid K = k draft set, and block 1 alone is a single-draft step. So one run at K = 4 answers "what
would verifier v with k ≤ 4 drafts have accepted here" for every (v, k), on common contexts and
common drafts: a paired comparison, with far less variance than separate runs.

A shadow name is `VERIFIER:k` (engine.verify.VERIFIERS names; single-draft verifiers take k = 1).
Each shadow draws its own uniforms from its own generator, so adding shadows never changes the
run's own decisions or tokens.

What it is not: the run's trajectory is the driving verifier's. A different verifier would start its
steps at other positions (after its own accepted runs); for lossless verifiers every context is a
target sample either way, so per-step acceptance is an estimate of the same law, but not the same
run. The multi-draft bench measures that gap against real runs (engine.bench.paired).

Worked example: a K = 4, γ = 4 step with shadows ("token:1", "rbv:2") runs verify_token on block 0
and verify_rbv on blocks 0–1; each reports its accepted count, the tokens it would emit (truncated
at EOS and at the token budget, as the real step is) and its rule time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.verify import MULTI_DRAFT, VERIFIERS, uniforms_needed


@dataclass(frozen=True)
class ShadowSpec:
    verifier: str  # an engine.verify.VERIFIERS name
    k: int  # how many of the step's drafts it sees (the first k)

    @property
    def name(self) -> str:
        return f"{self.verifier}:{self.k}"


def parse_shadow(name: str) -> ShadowSpec:
    """'rbv:2' → ShadowSpec('rbv', 2); one-line errors for unknown verifiers and bad k."""
    verifier, _, k = name.strip().partition(":")
    if verifier not in VERIFIERS:
        raise ValueError(f"shadow {name!r}: unknown verifier {verifier!r}; choose from {', '.join(VERIFIERS)}")
    try:
        kk = int(k) if k else 1
    except ValueError:
        raise ValueError(f"shadow {name!r}: k must be an integer, got {k!r}") from None
    if not 1 <= kk <= 16:
        raise ValueError(f"shadow {name!r}: k must be in [1, 16], got {kk}")
    if verifier not in MULTI_DRAFT and kk != 1:
        raise ValueError(f"shadow {name!r}: {verifier} is a single-draft verifier (k = 1 only)")
    return ShadowSpec(verifier, kk)


def shadow_generator(seed: int, request_id: int) -> torch.Generator:
    """The shadows' own uniforms: a stream apart from the run's (which drafts and verifies)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + request_id + 0x5EED_0000) & 0x7FFFFFFFFFFF)


def shadow_verify(specs: tuple[ShadowSpec, ...], blocks: list[list[int]], q: list[torch.Tensor],
                  p: list[torch.Tensor], gen: torch.Generator, eos: set[int] = frozenset(),
                  remaining: int | None = None) -> dict[str, dict]:
    """{name: {"accepted", "emitted", "rule_ms"}} for each shadow on this step's blocks.

    `emitted` counts what the shadow's step would add to the sequence: accepted drafts plus its
    correction/bonus token, cut at the first EOS and at `remaining` (the run's token budget), like a
    real step. A step without drafts (the last token of the budget) emits one token for everyone.
    """
    out: dict[str, dict] = {}
    K = len(blocks)
    for s in specs:
        if s.k > K:
            raise ValueError(f"shadow {s.name} needs {s.k} drafts per step; the run drafts {K}")
        if not blocks or not len(blocks[0]):
            out[s.name] = {"accepted": 0, "emitted": 1, "rule_ms": 0.0}
            continue
        bl, qq, pp = blocks[: s.k], q[: s.k], p[: s.k]
        u = torch.rand(uniforms_needed(s.verifier, [len(b) for b in bl]), generator=gen, dtype=torch.float64)
        t0 = time.perf_counter()
        fn = VERIFIERS[s.verifier]
        res = fn(bl, qq, pp, u) if s.verifier in MULTI_DRAFT else fn(bl[0], qq[0], pp[0], u)
        ms = (time.perf_counter() - t0) * 1e3
        toks = list(res.tokens)
        for i, t in enumerate(toks):
            if t in eos:
                toks = toks[: i + 1]
                break
        n = len(toks) if remaining is None else min(len(toks), remaining)
        out[s.name] = {"accepted": int(res.accepted), "emitted": n, "rule_ms": ms}
    return out
