"""The drafter protocol, its result type `Proposal` and the `Keep` callback decode hands a drafter
(`as_drafter`, which wraps a plain LM, is in engine.drafters.autoregressive; every model drafter draws
its tokens with the one `engine.core.sampling.draw_token`).

A drafter proposes a step's draft block(s); `engine.decode.decode` drives it:

    reset(prompt_ids)                    new request (after the target's prefill)
    draft(seq, cap, keep, sc, gen)       → Proposal: K ≥ 1 blocks of ≤ cap tokens and their q rows.
                                         `keep(info)` is the window policy's verdict after each drafted
                                         token (False: stop drafting); the drafter never sees the policy object
    commit(keep_len, chosen)             after verification: the sequence now has keep_len tokens and
                                         block `chosen` was verified (drop any cached draft past that)
    observe(target)                      read the target's state after verification (block drafters
                                         condition on its hidden features); a no-op for most
    verify_target(target)                the LM to verify with (the target itself; block drafter: its
                                         feature view of it)
    prompt_tokens(n)                     prompt tokens it reads before its first draft (n; fewer through a
                                         draft context window)
    caps: DrafterCaps                    what it can give a policy (draft hidden states)

`DrafterBase` gives the defaults (commit / observe no-ops, verify with the target, the whole prompt read,
hidden states);
every drafter in this package derives from it, so `decode` calls declared methods only.

Names: a *policy*'s `propose()` says how many tokens to draft (an int); a *drafter*'s `draft()` drafts
them (a Proposal). Drafters: AutoregressiveDrafter (engine.drafters.autoregressive, one token per
draft forward), MultiDrafter (K i.i.d. blocks), BlockDrafter (one forward per block), PhraseDrafter,
and the model-free LookupDrafter / SuffixDrafter. `engine.drafters.make_drafter` builds any of them
from a CLI spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

import torch

from engine.policies.base import DraftInfo


@dataclass
class Proposal:
    """K draft blocks for one step. K = 1 for ordinary speculative decoding.

    tokens[k] = drafted ids of block k; q[k] = processed draft distributions, shape [len(tokens[k]), V];
    q_shown / entropy: what traces and policies see per token (greedy runs: softmax confidence).
    `gated`: the policy's keep() chose which drafts to keep (autoregressive, phrase and copy drafters),
    so `decode` verifies the kept rows against the policy's `kept_proposal` law.
    """

    tokens: list[list[int]]
    q: list[torch.Tensor]
    q_shown: list[list[float]]
    entropy: list[list[float]]
    stop_reason: str = "cap"
    fields: dict[str, Any] = field(default_factory=dict)  # drafter-specific values for the trace
    gated: bool = False

    @property
    def k(self) -> int:
        return len(self.tokens)

    @classmethod
    def empty(cls, vocab_size: int, k: int = 1, stop_reason: str = "cap", **fields: Any) -> "Proposal":
        """K empty blocks: a step that verifies no draft (an autoregressive step)."""
        return cls([[] for _ in range(k)], [torch.zeros(0, vocab_size)] * k, [[] for _ in range(k)],
                   [[] for _ in range(k)], stop_reason, dict(fields))


class Keep:
    """The window policy as a drafter sees it: built by `decode` from the policy, plain values only.

        keep(info)               draft on after this drawn token? On False, `dropped` is how many
                                 trailing drafts the policy discards unverified (its drop_on_stop)
        keep(info, drawn=False)  the same for a token fixed by the context (copy and phrase drafts,
                                 q = δ): such a token is never dropped by value, so no drop is asked
        keep.block(infos)        (kept, fields) for a run of tokens the drafter scored itself (phrases):
                                 the policy's keep_block — per token by default, PACER's block rule
        want_hidden              put the draft's hidden state in DraftInfo (PACER reads it)
        value_blind              the policy's drops never read the dropped token's value
    """

    def __init__(self, verdict: Callable[[DraftInfo], bool], drop: Callable[[], int] = lambda: 0,
                 want_hidden: bool = False, value_blind: bool = True,
                 block: Callable[[list[DraftInfo]], tuple[int, dict[str, Any]]] | None = None) -> None:
        self._verdict, self._drop, self._block = verdict, drop, block
        self.want_hidden, self.value_blind = want_hidden, value_blind
        self.dropped = 0

    def __call__(self, info: DraftInfo, drawn: bool = True) -> bool:
        if self._verdict(info):
            return True
        if drawn:
            self.dropped = self._drop()
        return False

    def block(self, infos: list[DraftInfo]) -> tuple[int, dict[str, Any]]:
        if self._block is not None:
            return self._block(infos)
        for i, info in enumerate(infos):  # per token: the default of a window policy's keep_block
            if not self(info, drawn=False):
                return i + 1, {"stop": "policy"}
        return len(infos), {}


KEEP_ALL = Keep(lambda info: True)  # draft to the cap (tests, probes)


@dataclass(frozen=True)
class DrafterCaps:
    """What a drafter can give a window policy (read by decode and engine.spec before a run)."""

    hidden: bool = True  # draft hidden states in DraftInfo (model drafters); False: copy and block drafters


@runtime_checkable
class Drafter(Protocol):
    """The methods `engine.decode.decode` calls on a drafter (see the module doc)."""

    vocab_size: int
    name: str
    caps: DrafterCaps

    def reset(self, prompt_ids: list[int]) -> None: ...
    def draft(self, seq: list[int], cap: int, keep: Keep, sc: Any, gen: torch.Generator) -> Proposal: ...
    def commit(self, keep_len: int, chosen: int) -> None: ...
    def observe(self, target: Any) -> None: ...
    def verify_target(self, target: Any) -> Any: ...
    def prompt_tokens(self, prompt_len: int) -> int: ...


class DrafterBase:
    """Defaults of the Drafter protocol: nothing to commit or observe, verify with the target itself."""

    caps = DrafterCaps()
    name = "draft"  # what refusals and trace headers call it

    def commit(self, keep_len: int, chosen: int) -> None:
        pass

    def observe(self, target: Any) -> None:
        pass

    def verify_target(self, target: Any) -> Any:
        return target

    def prompt_tokens(self, prompt_len: int) -> int:
        """Prompt tokens the drafter runs over before its first draft (a cost-aware window's first catch-up):
        the whole prompt, unless it reads less (a draft model through a context window)."""
        return prompt_len
