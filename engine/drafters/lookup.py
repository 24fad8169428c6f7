"""Prompt lookup: copy what followed an earlier occurrence of the context's last n-gram.

HF transformers' `PromptLookupCandidateGenerator` (generate(prompt_lookup_num_tokens=…)), which this
reproduces token for token. With x = x_1..x_L the sequence so far (prompt + verified output),
N = `max_ngram` (HF `max_matching_ngram_size`, default 2) and γ = `num_tokens` (HF
`prompt_lookup_num_tokens`):

    for n = min(N, L−1) … 1:
        g = x_{L−n+1..L}                                  the context's last n-gram
        for i = 1 … L−n+1 (left to right):                every window equal to g
            if x_{i..i+n−1} = g and i+n ≤ L:              something follows it
                return x_{i+n .. min(i+n+γ−1, L)}         at most γ tokens, may overlap g itself
    return ∅                                              no match: an autoregressive step

HF takes the *earliest* match (its code carries a TODO about preferring longer continuations); the
window at i = L−n+1 is g itself and has nothing after it, so it never wins. `pick=1` takes the most
recent earlier occurrence instead (a recency bias that helps when the output edits the prompt).

Not reproduced: HF's logits-processor screening of candidates (our verifier applies top-k/top-p to p,
and a one-hot q is lossless whatever it proposes) and its cut at EOS (the decode loop truncates the
output at EOS, so a drafted EOS only costs verify width). The step's trace fields say where the copy
came from: `span` = [start, end) of the copied tokens in x (0-based, end exclusive: x[start:end] is
the draft), `match` = [i, i+n) the matched n-gram occurrence, `match_len` = n, `source` = prompt |
output. Cost: O(L·N) comparisons per step, no state between steps.
"""

from __future__ import annotations

from typing import Any

from engine.drafters.copier import CopyDrafter


def lookup(seq: list[int], num_tokens: int, max_ngram: int, pick_recent: bool = False
           ) -> tuple[int, int, int] | None:
    """(match start i, n, continuation end) of the winning n-gram match, or None; 0-based, see module doc."""
    L = len(seq)
    for n in range(min(max_ngram, L - 1), 0, -1):
        g = seq[L - n:]
        # Windows whose continuation is non-empty start at i ≤ L−n−1; HF scans them left to right.
        order = range(L - n - 1, -1, -1) if pick_recent else range(0, L - n)
        first = g[0]
        for i in order:
            if seq[i] == first and seq[i:i + n] == g:
                start = i + n
                return i, n, min(start + num_tokens, L)
    return None


class LookupDrafter(CopyDrafter):
    """n-gram prompt lookup (HF semantics); `num_tokens` also caps the window the policy asks for."""

    name = "lookup"

    def __init__(self, vocab_size: int, num_tokens: int = 10, max_ngram: int = 2, pick_recent: int = 0) -> None:
        # HF's defaults: max_matching_ngram_size = 2; prompt_lookup_num_tokens has none (10 in its docs).
        super().__init__(vocab_size, num_tokens)
        if not isinstance(max_ngram, int) or isinstance(max_ngram, bool) or not 1 <= max_ngram <= 64:
            raise ValueError(f"lookup ngram must be an integer in [1, 64], got {max_ngram!r}")
        if pick_recent not in (0, 1):
            raise ValueError(f"lookup pick must be 0 (earliest match, HF) or 1 (most recent), got {pick_recent!r}")
        self.num_tokens = num_tokens
        self.max_ngram = max_ngram
        self.pick_recent = int(pick_recent)
        self.name = self.spec  # what trace headers record as the draft

    @property
    def spec(self) -> str:
        return f"lookup:n={self.num_tokens},ngram={self.max_ngram}" + (",pick=1" if self.pick_recent else "")

    def candidates(self, seq: list[int], limit: int) -> tuple[list[int], list[float], dict[str, Any]]:
        hit = lookup(seq, limit, self.max_ngram, bool(self.pick_recent))
        if hit is None:
            return [], [], {"source": "none", "match_len": 0}
        i, n, end = hit
        toks = seq[i + n:end]
        return toks, [1.0] * len(toks), {"source": self.source_of(i + n), "span": [i + n, end],
                                         "match": [i, i + n], "match_len": n}
