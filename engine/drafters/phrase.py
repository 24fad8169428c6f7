"""Phrase drafting (Ouroboros-style): a draft model's block extended with phrases from a pool.

Ouroboros (Zhao et al., thunlp/Ouroboros) lengthens a draft model's block with n-gram phrases and
verifies the extended block(s) in the same target forward. Here, per step, with x = x_1..x_S the
sequence so far (prompt + verified output), γ the window policy's cap, p the target, q the draft:

    model part   d_1..d_m ~ q(· | x, d_<i), m ≤ min(n, γ)   exactly the AutoregressiveDrafter loop
                                                             (the policy may stop or trim it)
    phrase part  c = x·d_1..d_m;  v = the longest suffix of c (ngram ≤ |suffix| < depth) that the
                 pool saw followed by something; the k most frequent continuations of v (k > 1: with
                 distinct first tokens, backing off to shorter suffixes for more), each walked
                 greedily (most frequent, then most recent child; at a dead end re-anchored on the longest
                 suffix of c·y that was followed, ≥ ngram tokens), give candidates y^j_1..y^j_r,
                 r ≤ min(len, γ − m); path score s_i = Π_{l ≤ i} π(y_l | ·), π = child count / sibling sum
    block j      d_1..d_m y^j_1..y^j_r                       (k = 1: one chain; k > 1: a tree)

The pool (`PhrasePool`) reuses the suffix drafter's `SuffixTrie` (engine.drafters.suffix): one trie
over the verified tokens x (prompt + output, appended incrementally: the target's verified
tokens), and one over harvested phrases — each step's model-drafted tail that the target rejected,
kept with the ⌊depth/2⌋ context tokens before it (Ouroboros's `update_ngram_cache` of the draft's
remaining tokens). The text trie wins ties; the harvest trie is used when its match is longer.

q of the phrase part. Given x, the model tokens and the pool (itself a function of the request's
history), the phrase tokens are fixed: their proposal law is the point mass q_i = δ(y_i), exactly as
for the model-free drafters (engine.drafters.copier). The verifier accepts y_i with probability
p_i(y_i) and otherwise samples p_i conditioned on "not y_i": sampling stays lossless, greedy exact.

Window policies. Model tokens go through the policy's `keep` verdict as usual (hidden states included, so
`pacer` works). Phrase tokens are fed as DraftInfo(index = position within the phrase, q = 1, H = 0,
match_len = |v|, score = s_i): `fixed:γ` fills the window, `matchlen:f,offset=o,p=…` cuts a phrase at
⌊f·|v| + o⌋ tokens or when s_i < p. Every phrase goes through `keep.block` (the policy's keep_block):
per token by default; `pacer` applies its own block rule (engine.policies.pacer.Pacer.keep_block) to
the drafter's signal: blocks of b phrase tokens, mean s over the block vs t (t₀ = the policy's t,
t ← t·ρ after each passing block), the failing block dropped when the policy trims. All phrase stops read only s and |v| (functions of the prefix), never a random
draw, so no `kept_proposal` correction is needed. One exception: after the policy *dropped* a model
token because of its value (confidence trim=1 corrects q by `kept_proposal`), putting a phrase in
its place would change the law of that position, so under sampling no phrase follows such a drop.
PACER's b = 1 trim decides before the token is drawn and keeps its phrases.

k > 1 phrase candidates are k blocks sharing the model prefix; they need a verifier that treats the
branching positions as deterministic (the `onehot-tree` verifier, engine.verify.onehot_tree) and a
target that scores a tree in one forward (engine.core.tree.TreeTarget). The i.i.d. multi-draft verifiers
(rrs, kseq, rbv, kbv) are not lossless for shared-prefix, deterministic branches and are refused.

Trace fields (`policy_fields["drafter"]`): model_tokens, model_stop, phrase_tokens (block 0),
phrase_stop, match_len, score, source (prompt | output | harvest | none), span = [a, b) with
x[a:b] = the leading phrase tokens copied verbatim from x, match = [a − |v|, a); for k > 1 also
`candidates` (one {tokens, source, span, score} per block).

Spec (CLI `--draft`): `phrase:model=DRAFT,n=4,k=1,ngram=2,depth=16,len=8` — see `parse_phrase_spec`.
"""

from __future__ import annotations

from typing import Any

import torch

from engine.core.sampling import SamplingConfig
from engine.drafters.autoregressive import AutoregressiveDrafter
from engine.drafters.base import DrafterBase, Keep, Proposal
from engine.drafters.suffix import SuffixTrie
from engine.policies.base import DraftInfo


class PhrasePool:
    """Verified text + harvested draft phrases, two `SuffixTrie`s; `candidates(ctx, k, limit)`."""

    def __init__(self, depth: int = 16, ngram: int = 2) -> None:
        if not isinstance(depth, int) or isinstance(depth, bool) or not 2 <= depth <= 256:
            raise ValueError(f"phrase depth must be an integer in [2, 256], got {depth!r}")
        if not isinstance(ngram, int) or isinstance(ngram, bool) or not 1 <= ngram < depth:
            raise ValueError(f"phrase ngram (shortest match) must be an integer in [1, depth), got {ngram!r}")
        self.depth, self.ngram = depth, ngram
        self.reset()

    def reset(self) -> None:
        self.text, self.harvest = SuffixTrie(self.depth), SuffixTrie(self.depth)
        self.seen = 0  # tokens of x already in the text trie (the decode loop only appends)
        self.prompt_len = 0

    def sync(self, seq: list[int]) -> None:
        for t in seq[self.seen:]:
            self.text.append(t)
        self.seen = len(seq)

    def add_phrase(self, tokens: list[int]) -> None:
        """A harvested phrase (its leading context included) becomes a text of its own."""
        self.harvest.restart()
        for t in tokens:
            self.harvest.append(t)

    def _walk(self, trie: SuffixTrie, tok: int, u: int, pi: float, ctx: list[int], limit: int
              ) -> tuple[list[int], list[float], int]:
        """Greedy continuation from child (tok, u) of the matched node: (tokens, path scores, start)."""
        toks, scores, score, start, v = [], [], pi, trie.last[u], u
        while True:
            toks.append(tok)
            scores.append(round(score, 6))
            if len(toks) >= limit:
                break
            if not trie.children[v]:
                # Dead end (nothing followed this context, or the depth bound): re-anchor on the
                # longest suffix of context + phrase that was followed by something, if ≥ ngram long.
                w = trie.longest_match_of((ctx[-self.depth:] + toks)[-self.depth:])
                if trie.node_depth[w] < self.ngram:
                    break
                v = w
            tok, v, step = trie.best_child(v)
            score *= step
        return toks, scores, start

    def candidates(self, ctx: list[int], k: int, limit: int) -> list[dict[str, Any]]:
        """Up to k phrases continuing ctx, best first: {tokens, scores, match_len, source, span?, match?}.

        Matched contexts are taken longest first (text trie before harvest trie on ties); each adds its
        continuations, most frequent first, whose first token no earlier candidate starts with — so
        k > 1 backs off to shorter matches for alternatives, as prompt lookup backs off to shorter n-grams."""
        if limit <= 0:
            return []
        nodes = []
        for rank, (name, trie) in enumerate((("text", self.text), ("harvest", self.harvest))):
            for n in range(min(self.depth - 1, len(ctx)), self.ngram - 1, -1):
                v = trie.descend(ctx[len(ctx) - n:])
                if v is not None and trie.children[v]:  # ≤ D² node visits per trie and step
                    nodes.append((-n, rank, name, trie, v))
        out: list[dict[str, Any]] = []
        firsts: set[int] = set()
        for neg_n, _, name, trie, v in sorted(nodes, key=lambda x: x[:2]):
            kids = sorted(trie.children[v].items(), key=lambda tu: (trie.count[tu[1]], trie.last[tu[1]]), reverse=True)
            total = sum(trie.count[u] for _, u in kids)
            for tok, u in kids:
                if len(out) == k:
                    return out
                if tok in firsts:
                    continue
                firsts.add(tok)
                out.append(self._candidate(name, trie, tok, u, trie.count[u] / total, -neg_n, ctx, limit))
        return out

    def _candidate(self, name: str, trie: SuffixTrie, tok: int, u: int, pi: float, n: int, ctx: list[int],
                   limit: int) -> dict[str, Any]:
        toks, scores, start = self._walk(trie, tok, u, pi, ctx, limit)
        c: dict[str, Any] = {"tokens": toks, "scores": scores, "match_len": n, "source": "harvest"}
        if name == "text":
            j = 0  # the verbatim prefix of the copy at its most recent occurrence
            while j < len(toks) and start + j < self.seen and ctx[start + j] == toks[j]:
                j += 1
            c.update(source="prompt" if start < self.prompt_len else "output", span=[start, start + j],
                     match=[start - n, start])
        return c


class PhraseDrafter(DrafterBase):
    """A draft LM's block (≤ n tokens) extended with up to k phrase candidates from a `PhrasePool`."""

    def __init__(self, lm, n: int = 4, k: int = 1, ngram: int = 2, depth: int = 16, max_phrase: int = 8) -> None:
        for key, val, hi in (("n", n, 64), ("k", k, 16), ("len", max_phrase, 64)):
            if not isinstance(val, int) or isinstance(val, bool) or not 1 <= val <= hi:
                raise ValueError(f"phrase {key} must be an integer in [1, {hi}], got {val!r}")
        self.model = AutoregressiveDrafter(lm)
        self.lm, self.n, self.k, self.max_phrase = lm, n, k, max_phrase
        self.pool = PhrasePool(depth, ngram)
        self.vocab_size = lm.vocab_size
        self.device = getattr(lm, "device", None)
        self.dtype = getattr(lm, "dtype", None)
        self.vocab_subset = getattr(lm, "vocab_subset", None)
        self.last_hidden = None
        self.name = f"{getattr(lm, 'name', 'draft')}+{self.spec}"
        self._step: tuple[int, list[int], list[int]] = (0, [], [])  # S, model drafts, x's last tokens

    @property
    def spec(self) -> str:
        return (f"phrase:n={self.n},k={self.k},ngram={self.pool.ngram},depth={self.pool.depth},"
                f"len={self.max_phrase}")

    def reset(self, prompt_ids: list[int]) -> None:
        self.model.reset(prompt_ids)
        self.pool.reset()
        self.pool.prompt_len = len(prompt_ids)
        self.pool.sync(prompt_ids)
        self._step = (len(prompt_ids), [], [])

    def _gate(self, cand: dict[str, Any], keep: Keep) -> tuple[int, dict[str, Any]]:
        """How many of the candidate's tokens the window policy keeps (its keep_block verb, fed the
        drafter's own signal), and what it said."""
        toks, scores, n = cand["tokens"], cand["scores"], cand["match_len"]
        kept, said = keep.block([DraftInfo(i + 1, tok, 1.0, 0.0, None, 1.0, match_len=n, score=s)
                                 for i, (tok, s) in enumerate(zip(toks, scores))])
        return kept, {"stop": "phrase_end", **said}

    def draft(self, seq: list[int], cap: int, keep: Keep, sc: SamplingConfig, gen: torch.Generator) -> Proposal:
        self.pool.sync(seq)
        if min(cap, self.n) > 0:
            mp = self.model.draft(seq, min(cap, self.n), keep, sc, gen)
        else:
            mp = Proposal.empty(self.vocab_size)
        drafts, q_model = mp.tokens[0], mp.q[0]
        self._step = (len(seq), drafts, seq[-self.pool.depth:])
        room = min(cap - len(drafts), self.max_phrase)
        fields: dict[str, Any] = {"model_tokens": len(drafts), "model_stop": mp.stop_reason}
        cands: list[dict[str, Any]] = []
        if room <= 0:
            fields["phrase_stop"] = "no_room"
        elif keep.dropped and not sc.greedy and not keep.value_blind:
            fields["phrase_stop"] = "after_value_drop"  # see the module doc: the law of that position
        else:
            cands = self.pool.candidates(seq + drafts, self.k, room)
            fields["phrase_stop"] = "no_match" if not cands else None
        blocks, seen = [], set()
        for c in cands:
            n_kept, said = self._gate(c, keep)
            c["tokens"], c["scores"] = c["tokens"][:n_kept], c["scores"][:n_kept]
            if c.get("span"):
                c["span"][1] = min(c["span"][1], c["span"][0] + n_kept)
            if not n_kept or tuple(c["tokens"]) in seen:
                continue
            seen.add(tuple(c["tokens"]))
            c["stop"] = said.pop("stop")
            c.update(said)
            blocks.append(c)
        if fields["phrase_stop"] is None:
            fields["phrase_stop"] = blocks[0]["stop"] if blocks else "gated"
        toks, qs, shown, ents = [], [], [], []
        for c in blocks or [{"tokens": []}]:
            y = c["tokens"]
            one_hot = torch.zeros(len(y), self.vocab_size, dtype=q_model.dtype)
            if y:
                one_hot[torch.arange(len(y)), torch.tensor(y)] = 1.0  # q = δ(y_i): deterministic given the prefix
            toks.append(drafts + y)
            qs.append(torch.cat([q_model, one_hot]))
            shown.append(mp.q_shown[0] + [1.0] * len(y))
            ents.append(mp.entropy[0] + [0.0] * len(y))
        lead = blocks[0] if blocks else {"source": "none", "match_len": 0, "scores": []}
        fields.update(phrase_tokens=len(lead.get("tokens", [])), match_len=lead["match_len"],
                      source=lead["source"], score=lead["scores"][-1] if lead["scores"] else 0.0)
        for key in ("span", "match", "blocks"):
            if lead.get(key) and (key != "span" or lead[key][1] > lead[key][0]):
                fields[key] = lead[key]
        if len(blocks) > 1:
            fields["candidates"] = [{"tokens": len(c["tokens"]), "source": c["source"], "span": c.get("span"),
                                     "score": c["scores"][-1]} for c in blocks]
        stop = mp.stop_reason if not blocks else ("phrase" if blocks[0]["stop"] == "phrase_end" else "phrase_policy")
        return Proposal(toks, qs, shown, ents, stop, {"drafter": fields}, gated=True)

    def commit(self, keep_len: int, chosen: int = 0) -> None:
        S, drafts, tail = self._step
        accepted = keep_len - S
        # The draft cache holds x[:S] and model drafts; past the model part (phrases, or a dropped
        # model token) it is not a prefix of the sequence any more.
        self.lm.crop(min(self.lm.length, keep_len, S + len(drafts)))
        if 0 <= accepted < len(drafts):  # harvest the rejected model tail with ⌊depth/2⌋ tokens before it
            self.pool.add_phrase((tail + drafts[:accepted])[-(self.pool.depth // 2):] + drafts[accepted:])

    def observe(self, target) -> None:
        pass


# ---------------------------------------------------------------- CLI spec and construction

PHRASE_KEYS = {"n": "n", "k": "k", "ngram": "ngram", "depth": "depth", "len": "max_phrase"}
# Single-chain rules are lossless for any per-position proposal law; k > 1 needs deterministic branches.
PHRASE_VERIFIERS = ("token", "block", "onehot-tree")


def is_phrase(spec: str | None) -> bool:
    return bool(spec) and spec.strip().partition(":")[0] == "phrase"


def parse_phrase_spec(spec: str) -> tuple[str, dict[str, int]]:
    """'phrase:model=DRAFT,n=4,k=2,ngram=2,depth=16,len=8' → ('DRAFT', {n: 4, k: 2, …})."""
    from engine.drafters.modelfree import _kv

    name, _, rest = spec.strip().partition(":")
    if name != "phrase":
        raise ValueError(f"not a phrase drafter spec: {spec!r}")
    parts = [s.strip() for s in rest.split(",") if s.strip()]
    models = [s[len("model="):] for s in parts if s.startswith("model=")]
    if len(models) != 1 or not models[0]:
        raise ValueError(f"bad draft spec {spec!r}: phrase needs exactly one model=DRAFT (the draft model)")
    kw = _kv(",".join(s for s in parts if not s.startswith("model=")), spec, PHRASE_KEYS)
    return models[0], kw


def phrase_target(target_lm, drafter: PhraseDrafter, verifier: str):
    """The target to decode with: a TreeTarget (one forward for all blocks) when k > 1 on an HF model."""
    if verifier not in PHRASE_VERIFIERS:
        raise ValueError(f"the phrase drafter needs a verifier from {', '.join(PHRASE_VERIFIERS)}, got {verifier!r} "
                         "(the i.i.d. multi-draft rules are not lossless for deterministic branches)")
    if drafter.k > 1 and verifier != "onehot-tree":
        raise ValueError(f"phrase k={drafter.k} proposes a tree of candidates: use --verifier onehot-tree")
    if drafter.k > 1 and hasattr(target_lm, "forward_ids"):
        from engine.core.tree import TreeTarget

        return TreeTarget(target_lm)
    return target_lm


def load_phrase_drafter(spec: str, target, dtype: str = "auto", device: str = "auto", want_hidden: bool = False,
                        verifier: str = "token", weights: str | None = None):
    """`--draft phrase:model=…`: load the draft model next to `target` (an engine.models.load.LoadedModel) and
    return (target LM to decode with, PhraseDrafter). The one call the CLI and the benchmark make."""
    from engine.models.load import check_pair, load_model

    name, kw = parse_phrase_spec(spec)
    if verifier not in PHRASE_VERIFIERS or kw.get("k", 1) > 1 and verifier != "onehot-tree":
        raise ValueError(f"--draft {spec}: verifier {verifier!r} cannot verify it; use "
                         + ("onehot-tree (k > 1)" if kw.get("k", 1) > 1 else ", ".join(PHRASE_VERIFIERS)))
    draft = load_model(name, dtype, device, role="draft", target=target, want_hidden=want_hidden, weights=weights)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    drafter = PhraseDrafter(draft.lm, **kw)
    return phrase_target(target.lm, drafter, verifier), drafter
