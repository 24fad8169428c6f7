"""The hindsight oracle window, run for real: draft exactly the tokens the target will accept.

For greedy decoding the whole future is computable in advance. Let y = the target's greedy
continuation of the prompt (the autoregressive output), and ŷ_k = the draft's greedy prediction at
position k given the prompt and y_{<k} (teacher-forced along y). A step that starts after k
generated tokens accepts exactly the run of agreements

    n_k = max { n : ŷ_j = y_j for j = k .. k+n−1 }        (capped by max_window)

so the oracle proposes γ = n_k. Nothing drafted is rejected, and a step with n_k = 0 is a plain
autoregressive step that never calls the draft (the draft catches up on the skipped tokens in one
forward at its next step, and that forward is timed like every other). This is the "exact
hindsight" window of the PACER paper's oracle analysis, measured on the wall clock instead of
simulated; every rule that has to draft a token before judging it pays at least one draft forward
per step that the oracle does not.

Under sampling the accepted count depends on the draft's samples and the verifier's uniforms, whose
stream depends on the window itself, so the oracle exists only in the offline replay
(engine.offline.replay, `oracle:a`); `HindsightOracle` refuses T > 0.

The look-ahead (y, ŷ) is engine.hindsight.hindsight — the same target run and teacher-forced
draft pass a reference run makes, one token per forward. It is the oracle's hindsight, not part of
its decoding: engine.run.policy_for computes it before the request's clock starts and hands it over in
the RequestContext (this floor imports nothing from the decode loop above it).
"""

from __future__ import annotations

from typing import Any

from engine.policies.base import DraftInfo, Needs, RequestContext, WindowPolicy


class HindsightOracle(WindowPolicy):
    """γ = the number of drafts the target will accept (see module doc); greedy decoding only.

    Registered as `oracle` (`oracle:max=8`): the parsed policy holds no look-ahead and names the rule;
    `for_request` returns the primed oracle of one prompt, so every tool builds it the same way."""

    name = "oracle"

    def __init__(self, reference: list[int] | None = None, predictions: list[int] | None = None,
                 max_window: int = 16) -> None:
        super().__init__(max_window)
        if (reference is None) != (predictions is None):
            raise ValueError("oracle: give both the reference tokens and the draft predictions, or neither")
        if reference is not None and len(reference) != len(predictions):
            raise ValueError(f"oracle: {len(reference)} reference tokens but {len(predictions)} draft predictions")
        self.primed = reference is not None
        self.ref, self.pred = list(reference or []), list(predictions or [])
        self.reset()

    def needs(self) -> Needs:
        return Needs(greedy_only=True, lookahead=True)

    def for_request(self, ctx: RequestContext) -> "HindsightOracle":
        """The oracle of one prompt, primed with the look-ahead engine.run.policy_for computed for it
        (before the request's clock starts)."""
        if ctx.lookahead is None:
            raise ValueError("oracle: no look-ahead for this request (build it with engine.run.policy_for)")
        return HindsightOracle(*ctx.lookahead, max_window=self.max_window)

    @property
    def params(self) -> dict[str, Any]:
        return {"max": self.max_window}

    def reset(self) -> None:
        super().reset()
        self.pos = 0  # generated tokens so far

    def propose(self) -> int:
        if not self.primed:
            raise ValueError("the oracle needs a prompt's look-ahead: decode with policy.for_request(...)")
        n = 0
        while (n < self.max_window and self.pos + n < len(self.ref)
               and self.pred[self.pos + n] == self.ref[self.pos + n]):
            n += 1
        self._fields["hindsight"] = n
        return n

    def keep_drafting(self, info: DraftInfo) -> bool:
        return True  # the cap already is the answer

    def update(self, result: Any, drafted: int) -> None:
        self.pos += result.accepted + 1
