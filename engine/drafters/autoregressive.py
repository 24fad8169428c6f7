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

A context window (`DraftContext(window=W, sink=S)`, StreamingLLM's sink + recent window, as long-context drafts
in TriForce and MagicDec use it): the draft reads only the prompt's first S and last W tokens, so on a prompt of
n > S + W tokens its lazy prefill costs S + W tokens instead of n. Its cache then holds
view(x) = x[:S] + x[S+skip:] with skip = n − S − W, at its own contiguous positions; every later token is
read as usual. The target still verifies every draft, so decoding stays exact; only acceptance can change
(a summary or a RAG answer copies from the part of the prompt the draft no longer reads).
Example: n = 900, S = 64, W = 192: skip = 644, the draft prefills 256 tokens, and after the step that
leaves x with 905 tokens its cache holds view(x) = x[:64] + x[708:905], 261 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.lm import prefill
from engine.core.sampling import SamplingConfig, draw_token
from engine.drafters.base import DrafterBase, Keep, Proposal
from engine.policies.base import DraftInfo


ONE_FORWARD = 8  # catch-ups of up to this many tokens run as one forward; why: a second forward of the 0.5B
# draft costs ~40 ms on a 2-core CPU, the head over 8 extra rows a few ms (docs/log/2026-12-05-dense-kernel.md)


@dataclass(frozen=True)
class DraftContext:
    """What of the prompt the draft model reads (see the module doc): all of it (window 0), or its first
    `sink` and last `window` tokens."""

    window: int = 0  # 0: the whole prompt; why: the draft's best acceptance, its prefill's cost is the price
    # why 64, not StreamingLLM's 4 attention sinks: a chat prompt's head (the template's system turn, then the user's
    # instruction, "Summarize:") tells the draft what to answer; with 4 the 0.5B Qwen draft's acceptance on two
    # Spec-Bench summaries fell 0.77 → 0.12–0.16, with 64 to 0.29 (docs/log/2026-12-06-draft-context-window.md)
    sink: int = 64

    def __post_init__(self) -> None:
        if self.window < 0 or self.sink < 0:
            raise ValueError(f"draft context: window and sink must be >= 0, got window={self.window} sink={self.sink}")

    def skipped(self, prompt_len: int) -> int:
        """Prompt tokens the draft never reads: n − S − W when the prompt is longer than S + W, else 0."""
        return max(0, prompt_len - self.sink - self.window) if self.window else 0

    def read(self, prompt_len: int) -> int:
        """Prompt tokens the draft reads (its lazy prefill and first draft forward): n − skipped."""
        return prompt_len - self.skipped(prompt_len)

    @classmethod
    def parse(cls, spec: str) -> "DraftContext":
        """'ctx:256' or 'ctx:256,sink=8' → DraftContext(256, 8); a bad spec is refused in one line."""
        name, _, rest = spec.strip().partition(":")
        parts = [x.strip() for x in rest.split(",") if x.strip()]
        try:
            if name != "ctx" or not parts or "=" in parts[0]:
                raise ValueError
            kw = dict(p.split("=", 1) for p in parts[1:])
            if set(kw) - {"sink"}:
                raise ValueError
            out = cls(int(parts[0]), int(kw.get("sink", cls.sink)))
        except ValueError:
            raise ValueError(f"bad draft context {spec!r}: expected ctx:WINDOW[,sink=S] with integers >= 0") from None
        if out.window == 0:
            raise ValueError(f"draft context {spec!r}: a window of 0 reads the whole prompt; leave ctx out instead")
        return out


def is_context(spec: str | None) -> bool:
    return bool(spec) and spec.strip().partition(":")[0] == "ctx"


class AutoregressiveDrafter(DrafterBase):
    """A draft LM (any `engine.core.lm` LM) as a drafter; `context`: what of the prompt it reads."""

    def __init__(self, lm, context: DraftContext = DraftContext()) -> None:
        self.lm = lm
        self.context = context
        self.vocab_size = lm.vocab_size
        self.device = getattr(lm, "device", None)
        self.dtype = getattr(lm, "dtype", None)
        self.name = getattr(lm, "name", "draft")
        self.skip = 0  # prompt tokens this request's draft cache skips (DraftContext.skipped)

    def prompt_tokens(self, prompt_len: int) -> int:
        return self.context.read(prompt_len)  # its lazy prefill: the window's part of the prompt

    def reset(self, prompt_ids: list[int]) -> None:
        self.lm.reset()
        self.skip = self.context.skipped(len(prompt_ids))
        if hasattr(self.lm, "add_request_tokens"):
            self.lm.add_request_tokens(prompt_ids)

    def _behind(self, seq: list[int]) -> list[int]:
        """view(seq)[len:]: the tokens the draft cache has not read yet."""
        n, s = self.lm.length, self.context.sink
        if not self.skip:
            return seq[n:]
        if n >= s:
            return seq[n + self.skip:]
        return seq[n:s] + seq[s + self.skip:]

    def draft(self, seq: list[int], cap: int, keep: Keep, sc: SamplingConfig, gen: torch.Generator) -> Proposal:
        drafts: list[int] = []
        q_rows: list[torch.Tensor] = []
        shown: list[float] = []
        ents: list[float] = []
        stop = "cap"
        while len(drafts) < cap:
            if not drafts:
                behind = self._behind(seq)
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
        self.lm.crop(min(self.lm.length, keep_len - self.skip))

    def observe(self, target) -> None:
        pass


def as_drafter(draft):
    """An LM becomes an AutoregressiveDrafter; anything with `draft` is already a drafter."""
    if draft is None or hasattr(draft, "draft"):
        return draft
    return AutoregressiveDrafter(draft)

