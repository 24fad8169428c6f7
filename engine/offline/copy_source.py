"""Model-free drafters replayed exactly from one greedy autoregressive run: the third step source.

Notation as in engine.offline.replay: y = the target's greedy output (N tokens), M = max_new_tokens,
x[:j] = prompt + y_<j, A(j) the accepted run from position j. Under greedy decoding y does not
depend on the window policy (every step emits the target's own argmax chain), and a copy drafter
(engine.drafters.lookup / suffix) proposes at position j a block that depends only on x[:j]:

    b_j     = drafter.draft(x[:j], cap = its max_tokens)     the block it would propose, in full
    A(j)    = |common prefix of b_j and y[j:]|
    limit_j = min(|b_j|, M − j − 1)                            decode's cap, and the block runs out
    signals = the DraftInfo b_j's drafts are shown with (q_token = 1, entropy 0, match_len, score)

A policy's cap γ only cuts b_j: lookup copies min(γ, n) tokens of one match and suffix stops its
greedy walk at γ (both stop rules read the context alone), so the step drafts b_j[:window] and
accepts min(A(j), window) — `replay.walk` over `copy_steps` is the real loop step for step, for every
policy and the hindsight oracles. The drafter is driven exactly as engine.decode feeds it: `reset`
with the prompt, `draft` at every position, `commit` after it, one verified token at a time (the
suffix trie holds x[:j]; lookup keeps no state). Drafts are fixed by the context, so a stop drops
none (`StepView.drawn = False`, Keep(drawn=False) in the real loop).

Exact for the call, drafted and accepted counts on every request that ended at max_new_tokens; on a
request that ended with EOS the accepted count of the final step is censored at EOS (the real loop
may accept drafts past EOS, then discards them): calls and drafted stay exact. Refused: `suffix`
with `corpus=1` (its corpus holds earlier requests as far as their last draft() call saw them,
which depends on the policy's step boundaries).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.offline.replay import StepSource, StepView
from engine.policies.base import DraftInfo

MAX_WINDOW = 64  # every window replays exactly (the block is known in full): the policies' own ceiling


def _drafter(spec: str, vocab_size: int):
    from engine.drafters.modelfree import is_model_free, make_model_free

    if not is_model_free(spec):
        raise ValueError(f"{spec!r} is not a model-free drafter (lookup:…, suffix:…)")
    d = make_model_free(spec, vocab_size)
    if getattr(d, "corpus_on", 0):
        raise ValueError(f"{spec!r}: a corpus of earlier requests depends on the policy's step boundaries; "
                         "the copy replay needs corpus=0")
    return d


def canonical(spec: str) -> str:
    """The drafter's full spec, as decode traces record it ('suffix:n=16' → 'suffix:n=16,depth=32,p=0.1')."""
    return _drafter(spec, 2).spec


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def copy_blocks(spec: str, prompt_ids: list[int], output_ids: list[int]) -> tuple[list[list[int]], list[list[DraftInfo]]]:
    """b_j and its drafts' DraftInfo for j = 0..N−1, from the real drafter (`draft` with a recording keep)."""
    import torch

    from engine.core.sampling import SamplingConfig
    from engine.drafters.base import Keep

    if not prompt_ids:
        raise ValueError("empty prompt")
    vocab = max(max(prompt_ids), max(output_ids, default=0)) + 1  # q rows only need to index the context
    d = _drafter(spec, vocab)
    sc, gen = SamplingConfig(), torch.Generator()
    seq = list(prompt_ids)
    d.reset(seq)
    blocks: list[list[int]] = []
    infos: list[list[DraftInfo]] = []
    for tok in output_ids:
        shown: list[DraftInfo] = []
        prop = d.draft(seq, d.max_tokens, Keep(lambda info: shown.append(info) or True), sc, gen)
        block = list(prop.tokens[0])
        if [i.token for i in shown] != block:
            raise AssertionError(f"{spec}: the drafter showed {len(shown)} drafts for a block of {len(block)}")
        blocks.append(block)
        infos.append(shown)
        seq.append(tok)
        d.commit(len(seq))  # one verified token at a time; the next draft() reads the sequence
    return blocks, infos


def copy_request(prompt_ids: list[int], output_ids: list[int], spec: str, request_id: int = 0,
                 category: str = "", **extra: Any) -> dict[str, Any]:
    """One request of a copy run: blocks, signals and A(j), plus the per-position columns the analysis
    tables read (draft_argmax = b_j's first token or −1, q_top = 1 where a block exists, q_target =
    whether that token is y_j, entropy 0)."""
    from engine.trace.prompts import task_of

    y = list(output_ids)
    blocks, infos = copy_blocks(spec, list(prompt_ids), y)
    runs = [common_prefix(b, y[j:]) for j, b in enumerate(blocks)]
    first = [b[0] if b else -1 for b in blocks]
    return {"request_id": request_id, "category": category, "task": task_of(category), **extra,
            "prompt_ids": list(prompt_ids), "output_ids": y, "blocks": blocks, "infos": infos, "accept_run": runs,
            "draft_argmax": first, "q_top": [float(bool(b)) for b in blocks],
            "q_target": [float(f == t) for f, t in zip(first, y)], "entropy": [0.0] * len(y)}


def copy_steps(req: dict, budget: int) -> StepSource:
    """One request of a copy run, position by position (the next step starts at pos + emitted)."""
    runs, blocks, infos, n, pos = req["accept_run"], req["blocks"], req["infos"], len(req["output_ids"]), 0
    while pos < n:
        p = pos
        limit = max(0, min(len(blocks[p]), budget - p - 1))
        pos += yield StepView(p, runs[p], limit, n - p, infos[p].__getitem__, drawn=False)


@dataclass
class CopyRun:
    """A greedy autoregressive run seen through a copy drafter: walked by the analysis tables like a
    reference (engine.offline.analysis), through `step_source` (replay.steps_for)."""

    header: dict[str, Any]
    requests: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = True
    source: str = ""

    greedy = True

    @property
    def max_new_tokens(self) -> int:
        return self.header["max_new_tokens"]

    @property
    def max_window(self) -> int:
        return self.header["max_window"]

    @property
    def drafter_window(self) -> int:
        """The drafter's own cap (lookup n, suffix n): no step drafts more."""
        return self.header["draft"]["max_tokens"]

    def step_source(self, req: dict) -> StepSource:
        return copy_steps(req, self.max_new_tokens)


def copy_run(trace, spec: str) -> CopyRun:
    """A CopyRun of `spec` over a greedy autoregressive trace (a path or a loaded engine.trace Trace);
    requests without a recorded end (an interrupted run) are skipped."""
    if not hasattr(trace, "header"):
        from engine.trace.read import load_trace

        trace = load_trace(trace)
    h = trace.header
    name = Path(trace.source).name or "trace"
    if h.get("draft") is not None or float((h.get("sampling") or {}).get("temperature", 0)) != 0:
        raise ValueError(f"{name}: the copy replay needs a greedy autoregressive trace (no draft, T = 0)")
    if h.get("verifier", "token") != "token":
        raise ValueError(f"{name}: verifier {h.get('verifier')!r}; the copy replay replays token verification")
    d = _drafter(spec, 2)
    header = {"mode": "greedy", "max_new_tokens": int(h["max_new_tokens"]), "max_window": MAX_WINDOW,
              "target": h.get("target"), "draft": {"name": d.spec, "max_tokens": d.max_tokens, "dtype": "none"},
              "timings": None, "from_trace": name, "command": h.get("command")}
    reqs = []
    for rid in sorted(trace.ends):
        r = trace.requests[rid]
        reqs.append(copy_request(r["prompt_ids"], trace.ends[rid]["output_ids"], d.spec, rid,
                                 str(r.get("category") or ""), question_id=r.get("question_id"),
                                 finished=trace.ends[rid].get("finished")))
    if not reqs:
        raise ValueError(f"{name}: no finished request to replay")
    return CopyRun(header, reqs, source=f"{trace.source} @ {d.spec}")
