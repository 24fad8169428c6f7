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
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from engine.policies import DraftInfo, WindowPolicy
from engine.sampling import SamplingConfig, entropy, probs_from_logits, sample_from
from engine.verify import VERIFIERS


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

    def __post_init__(self) -> None:
        if not 1 <= self.max_new_tokens <= 100_000:
            raise ValueError(f"max_new_tokens must be in [1, 100000], got {self.max_new_tokens}")
        if self.verifier not in VERIFIERS:
            raise ValueError(f"unknown verifier {self.verifier!r}; choose from {', '.join(VERIFIERS)}")


def _sync(lm) -> None:
    if getattr(lm, "device", None) is not None and getattr(lm.device, "type", "cpu") == "cuda":
        torch.cuda.synchronize()


def decode(target, draft, prompt_ids: list[int], policy: WindowPolicy | None,
           cfg: DecodeConfig = DecodeConfig(), eos_ids: tuple[int, ...] = (),
           request_id: int = 0) -> Iterator[StepRecord]:
    """Speculative decoding of one prompt; yields a StepRecord after every target call."""
    if not prompt_ids:
        raise ValueError("empty prompt: need at least one token")
    if draft is not None and policy is None:
        raise ValueError("a draft model needs a window policy")
    if draft is not None and draft.vocab_size != target.vocab_size:
        raise ValueError(f"draft vocabulary ({draft.vocab_size}) differs from the target's ({target.vocab_size})")
    sc = cfg.sampling
    verify = VERIFIERS[cfg.verifier]
    gen = torch.Generator().manual_seed((sc.seed * 1_000_003 + request_id) & 0x7FFFFFFFFFFF)
    eos = set(eos_ids)
    seq = list(prompt_ids)
    t0 = time.perf_counter()
    target.reset()
    if len(seq) > 1:
        target.extend(seq[:-1])
    if draft is not None:
        draft.reset()
        if len(seq) > 1:
            draft.extend(seq[:-1])
        policy.reset()
    _sync(target)
    t_prefill = (time.perf_counter() - t0) * 1e3
    generated, step = 0, 0
    while True:
        S = len(seq)
        remaining = cfg.max_new_tokens - generated
        drafts: list[int] = []
        q_rows: list[torch.Tensor] = []
        ents: list[float] = []
        q_shown: list[float] = []
        cap, stop = 0, "none"
        t_d0 = time.perf_counter()
        if draft is not None:
            # Never draft past the token budget: the verify call always adds one token itself.
            cap = max(0, min(policy.propose(), remaining - 1))
            stop = "cap"
            while len(drafts) < cap:
                logits = draft.extend(seq[draft.length:] if not drafts else [drafts[-1]])
                q = probs_from_logits(logits[-1], sc)
                # Greedy q is one-hot; policies and traces see the draft's softmax confidence instead.
                shown = q if not sc.greedy else logits[-1].softmax(-1)
                tok = int(q.argmax()) if sc.greedy else sample_from(q, float(torch.rand((), generator=gen)))
                drafts.append(tok)
                q_rows.append(q)
                q_shown.append(float(shown[tok]))
                ents.append(float(entropy(shown)))
                hidden = draft.last_hidden[-1] if policy.needs_hidden and draft.last_hidden is not None else None
                info = DraftInfo(len(drafts), tok, q_shown[-1], ents[-1], hidden)
                if not policy.keep_drafting(info) and len(drafts) < cap:
                    stop = "policy"
                    break
            _sync(draft)
        t_v0 = time.perf_counter()
        logits = target.extend([seq[-1]] + drafts)
        p = probs_from_logits(logits, sc)
        u = torch.rand(len(drafts) + 1, generator=gen, dtype=torch.float64)
        q_mat = torch.stack(q_rows) if q_rows else p[:0]
        res = verify(drafts, q_mat, p, u)
        _sync(target)
        t_v1 = time.perf_counter()
        target.crop(S + res.accepted)
        if draft is not None:
            draft.crop(min(draft.length, S + res.accepted))
            policy.update(res, len(drafts))
        out = list(res.tokens)
        finished = None
        for i, t in enumerate(out):
            if t in eos:
                out, finished = out[: i + 1], "eos"
                break
        if len(out) >= remaining:
            out = out[:remaining]
            finished = finished or "max_new_tokens"
        seq.extend(out)
        generated += len(out)
        if sc.greedy and drafts:
            soft = logits[torch.arange(len(drafts))].softmax(-1)
            p_shown = tuple(soft[torch.arange(len(drafts)), torch.tensor(drafts)].tolist())
        else:
            p_shown = res.p_draft
        yield StepRecord(
            request_id=request_id, step=step, context_len=S, window_cap=cap,
            draft_tokens=tuple(drafts), q_draft=tuple(q_shown), p_target=p_shown,
            accept_probs=res.accept_probs, draft_entropy=tuple(ents), accepted=res.accepted,
            emitted_tokens=tuple(out),
            correction=None if res.bonus else res.tokens[-1],
            bonus=res.tokens[-1] if res.bonus else None,
            stop_reason=stop, t_draft_ms=(t_v0 - t_d0) * 1e3, t_verify_ms=(t_v1 - t_v0) * 1e3,
            t_prefill_ms=t_prefill if step == 0 else 0.0, finished=finished,
            policy_fields=policy.step_fields() if draft is not None else {},
        )
        step += 1
        if finished:
            return

