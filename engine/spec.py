"""One run specification: `RunSpec` says what a decode run is, and `check()` says — before any model
loads, in one line each — every reason it cannot run.

    RunSpec(target, draft, policy, verifier, k, temperature, top_k, top_p, seed, max_new_tokens, …)
    spec.check(target=None) -> list[str]   [] when the run can start; pure: no model is loaded
    spec.build(loaded_target) -> Run       the target LM to decode with, the drafter, the policy, the
                                           DecodeConfig (engine.drafters.make_drafter loads the draft)

The rules, in the order `check` states them:
    weights    a path of engine.kernels.quant.WEIGHTS (dense, quantized, int8, int4) for the target and,
               in `draft_weights`, the draft model's own (a mixed pair: engine.models.pair_weights); only a
               draft model has weights of its own; a path this machine cannot run (pair_weights.refusal)
    numbers    max_new_tokens ∈ [1, 100000], temperature ∈ [0, 100], top_k ≥ 0, top_p ∈ (0, 1],
               k ∈ [1, 16] (MultiDraftConfig's ceiling), seed ∈ [0, 2⁶³)
    verifier   a name of engine.verify.VERIFIERS; shadow verifiers "NAME:k" (engine.verify.shadow)
    k          K > 1 needs a draft model and a multi-draft verifier; a model-free or block drafter
               proposes one block per step (K = 1 verifiers only)
    drafter    a model-free spec's parameters (built once, it holds no weights); a block drafter's
               saved config against the target when the loaded target is given (the Live page)
    policy     its spec parses (each policy checks its own parameters), then what it declares in
               `WindowPolicy.needs()` (engine.policies.base.Needs.refusals: greedy only, exact under
               sampling, draft hidden states and their size) and the look-ahead of the hindsight
               oracle (a plain draft model, K = 1)
    context    a draft context window ("ctx:W[,sink=S]") parses and is given to a plain draft model with a
               K = 1 verifier, not to the hindsight oracle (its look-ahead reads the whole prompt)

Callers: `python -m engine decode` (flags named as on its command line: `labels=FLAGS`), the bench
and multibench CLIs (one spec per configuration × temperature), `pacer bench`, the sweep grid, and the
Live page (its own labels; the pair's draft hidden size in `draft_hidden_size`). `engine.decode`
states the policy rules once more for direct callers, from the same `Needs.refusals`.

Why one place: the rules used to be written in six (the CLI's range checks, the oracle's greedy / K = 1
/ model-drafter rule in three tools, decode's refusals after two models had loaded, the drafter
factory, the Live page's copy of decode's refusals and of PACER's hidden-size rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from engine.trace.check import MAX_NEW_TOKENS  # the one ceiling (DecodeConfig's too); re-exported for cli/checks

MAX_K = 16  # drafts per step: engine.drafters.multi.MultiDraftConfig's own ceiling
FLAGS = {"max_new_tokens": "--max-new-tokens", "temperature": "--temperature", "top_k": "--top-k",
         "top_p": "--top-p", "k": "--k", "seed": "--seed", "draft": "--draft", "policy": "--policy",
         "verifier": "--verifier", "weights": "--weights", "draft_context": "--draft-context"}  # `python -m engine decode`'s names for the fields


def range_error(name: str, v: Any, lo: float, hi: float, lo_open: bool = False, integer: bool = False) -> str | None:
    """"NAME must be [an integer ]in [lo, hi], got v" or None (None values are not checked)."""
    if v is None:
        return None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok and integer:
        ok = float(v).is_integer()
    if ok:
        ok = (lo < v if lo_open else lo <= v) and v <= hi
    if ok:
        return None
    lo_b = "(" if lo_open else "["
    return f"{name} must be {'an integer ' if integer else ''}in {lo_b}{lo:g}, {hi:g}], got {v!r}"


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


@dataclass(frozen=True)
class Run:
    """What `RunSpec.build` returns: ready for engine.run.run_requests."""

    target: Any  # the LM to decode with (a TreeTarget for multi-draft, a FeatureLM for block drafters)
    draft: Any  # a draft LM or drafter; None for autoregressive decoding
    policy: Any  # the WindowPolicy (for_request gives each request's own); None without a draft
    cfg: Any  # engine.decode.DecodeConfig


@dataclass(frozen=True)
class RunSpec:
    target: str | None = None  # model name or path; None when the caller holds a loaded target
    draft: str | None = None  # a --draft spec (engine.drafters.factory); None: autoregressive decoding
    policy: str = "fixed:4"  # a window policy spec (engine.policies.base.parse_policy); unused without a draft
    verifier: str = "token"  # token-level speculative sampling: the lossless K = 1 baseline
    k: int = 1  # i.i.d. draft blocks per step (multi-draft verifiers only)
    temperature: float = 0.0  # greedy by default (engine.core.sampling.SamplingConfig)
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_new_tokens: int = 128  # DecodeConfig's default
    dtype: str = "auto"  # how the draft model loads next to the target (engine.models.load)
    device: str = "auto"
    shadow: tuple[str, ...] = ()  # paired verification ("VERIFIER:k"), see engine.verify.shadow
    draft_hidden_size: int | None = None  # the draft's hidden size when known (a loaded pair)
    weights: str = "dense"  # the target's weights path (engine.kernels.quant): dense is the exactness reference
    draft_weights: str | None = None  # the draft model's path when it differs (a mixed pair); None = the target's
    # What of the prompt the draft model reads ("ctx:W[,sink=S]", engine.drafters.autoregressive.DraftContext);
    # "": all of it, as its acceptance is best there — a window trades some of it for a cheaper draft prefill.
    draft_context: str = ""

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def sampling(self):
        from engine.core.sampling import SamplingConfig

        return SamplingConfig(self.temperature, self.top_k, self.top_p, self.seed)

    def decode_config(self):
        from engine.decode import DecodeConfig

        return DecodeConfig(max_new_tokens=self.max_new_tokens, verifier=self.verifier, sampling=self.sampling,
                            shadow=tuple(self.shadow))

    def parsed_policy(self):
        """The policy object (None without a draft); raises ValueError for a bad spec."""
        from engine.policies.base import parse_policy

        return parse_policy(self.policy) if self.draft else None

    def check(self, target: Any = None, labels: dict[str, str] | None = None) -> list[str]:
        """Every refusal, one line each ([] = the run can start). `target`: the loaded target LM, when
        the caller has one (adds the checks that read its vocabulary or config). `labels`: field →
        name in messages (FLAGS for the CLI)."""
        lab: Callable[[str], str] = lambda f: (labels or {}).get(f, f)
        errors = [e for e in (
            range_error(lab("max_new_tokens"), self.max_new_tokens, 1, MAX_NEW_TOKENS, integer=True),
            range_error(lab("temperature"), self.temperature, 0, 100),
            range_error(lab("top_k"), self.top_k, 0, 10_000_000, integer=True),
            range_error(lab("top_p"), self.top_p, 0, 1, lo_open=True),
            range_error(lab("k"), self.k, 1, MAX_K, integer=True),
            range_error(lab("seed"), self.seed, 0, 2**63 - 1, integer=True)) if e]
        from engine.kernels.quant import check_weights
        from engine.verify import MULTI_DRAFT, VERIFIERS
        from engine.verify.shadow import parse_shadow

        for w in (self.weights, self.draft_weights):
            if w is not None and check_weights(w):
                errors.append(check_weights(w))
        if self.verifier not in VERIFIERS:
            errors.append(f"unknown verifier {self.verifier!r}; choose from {', '.join(VERIFIERS)}")
        for name in self.shadow:
            try:
                parse_shadow(name)
            except ValueError as e:
                errors.append(_first_line(e))
        if errors:
            return errors  # the rules below read these numbers
        errors += self._weights_errors(lab)
        multi = self.verifier in MULTI_DRAFT
        if not self.draft:
            if self.k != 1:
                errors.append(f"{lab('k')} {self.k} needs a draft model and a multi-draft verifier")
            if self.draft_context:
                errors.append(f"{lab('draft_context')}: autoregressive decoding has no draft to read a window")
            return errors
        errors += self._drafter_errors(target, multi, lab)
        try:
            pol = self.parsed_policy()
        except (ValueError, TypeError, OSError) as e:
            return errors + [_first_line(e)]
        from engine.drafters.factory import drafter_kind

        kind = drafter_kind(self.draft)
        needs = pol.needs()
        own = kind in ("model-free", "block", "eagle")
        errors += needs.refusals(self.policy, self.greedy, drafter_hidden=not own,
                                 drafter=self.draft.partition(":")[0].strip(), draft_hidden_size=self.draft_hidden_size)
        if needs.lookahead and (multi or self.k != 1):
            errors.append(f"{self.policy!r} is the greedy hindsight window: use a K = 1 verifier")
        if needs.lookahead and kind != "model":
            errors.append(f"{self.policy!r} replays a plain draft model; the {kind} drafter is not one")
        return errors + self._context_errors(kind, multi, needs.lookahead, lab)

    def _context_errors(self, kind: str, multi: bool, lookahead: bool, lab: Callable[[str], str]) -> list[str]:
        """A draft context window: a valid spec, on a plain draft model verified one block a step."""
        if not self.draft_context:
            return []
        from engine.drafters.autoregressive import DraftContext

        try:
            DraftContext.parse(self.draft_context)
        except ValueError as e:
            return [_first_line(e)]
        if kind != "model":
            return [f"{lab('draft_context')}: a context window is for a draft model; the {kind} drafter "
                    f"{self.draft} reads what it reads"]
        if multi or self.k != 1:
            return [f"{lab('draft_context')}: a context window needs a K = 1 verifier (one draft model cache)"]
        if lookahead:
            return [f"{self.policy!r} replays the draft on the whole prompt: leave {lab('draft_context')} out"]
        return []

    def _weights_errors(self, lab: Callable[[str], str]) -> list[str]:
        """A path this machine cannot run; a draft path given to a drafter that has no weights of its own."""
        from engine.models.pair_weights import refusal

        out = [r for r in dict.fromkeys(refusal(w, self.dtype, self.device) for w in (self.weights, self.draft_weights) if w) if r]
        if self.draft_weights is not None and self.draft_weights != self.weights:
            from engine.drafters.factory import drafter_kind

            kind = drafter_kind(self.draft)
            if kind not in ("model", "phrase"):
                out.append(f"{lab('weights')} draft={self.draft_weights}: "
                           + ("autoregressive decoding has no draft" if kind == "none"
                              else f"the {kind} drafter {self.draft} has no weights of its own"))
        return out

    def _drafter_errors(self, target: Any, multi: bool, lab: Callable[[str], str]) -> list[str]:
        from engine.drafters.factory import MULTI_VERIFIERS, block_path, drafter_kind, eagle_path

        kind = drafter_kind(self.draft)
        if kind in ("model-free", "block", "eagle"):
            if multi or self.k != 1:
                return [f"{lab('draft')} {self.draft} proposes one block per step: use a K = 1 verifier"]
            try:
                if kind == "model-free":
                    from engine.drafters.modelfree import make_model_free

                    make_model_free(self.draft, target.vocab_size if target is not None else 2)
                elif kind == "eagle":
                    from engine.drafters.eagle import check_eagle, read_config

                    check_eagle(eagle_path(self.draft), target) if target is not None else read_config(
                        eagle_path(self.draft))
                elif target is not None:  # its saved config against this target: no weights are read
                    from engine.drafters.block import check_block

                    check_block(block_path(self.draft), target)
                else:
                    block_path(self.draft)
            except (ValueError, TypeError, OSError) as e:
                return [_first_line(e)]
            return []
        if not multi and self.k != 1:
            return [f"{lab('k')} {self.k} needs a multi-draft verifier ({MULTI_VERIFIERS})"]
        return []

    def raise_first(self, target: Any = None, labels: dict[str, str] | None = None) -> None:
        """ValueError with the first refusal (the CLI's one-line error)."""
        errors = self.check(target, labels)
        if errors:
            raise ValueError(errors[0])

    def build(self, loaded_target) -> Run:
        """The run for a loaded target (engine.models.load.LoadedModel, or a bare LM for specs that load
        nothing more): loads the draft model the spec names. Call check() first."""
        from engine.drafters import make_drafter

        pol = self.parsed_policy()
        target_lm, draft = make_drafter(self.draft, loaded_target, verifier=self.verifier, k=self.k, dtype=self.dtype,
                                        device=self.device, want_hidden=bool(pol is not None and pol.needs().hidden),
                                        weights=self.draft_weights)
        if draft is not None and self.draft_context:
            from engine.drafters.autoregressive import AutoregressiveDrafter, DraftContext

            draft = AutoregressiveDrafter(draft, DraftContext.parse(self.draft_context))
        if draft is not None:
            check_drafter(pol, draft)  # a costaware window past the drafter's limit: refused before decoding
        return Run(target_lm, draft, pol, self.decode_config())


def drafter_limit(drafter: Any) -> int | None:
    """The most tokens a drafter proposes per step: B − 1 for a block drafter, n for lookup / suffix, None
    for a draft model (or a loaded LM standing in for one)."""
    block = getattr(drafter, "block_size", None)
    return int(block) - 1 if block else getattr(drafter, "max_tokens", None)


def check_drafter(policy: Any, drafter: Any) -> None:
    """Refuse before decoding a costaware window the drafter can never fill (its plan would price it), in
    one line (CostAware.window_refusal states the rule; this reads the drafter's limit)."""
    from engine.policies.costaware import CostAware

    if isinstance(policy, CostAware):
        why = policy.window_refusal(drafter_limit(drafter), getattr(drafter, "name", type(drafter).__name__))
        if why:
            raise ValueError(why)
