"""Suffix drafting: the most frequent continuation of the longest matching context suffix.

SuffixDecoding (Oliaro et al., 2024; the `suffix` method of vLLM / Arctic Inference), on a depth-
bounded suffix trie kept incrementally per request.

Structure. For the request's sequence x_1..x_t (prompt + verified output) the trie holds every
substring of length ≤ D (`depth`) as a root path; node v (string s_v) carries
    c(v)    = number of occurrences of s_v in x
    last(v) = end position of the most recent one.
Appending x_{t+1} extends the ≤ D−1 "active" nodes (the suffixes of x of length < D) plus the root
by one edge each: at most D node visits per token, whatever t is — the stated bound, checked with a
counter in the tests (`SuffixTrie.ops`).

Match. The active nodes are exactly the context suffixes, so the match is the longest suffix s with
a child (an earlier occurrence that something followed: the current occurrence has not been
extended yet), found in ≤ D visits. Its length is `match_len`.

Draft. From the matched node walk greedily to the child u maximising (c(u), last(u)) — the most
frequent continuation, the most recent on ties — with the empirical step probability
    π(u | v) = c(u) / Σ_{u' child of v} c(u')
and the path score Π π (SuffixDecoding's estimate that the whole path is accepted). Drafting stops
at the cap, when the score would fall below `min_prob` (their `min_token_prob`, 0.1), or when no
continuation exists. When the walk reaches depth D it re-anchors on the last ⌊D/2⌋ tokens of
(context + draft) so long copies are not cut at the depth bound.

Corpus (`corpus=1`): a second trie over earlier requests' full sequences (this drafter instance's
history); the longer of the two matches wins, ties go to the request itself. Matching the corpus
costs ≤ D² visits per step (no active list for a foreign text).

The draft is deterministic given the context, so q is one-hot and verification stays lossless
(engine.drafters.copier). Trace fields per step: `match_len`, `score` (path score of the
drafted block), `scores` (per token), `source` (prompt | output | corpus), `span` = [start, end)
where x[start:end] equals the leading part of the draft copied verbatim from the most recent
occurrence (omitted for corpus matches), `match` = that occurrence's context [start − match_len, start).
"""

from __future__ import annotations

from typing import Any

from engine.drafters.copier import CopyDrafter


class SuffixTrie:
    """Depth-bounded suffix trie with occurrence counts, appended one token at a time."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.children: list[dict[int, int]] = [{}]
        self.count: list[int] = [0]
        self.last: list[int] = [-1]
        self.node_depth: list[int] = [0]
        self.active: list[int] = []  # nodes of the current suffixes, shortest first (root excluded)
        self.length = 0  # tokens appended since the last `restart`
        self.ops = 0  # node visits, for the incremental-cost tests

    def restart(self) -> None:
        """Start a new text (a new request in a corpus trie): suffixes never span two texts."""
        self.active, self.length = [], 0

    def append(self, tok: int) -> None:
        pos = self.length
        nxt = []
        for v in [0, *self.active]:
            self.ops += 1
            if self.node_depth[v] >= self.depth:
                continue  # a suffix of length D cannot grow: the bound that keeps this O(D)
            u = self.children[v].get(tok)
            if u is None:
                u = len(self.count)
                self.children[v][tok] = u
                self.children.append({})
                self.count.append(0)
                self.last.append(-1)
                self.node_depth.append(self.node_depth[v] + 1)
            self.count[u] += 1
            self.last[u] = pos
            nxt.append(u)
        self.active = nxt
        self.length += 1

    def descend(self, toks: list[int]) -> int | None:
        v = 0
        for t in toks:
            self.ops += 1
            v = self.children[v].get(t)
            if v is None:
                return None
        return v

    def longest_match(self) -> int:
        """Node of the longest current suffix that has a continuation; 0 (root) if none."""
        for v in reversed(self.active):
            self.ops += 1
            if self.children[v]:
                return v
        return 0

    def longest_match_of(self, ctx: list[int]) -> int:
        """The same for a context that is not this trie's own text (corpus tries)."""
        for n in range(min(self.depth - 1, len(ctx)), 0, -1):
            v = self.descend(ctx[len(ctx) - n:])
            if v is not None and self.children[v]:
                return v
        return 0

    def best_child(self, v: int) -> tuple[int, int, float]:
        """(token, node, π) of the most frequent continuation of v; most recent on ties."""
        kids = self.children[v]
        total = 0
        best = None
        for tok, u in kids.items():
            self.ops += 1
            total += self.count[u]
            key = (self.count[u], self.last[u])
            if best is None or key > best[0]:
                best = (key, tok, u)
        return best[1], best[2], best[0][0] / total


class SuffixDrafter(CopyDrafter):
    """SuffixDecoding-style drafter over the request (and optionally earlier requests)."""

    name = "suffix"

    def __init__(self, vocab_size: int, max_tokens: int = 16, depth: int = 32, min_prob: float = 0.1,
                 corpus: int = 0) -> None:
        super().__init__(vocab_size, max_tokens)
        if not isinstance(depth, int) or isinstance(depth, bool) or not 2 <= depth <= 256:
            raise ValueError(f"suffix depth must be an integer in [2, 256], got {depth!r}")
        if not 0.0 <= min_prob <= 1.0:
            raise ValueError(f"suffix p (min path score) must be in [0, 1], got {min_prob!r}")
        if corpus not in (0, 1):
            raise ValueError(f"suffix corpus must be 0 or 1, got {corpus!r}")
        self.depth, self.min_prob, self.corpus_on = depth, float(min_prob), int(corpus)
        self.trie = SuffixTrie(depth)
        self.corpus = SuffixTrie(depth) if corpus else None
        self.seen: list[int] = []
        self.name = self.spec

    @property
    def spec(self) -> str:
        return (f"suffix:n={self.max_tokens},depth={self.depth},p={self.min_prob:g}"
                + (",corpus=1" if self.corpus_on else ""))

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        # The finished request joins the corpus as far as the trie saw it: its last step's emitted
        # tokens never reach a draft() call, so they are missing (≤ γ+1 tokens per request).
        if self.corpus is not None and self.seen:
            self.corpus.restart()
            for t in self.seen:
                self.corpus.append(t)
        self.trie = SuffixTrie(self.depth)
        self.seen = []
        self.sync(prompt_ids)

    def sync(self, seq: list[int]) -> None:
        """Insert the verified tokens the trie has not seen (the decode loop only ever appends)."""
        for t in seq[len(self.seen):]:
            self.trie.append(t)
            self.seen.append(t)

    def candidates(self, seq: list[int], limit: int) -> tuple[list[int], list[float], dict[str, Any]]:
        self.sync(seq)
        trie, v = self.trie, self.trie.longest_match()
        L = trie.node_depth[v]
        source = None
        if self.corpus is not None:
            cv = self.corpus.longest_match_of(seq)
            if self.corpus.node_depth[cv] > L:
                trie, v, L, source = self.corpus, cv, self.corpus.node_depth[cv], "corpus"
        if L == 0:
            return [], [], {"source": "none", "match_len": 0}
        toks: list[int] = []
        scores: list[float] = []
        score, start = 1.0, None
        while len(toks) < limit:
            if not trie.children[v]:
                if trie.node_depth[v] < self.depth:
                    break  # nothing ever followed this context
                # Depth bound reached mid-copy: continue from the last ⌊D/2⌋ tokens.
                h = self.depth // 2
                w = trie.descend((seq[-h:] + toks)[-h:])  # slice first: no copy of the whole context
                if w is None or not trie.children[w]:
                    break
                v = w
            tok, u, pi = trie.best_child(v)
            if score * pi < self.min_prob:
                break
            score *= pi
            if start is None:
                start = trie.last[u]
            toks.append(tok)
            scores.append(round(score, 6))
            v = u
        fields: dict[str, Any] = {"source": source or "none", "match_len": L,
                                  "score": scores[-1] if scores else 0.0, "scores": scores}
        if toks and source is None:
            k = 0
            while k < len(toks) and start + k < len(seq) and seq[start + k] == toks[k]:
                k += 1
            fields.update(source=self.source_of(start), span=[start, start + k], match=[start - L, start])
        return toks, scores, fields
