"""Model-free drafters: drafts copied from the request's own context, with no draft forward.

A model-free drafter proposes a deterministic continuation y_1..y_γ of the context x. Its proposal
law is therefore the point mass q_i = δ(y_i): the verifier accepts y_i with probability
min(1, p_i(y_i) / 1) = p_i(y_i) and on rejection samples the residual (p_i − δ(y_i))⁺ / (1 − p_i(y_i)),
which is p_i conditioned on "not y_i". That is exactly speculative sampling with a one-hot q, so the
output law equals the target's (greedy: the argmax chain) — the χ² tests in
tests/unit/drafters/test_modelfree.py check this on the real loop.

The same holds when the window policy cuts the block short: every stop rule here reads only values
fixed by the context (match length, continuation frequency), never a random draw, so the verified
tokens were still proposed with q = δ and no `kept_proposal` correction is needed.

`CopyDrafter` here is the shared plumbing (one-hot q, the keep verdicts, trace fields); the
drafters are engine.drafters.lookup and engine.drafters.suffix, built from CLI specs by
engine.drafters.modelfree.make_model_free.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.core.sampling import SamplingConfig
from engine.drafters.base import DrafterBase, DrafterCaps, Keep, Proposal
from engine.policies.base import DraftInfo


class CopyDrafter(DrafterBase):
    """Shared protocol plumbing; subclasses implement `candidates(seq, limit)`.

    `candidates` returns (tokens, scores, fields): the continuation it would copy (at most `limit`
    tokens), a per-token score in [0, 1] for policies (1.0 where the drafter has no notion of one),
    and the trace fields saying where the copy came from.
    """

    name = "copy"
    # What traces' `draft` header records: there are no weights, so no dtype and no device.
    dtype = "none"
    device = "cpu"
    vocab_subset = None
    last_hidden = None
    caps = DrafterCaps(hidden=False)  # no draft hidden states: a policy that reads them (pacer) is refused

    def __init__(self, vocab_size: int, max_tokens: int) -> None:
        if not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= 64:
            raise ValueError(f"max draft tokens must be an integer in [1, 64], got {max_tokens!r}")
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self.prompt_len = 0

    @property
    def spec(self) -> str:
        return self.name

    def reset(self, prompt_ids: list[int]) -> None:
        self.prompt_len = len(prompt_ids)

    def candidates(self, seq: list[int], limit: int) -> tuple[list[int], list[float], dict[str, Any]]:
        raise NotImplementedError

    def source_of(self, start: int) -> str:
        """'prompt' when the copied tokens start inside the prompt, else 'output' (earlier generation)."""
        return "prompt" if start < self.prompt_len else "output"

    def draft(self, seq: list[int], cap: int, keep: Keep, sc: SamplingConfig, gen: torch.Generator) -> Proposal:
        limit = min(cap, self.max_tokens)
        toks, scores, fields = self.candidates(seq, limit) if limit > 0 else ([], [], {"match_len": 0})
        drafts: list[int] = []
        stop = "cap" if toks else "no_match"
        match_len = int(fields.get("match_len", 0))
        for i, (tok, score) in enumerate(zip(toks, scores)):
            drafts.append(tok)
            # q(y) = 1 and H(q) = 0: the truth about a point-mass proposal. The drafter's own signals
            # travel separately (match_len, score) so confidence rules cannot mistake them for q.
            if not keep(DraftInfo(i + 1, tok, 1.0, 0.0, None, 1.0, match_len=match_len, score=score), drawn=False):
                if i + 1 < len(toks) or len(drafts) < cap:
                    stop = "policy"
                break
        else:
            if toks and len(toks) < limit:
                stop = "match_end"  # the copied continuation ran out before the cap
        # Policies that drop drafts by value (trim=1) would drop a point-mass token; a model-free step
        # never asks (drawn=False: no drop is consulted), which keeps q = δ exact.
        if fields.get("span") is not None:  # the copied run may be longer than what was drafted
            s0, s1 = fields["span"]
            fields["span"] = [s0, min(s1, s0 + len(drafts))]
        if "scores" in fields:
            fields["scores"] = fields["scores"][: len(drafts)]
            fields["score"] = fields["scores"][-1] if drafts else 0.0
        q = torch.zeros(len(drafts), self.vocab_size)
        if drafts:
            q[torch.arange(len(drafts)), torch.tensor(drafts)] = 1.0
        # Nested: Replay plots top-level numeric lists as per-token series, and `span` is not one.
        out = {"drafter": fields}
        if "scores" in fields:
            out["drafter_scores"] = fields.pop("scores")  # per token: plotted next to the policy's
        return Proposal([drafts], [q], [[1.0] * len(drafts)], [[0.0] * len(drafts)], stop, out)

    def commit(self, keep_len: int, chosen: int = 0) -> None:
        pass  # nothing drafted is ever stored: the next draft() reads the verified sequence

    def observe(self, target) -> None:
        pass
