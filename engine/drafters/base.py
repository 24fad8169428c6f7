"""The drafter protocol's data type and the autoregressive (one token per forward) drafter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from engine.policies.base import DraftInfo, WindowPolicy
from engine.core.sampling import SamplingConfig, entropy, probs_from_logits, sample_from


@dataclass
class Proposal:
    """K draft blocks for one step. K = 1 for ordinary speculative decoding.

    tokens[k] = drafted ids of block k; q[k] = processed draft distributions, shape [len(tokens[k]), V];
    q_shown / entropy: what traces and policies see per token (greedy runs: softmax confidence).
    """

    tokens: list[list[int]]
    q: list[torch.Tensor]
    q_shown: list[list[float]]
    entropy: list[list[float]]
    stop_reason: str = "cap"
    fields: dict[str, Any] = field(default_factory=dict)  # drafter-specific values for the trace

    @property
    def k(self) -> int:
        return len(self.tokens)


class AutoregressiveDrafter:
    """A draft LM drafting one token per forward until the cap or the policy says stop."""

    def __init__(self, lm) -> None:
        self.lm = lm
        self.vocab_size = lm.vocab_size
        self.device = getattr(lm, "device", None)
        self.name = getattr(lm, "name", "draft")

    def reset(self, prompt_ids: list[int]) -> None:
        self.lm.reset()
        if hasattr(self.lm, "add_request_tokens"):
            self.lm.add_request_tokens(prompt_ids)
        if len(prompt_ids) > 1:
            self.lm.extend(prompt_ids[:-1])

    def propose(self, seq: list[int], cap: int, policy: WindowPolicy, sc: SamplingConfig,
                gen: torch.Generator) -> Proposal:
        drafts: list[int] = []
        q_rows: list[torch.Tensor] = []
        shown: list[float] = []
        ents: list[float] = []
        stop = "cap"
        while len(drafts) < cap:
            logits = self.lm.extend(seq[self.lm.length:] if not drafts else [drafts[-1]])
            q = probs_from_logits(logits[-1], sc)
            # Greedy q is one-hot; policies and traces see the draft's softmax confidence instead.
            soft = q if not sc.greedy else logits[-1].softmax(-1)
            tok = int(q.argmax()) if sc.greedy else sample_from(q, float(torch.rand((), generator=gen)))
            drafts.append(tok)
            q_rows.append(q)
            shown.append(float(soft[tok]))
            ents.append(float(entropy(soft)))
            hidden = self.lm.last_hidden[-1] if policy.needs_hidden and self.lm.last_hidden is not None else None
            q_max = shown[-1] if sc.greedy else float(soft.max())  # greedy: the drafted token is the argmax
            if not policy.keep_drafting(DraftInfo(len(drafts), tok, shown[-1], ents[-1], hidden, q_max)):
                drop = policy.drop_on_stop()
                if len(drafts) < cap or drop:
                    stop = "policy"
                if drop:  # never verified: the draft cache keeps them until commit() crops it
                    del drafts[-drop:], q_rows[-drop:], shown[-drop:], ents[-drop:]
                break
        # Rules that drop drafts by value verify the kept ones against the law they were drawn from.
        q_rows = [policy.kept_proposal(q) for q in q_rows]
        q_mat = torch.stack(q_rows) if q_rows else torch.zeros(0, self.vocab_size)
        return Proposal([drafts], [q_mat], [shown], [ents], stop)

    def commit(self, keep: int, chosen: int = 0) -> None:
        self.lm.crop(min(self.lm.length, keep))

    def observe(self, target) -> None:
        pass


def as_drafter(draft):
    """An LM becomes an AutoregressiveDrafter; anything with `propose` is already a drafter."""
    if draft is None or hasattr(draft, "propose"):
        return draft
    return AutoregressiveDrafter(draft)
