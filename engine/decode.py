"""THE decode loop: `decode(...)` yields one `StepRecord` per target verify call.

Autoregressive decoding is the same generator with `draft=None` (window 0: each verify call emits
exactly the target's own sample). CLI, benchmarks, the trace writer and the live demo all consume
this generator; there is no second loop.

Cache bookkeeping (S = tokens in the sequence before a step, x = sequence):
    target cache holds x[:S-1]; verify feeds [x[S-1], d_1..d_γ] → p_1..p_{γ+1}; after accepting n
    drafts the sequence has S+n+1 tokens and the target cache is cropped to S+n.
    draft cache holds a prefix of x; drafting feeds x[len:] then each d_i except the last, so after
    the step it is cropped to min(len, S+n).

Randomness: one torch.Generator per request, seeded by (seed, request_id); it supplies the draft's
samples and the verifier's uniforms, so a run is reproducible and the verifier stays pure.

The one path of a step: policy.propose() → cap; drafter.draft(seq, cap, keep, …) → Proposal, where
`keep` (engine.drafters.base.Keep) carries the policy's keep_drafting / drop_on_stop verdicts and
plain values, so this module is the only code that talks to a policy; the policy's kept_proposal
law replaces the q rows of a gated proposal; the target scores the block(s) (score_paths); the
verifier (engine.verify) decides; the target and the drafter commit; policy.update(result).
Every call is a declared protocol method: the target's (engine.core.target.Target: extend, crop,
score_paths, commit), the drafter's (engine.drafters.base.Drafter: reset, draft, commit, observe,
verify_target, caps) and the policy's (engine.policies.base.WindowPolicy, whose `needs()` the
refusals read); this module probes no optional attribute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from engine.core.lm import prefill
from engine.core.sampling import SamplingConfig, probs_from_logits
from engine.drafters.autoregressive import as_drafter
from engine.drafters.base import Keep, Proposal
from engine.measure import sync
from engine.trace.check import MAX_NEW_TOKENS
from engine.policies.base import WindowPolicy
from engine.verify import MULTI_DRAFT, VERIFIERS, uniforms_needed
from engine.verify.shadow import parse_shadow, shadow_generator, shadow_verify


@dataclass(frozen=True)
class StepRecord:
    """One verify call. `accepted` excludes the bonus/correction token; `emitted` includes it."""

    request_id: int
    step: int
    context_len: int  # tokens in the sequence (prompt + generated) before this step
    window_cap: int  # the policy's proposed maximum γ for this step
    draft_tokens: tuple[int, ...]  # drafted and sent to verification (window = len)
    q_draft: tuple[float, ...]  # draft probability of each drafted token
    p_target: tuple[float, ...]  # target probability of each drafted token
    accept_probs: tuple[float, ...]  # verifier's h_i = min(1, p/q) (greedy: 0/1)
    draft_entropy: tuple[float, ...]  # nats, per drafted position
    accepted: int
    emitted_tokens: tuple[int, ...]  # accepted drafts + correction/bonus, truncated at EOS/limit
    correction: int | None  # token emitted at the first rejection
    bonus: int | None  # token emitted after all drafts were accepted
    stop_reason: str  # why drafting stopped: cap | policy | none (autoregressive)
    t_draft_ms: float
    t_verify_ms: float
    t_prefill_ms: float = 0.0  # prompt prefill of both models (step 0 only)
    finished: str | None = None  # eos | max_new_tokens on the final step
    policy_fields: dict[str, Any] = field(default_factory=dict)
    # Multi-draft steps: every draft block (draft_tokens is the chosen one) and the chosen index.
    all_drafts: tuple[tuple[int, ...], ...] | None = None
    chosen: int = 0
    decisions: tuple[int, ...] | None = None  # per-position accept (1) / reject (0) of the chosen path
    # Part of t_verify_ms spent in the verification rule itself (target probs → decisions), without
    # the target forward: the per-step overhead of a verifier, e.g. RBV over K drafts vs token SD.
    t_rule_ms: float = 0.0
    # Paired verification (DecodeConfig.shadow): {"rbv:2": {"accepted", "emitted", "rule_ms"}, ...} —
    # what other verifiers would have done with this step's drafts. None when no shadows were asked.
    shadow: dict[str, dict] | None = None

    @property
    def window(self) -> int:
        return len(self.draft_tokens)

    @property
    def emitted(self) -> int:
        return len(self.emitted_tokens)


@dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 128  # long enough for acceptance to settle, short enough for CPU benchmarks
    verifier: str = "token"  # token-level speculative sampling: the lossless K=1 baseline
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    # Verifiers judged on each step's drafts beside the run's own ("VERIFIER:k", engine.verify.shadow):
    # none by default, since they cost rule time and never change the run.
    shadow: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens <= MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens must be in [1, {MAX_NEW_TOKENS}], got {self.max_new_tokens}")
        if self.verifier not in VERIFIERS:
            raise ValueError(f"unknown verifier {self.verifier!r}; choose from {', '.join(VERIFIERS)}")
        for name in self.shadow:
            parse_shadow(name)


def keep_for(policy: WindowPolicy) -> Keep:
    """The drafter's view of the policy for one step (engine.drafters.base.Keep)."""
    return Keep(policy.keep_drafting, policy.drop_on_stop, want_hidden=policy.needs().hidden,
                value_blind=type(policy).kept_proposal is WindowPolicy.kept_proposal, block=policy.keep_block)


def kept_law(policy: WindowPolicy, prop: Proposal) -> Proposal:
    """Verify a gated proposal's drafts against the law they were kept under (policy.kept_proposal,
    row by row: identity unless the policy drops drafts by value, see engine.policies.base)."""
    if not prop.gated or type(policy).kept_proposal is WindowPolicy.kept_proposal:
        return prop
    prop.q = [torch.stack([policy.kept_proposal(r) for r in q]) if len(q) else q for q in prop.q]
    return prop


def decode(target, draft, prompt_ids: list[int], policy: WindowPolicy | None,
           cfg: DecodeConfig = DecodeConfig(), eos_ids: tuple[int, ...] = (),
           request_id: int = 0) -> Iterator[StepRecord]:
    """Speculative decoding of one prompt; yields a StepRecord after every target call.

    `draft` is an LM (wrapped as an autoregressive drafter), any drafter (see engine.drafters), or
    None for autoregressive decoding.
    """
    if not prompt_ids:
        raise ValueError("empty prompt: need at least one token")
    sc = cfg.sampling
    drafter, target = _drafter_for(target, draft, policy, sc)
    verify = VERIFIERS[cfg.verifier]
    multi = cfg.verifier in MULTI_DRAFT
    gen = torch.Generator().manual_seed((sc.seed * 1_000_003 + request_id) & 0x7FFFFFFFFFFF)
    shadows = tuple(parse_shadow(n) for n in cfg.shadow)
    shadow_gen = shadow_generator(sc.seed, request_id) if shadows else None
    eos = set(eos_ids)
    seq = list(prompt_ids)
    t_prefill = _start(target, drafter, policy, seq)
    generated, step = 0, 0
    while True:
        S = len(seq)
        remaining = cfg.max_new_tokens - generated
        t_d0 = time.perf_counter()
        if drafter is not None:
            # Never draft past the token budget: the verify call always adds one token itself.
            cap = max(0, min(policy.propose(), remaining - 1))
            prop = kept_law(policy, drafter.draft(seq, cap, keep_for(policy), sc, gen))
            sync(target)
        else:
            cap = 0
            prop = Proposal.empty(target.vocab_size, stop_reason="none")
        t_v0 = time.perf_counter()
        logits = target.score_paths(seq[-1], prop.tokens)
        t_r0 = time.perf_counter()
        p_list = [probs_from_logits(x, sc) for x in logits]
        n_u = uniforms_needed(cfg.verifier, [len(b) for b in prop.tokens])
        u = torch.rand(n_u, generator=gen, dtype=torch.float64)
        if multi:
            res = verify(prop.tokens, prop.q, p_list, u)
            chosen = res.chosen
        else:
            res = verify(prop.tokens[0], prop.q[0], p_list[0], u)
            chosen = 0
        t_rule = (time.perf_counter() - t_r0) * 1e3
        target.commit(S + res.accepted, seq[-1], prop.tokens, chosen, res.accepted)
        sync(target)
        t_v1 = time.perf_counter()
        # After t_v1: the shadows' rule time is reported apart and never counted in the step's timings.
        shadow = (shadow_verify(shadows, prop.tokens, prop.q, p_list, shadow_gen, eos,
                                remaining) if shadows else None)
        if drafter is not None:
            drafter.commit(S + res.accepted, chosen)
            drafter.observe(target)
            policy.update(res, len(prop.tokens[chosen]))
        out, finished = _emitted(res.tokens, eos, remaining)
        seq.extend(out)
        generated += len(out)
        drafts = prop.tokens[chosen]
        p_shown = _p_shown(logits[chosen], drafts, res, sc)
        fields = policy.step_fields() if drafter is not None else {}
        fields.update(prop.fields)
        yield StepRecord(
            request_id=request_id, step=step, context_len=S, window_cap=cap,
            draft_tokens=tuple(drafts), q_draft=tuple(prop.q_shown[chosen]), p_target=p_shown,
            accept_probs=res.accept_probs, draft_entropy=tuple(prop.entropy[chosen]), accepted=res.accepted,
            emitted_tokens=tuple(out),
            correction=None if res.bonus else res.tokens[-1],
            bonus=res.tokens[-1] if res.bonus else None,
            stop_reason=prop.stop_reason, t_draft_ms=(t_v0 - t_d0) * 1e3, t_verify_ms=(t_v1 - t_v0) * 1e3,
            t_prefill_ms=t_prefill if step == 0 else 0.0, finished=finished, policy_fields=fields,
            all_drafts=tuple(tuple(b) for b in prop.tokens) if prop.k > 1 else None, chosen=chosen,
            decisions=res.decisions, t_rule_ms=t_rule, shadow=shadow,
        )
        step += 1
        if finished:
            return


def _drafter_for(target, draft, policy: WindowPolicy | None, sc: SamplingConfig):
    """(drafter or None, the target it verifies against): `draft` as a drafter, refused in one line when it
    lacks a policy, its vocabulary differs from the target's, or the policy's needs refuse it (the rules
    engine.spec.RunSpec.check states before any load, checked again here for direct callers)."""
    drafter = as_drafter(draft)
    if drafter is None:
        return None, target
    if policy is None:
        raise ValueError("a draft model needs a window policy")
    if drafter.vocab_size != target.vocab_size:
        raise ValueError(f"draft vocabulary ({drafter.vocab_size}) differs from the target's ({target.vocab_size})")
    errors = policy.needs().refusals(policy.spec, sc.greedy, drafter.caps.hidden, drafter.name)
    if errors:
        raise ValueError(errors[0])
    return drafter, drafter.verify_target(target)  # a block drafter reads the target's layer features


def _start(target, drafter, policy: WindowPolicy | None, seq: list[int]) -> float:
    """A request's start: the target reset and prefilled with all but the last prompt token, the drafter and
    the policy reset; the prefill's ms (device-synchronised)."""
    t0 = time.perf_counter()
    target.reset()
    if len(seq) > 1:
        prefill(target, seq[:-1])
    if drafter is not None:
        drafter.reset(seq)
        policy.reset()
    sync(target)
    return (time.perf_counter() - t0) * 1e3


def _emitted(tokens, eos: set[int], remaining: int) -> tuple[list[int], str | None]:
    """The tokens a step emits (cut after the first EOS, and at the token budget) and why the request
    finished with them (None: it goes on)."""
    out, finished = list(tokens), None
    for i, t in enumerate(out):
        if t in eos:
            out, finished = out[: i + 1], "eos"
            break
    if len(out) >= remaining:
        out = out[:remaining]
        finished = finished or "max_new_tokens"
    return out, finished


def _p_shown(logits: torch.Tensor, drafts: list[int], res, sc: SamplingConfig) -> tuple[float, ...]:
    """The target probability a step record shows per drafted token: p is one-hot under greedy, so there the
    target's softmax probability of each drafted token; else the verifier's p of it."""
    if sc.greedy and drafts:
        soft = logits[: len(drafts)].softmax(-1)
        return tuple(soft[torch.arange(len(drafts)), torch.tensor(drafts)].tolist())
    return res.p_draft
