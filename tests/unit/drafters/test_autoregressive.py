"""The autoregressive drafter's catch-up: a short one (after a fully accepted step) is one forward whose last row
drafts; a long one (a request's prompt) goes through the LM's prefill first; the drafts are the same either way."""

import torch

from engine.core.lm import TableLM
from engine.core.sampling import SamplingConfig
from engine.drafters.autoregressive import ONE_FORWARD, AutoregressiveDrafter
from engine.drafters.base import Keep


class Recorder:
    """A TableLM that records each forward: ('extend' | 'prefill', number of tokens)."""

    def __init__(self) -> None:
        self.inner = TableLM(32, seed=3)
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def extend(self, ids):
        self.calls.append(("extend", len(ids)))
        return self.inner.extend(ids)

    def prefill(self, ids):
        self.calls.append(("prefill", len(ids)))
        self.inner.extend(ids)


def _draft(lm, seq, cap=2):
    d = AutoregressiveDrafter(lm)
    return d.draft(seq, cap, Keep(lambda info: True), SamplingConfig(), torch.Generator().manual_seed(0))


def test_a_short_catch_up_is_one_forward_and_a_long_one_prefills_first():
    seq = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    lm = Recorder()
    lm.extend(seq[:-2])  # the draft cache lags two tokens behind: its last draft and the bonus
    lm.calls.clear()
    short = _draft(lm, seq)
    assert lm.calls == [("extend", 2), ("extend", 1)]
    cold = Recorder()
    long = _draft(cold, seq)  # the whole prompt behind: more than ONE_FORWARD tokens
    assert len(seq) > ONE_FORWARD and cold.calls == [("prefill", len(seq) - 1), ("extend", 1), ("extend", 1)]
    assert short.tokens == long.tokens and torch.equal(short.q[0], long.q[0])  # the same drafts whichever way the cache caught up
