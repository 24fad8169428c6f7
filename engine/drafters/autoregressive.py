"""The autoregressive drafter: a draft LM drafting one token per forward until the cap or keep() says stop.

Per step, with S = len(seq) and the draft cache holding a prefix x[:len] of the sequence:

    forward 1     feeds x[len:] (the tokens verified since the last step — the whole prompt on a request's
                  first drafting step: the prefill is lazy, so a request whose policy never drafts (the
                  cost-aware window at K = 0) never pays the draft's prefill), drafts d_1 ~ q_1; all but
                  the last of those tokens go through `prefill` (no logits: a catch-up of n tokens would
                  otherwise pay the head n times) when there are more than ONE_FORWARD of them; a short
                  catch-up (after a fully accepted step: the last draft and the bonus token) is one forward
                  whose head rows are nearly free, as a forward of a few rows reads each weight once
    forward i>1   feeds d_{i−1}, drafts d_i ~ q_i
    after d_i     keep(DraftInfo(i, d_i, q_shown, H, hidden, q_max)) — False stops; the policy may then
                  drop the last `keep.dropped` drafts unverified (they stay in the draft cache until
                  commit() crops it to the verified prefix)

stop_reason: "cap" when the cap was drafted, "policy" when keep() stopped it earlier or dropped drafts.
"""

from __future__ import annotations

import torch

from engine.core.lm import prefill
from engine.core.sampling import SamplingConfig, draw_token
from engine.drafters.base import DrafterBase, Keep, Proposal
from engine.policies.base import DraftInfo


ONE_FORWARD = 8  # catch-ups of up to this many tokens run as one forward; why: a second forward of the 0.5B
# draft costs ~40 ms on a 2-core CPU, the head over 8 extra rows a few ms (docs/log/2026-12-05-dense-kernel.md)


class AutoregressiveDrafter(DrafterBase):
    """A draft LM (any `engine.core.lm` LM) as a drafter."""

    def __init__(self, lm) -> None:
        self.lm = lm
        self.vocab_size = lm.vocab_size
        self.device = getattr(lm, "device", None)
        self.name = getattr(lm, "name", "draft")

    def reset(self, prompt_ids: list[int]) -> None:
        self.lm.reset()
        if hasattr(self.lm, "add_request_tokens"):
            self.lm.add_request_tokens(prompt_ids)

    def draft(self, seq: list[int], cap: int, keep: Keep, sc: SamplingConfig, gen: torch.Generator) -> Proposal:
        drafts: list[int] = []
        q_rows: list[torch.Tensor] = []
        shown: list[float] = []
        ents: list[float] = []
        stop = "cap"
        while len(drafts) < cap:
            if not drafts:
                behind = seq[self.lm.length:]
                if len(behind) > ONE_FORWARD:
                    prefill(self.lm, behind[:-1])
                    logits = self.lm.extend(behind[-1:])
                else:  # the usual catch-up after a verify (last draft + bonus): one forward, not two
                    logits = self.lm.extend(behind)
            else:
                logits = self.lm.extend([drafts[-1]])
            d = draw_token(logits[-1], sc, gen)
            drafts.append(d.token)
            q_rows.append(d.q)
            shown.append(d.shown)
            ents.append(d.entropy)
            hidden = self.lm.last_hidden[-1] if keep.want_hidden and self.lm.last_hidden is not None else None
            if not keep(DraftInfo(len(drafts), d.token, d.shown, d.entropy, hidden, d.q_max)):
                drop = keep.dropped
                if len(drafts) < cap or drop:
                    stop = "policy"
                if drop:  # never verified: the draft cache keeps them until commit() crops it
                    del drafts[-drop:], q_rows[-drop:], shown[-drop:], ents[-drop:]
                break
        q_mat = torch.stack(q_rows) if q_rows else torch.zeros(0, self.vocab_size)
        return Proposal([drafts], [q_mat], [shown], [ents], stop, gated=True)

    def commit(self, keep_len: int, chosen: int = 0) -> None:
        self.lm.crop(min(self.lm.length, keep_len))

    def observe(self, target) -> None:
        pass


def as_drafter(draft):
    """An LM becomes an AutoregressiveDrafter; anything with `draft` is already a drafter."""
    if draft is None or hasattr(draft, "draft"):
        return draft
    return AutoregressiveDrafter(draft)
