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


# ------------------------------------------------------------------ the draft context window

from engine.decode import DecodeConfig, decode  # noqa: E402
from engine.drafters.autoregressive import DraftContext  # noqa: E402
from engine.policies.base import parse_policy  # noqa: E402

import pytest  # noqa: E402


class Watched(AutoregressiveDrafter):
    """Records the draft cache's tokens (a TableLM's) against the sequence at every draft and commit."""

    def __init__(self, lm, ctx):
        super().__init__(lm, ctx)
        self.seen: list[tuple[list[int], list[int], list[int]]] = []

    def draft(self, seq, cap, keep, sc, gen):
        prop = super().draft(seq, cap, keep, sc, gen)
        self.seen.append((list(seq), list(self.lm.tokens), list(prop.tokens[0])))
        return prop


def _view(seq, ctx, n_prompt):
    skip = ctx.skipped(n_prompt)
    return seq[: ctx.sink] + seq[ctx.sink + skip:] if skip else list(seq)


def test_context_window_skips_the_prompts_middle_and_tracks_the_sequence():
    ctx = DraftContext(window=5, sink=2)
    prompt = list(range(1, 21))  # 20 tokens: skip = 13, the draft prefills 7
    target, drafter = TableLM(24, seed=1), Watched(TableLM(24, seed=2), ctx)
    steps = list(decode(target, drafter, prompt, parse_policy("fixed:3"), DecodeConfig(max_new_tokens=30)))
    assert ctx.skipped(20) == 13 and drafter.prompt_tokens(20) == 7
    assert len(drafter.seen) == len(steps) > 5
    for seq, cached, drafts in drafter.seen:  # the draft cache read view(seq), then its drafts but the last
        if drafts:  # (the last step's cap is 0: nothing is drafted or read)
            assert cached == _view(seq, ctx, len(prompt)) + drafts[:-1]
        assert cached[:7] == prompt[:2] + prompt[15:]
    assert drafter.lm.length <= 7 + 30  # never more than the window, the sinks and the generated tokens


def test_context_window_drafts_from_the_truncated_context():
    """The first draft's q row is the draft LM's distribution after view(prompt), not after the whole prompt."""
    ctx = DraftContext(window=3, sink=1)
    prompt = [5, 6, 7, 8, 9, 10, 11, 12]
    lm = TableLM(16, seed=4)
    d = AutoregressiveDrafter(lm, ctx)
    d.reset(prompt)
    prop = d.draft(prompt, 1, Keep(lambda info: True), SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    ref = TableLM(16, seed=4).dist((5, 10, 11, 12)).float()
    assert torch.allclose(prop.q[0][0], ref / ref.sum(), atol=1e-6)
    full = TableLM(16, seed=4).dist(tuple(prompt)).float()
    assert not torch.allclose(prop.q[0][0], full / full.sum(), atol=1e-3)


def test_a_window_longer_than_the_prompt_changes_nothing():
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    outs = []
    for ctx in (DraftContext(), DraftContext(window=6, sink=2), DraftContext(window=100)):
        steps = list(decode(TableLM(12, seed=5), AutoregressiveDrafter(TableLM(12, seed=6), ctx), prompt,
                            parse_policy("fixed:2"), DecodeConfig(max_new_tokens=12,
                                                                  sampling=SamplingConfig(temperature=1.0, seed=3))))
        outs.append([(s.draft_tokens, s.emitted_tokens) for s in steps])
    assert outs[0] == outs[1] == outs[2]


def test_greedy_with_a_context_window_equals_the_targets_greedy(tiny_target, pair):
    from tests.conftest import greedy_reference

    target, draft = pair
    prompt = [1, 5, 9, 3, 7, 7, 2, 8, 4, 6, 11, 40, 3, 9]
    ref = greedy_reference(tiny_target, prompt, 20)
    steps = list(decode(target, AutoregressiveDrafter(draft, DraftContext(window=4, sink=2)), prompt,
                        parse_policy("fixed:3"), DecodeConfig(max_new_tokens=20)))
    assert [t for s in steps for t in s.emitted_tokens] == ref
    assert draft.length <= 2 + 4 + 20  # its cache: the sinks, the window and what was generated, never the whole prompt


def test_sampling_with_a_context_window_is_lossless():
    """χ² of whole continuations from the real loop against the target's exact joint, the draft reading
    1 sink + 2 recent tokens of a 6-token prompt."""
    from tests.conftest import chi_square_of_loop

    draft = AutoregressiveDrafter(TableLM(3, seed=12), DraftContext(window=2, sink=1))
    p, tv = chi_square_of_loop("token", draft, 3000, prompt=(0, 1, 2, 2, 1, 0))
    assert p > 1e-3 and tv < 0.06


@pytest.mark.parametrize("spec, want", [("ctx:256", DraftContext(256, 64)), ("ctx:64,sink=0", DraftContext(64, 0)),
                                        (" ctx:8 , sink=2 ", DraftContext(8, 2))])
def test_context_spec_parses(spec, want):
    assert DraftContext.parse(spec) == want


@pytest.mark.parametrize("spec", ["ctx:", "ctx:-3", "ctx:0", "ctx:abc", "ctx:8,sinks=2", "ctx:8,sink=-1",
                                  "window:8", "ctx:sink=2"])
def test_bad_context_specs_are_refused_in_one_line(spec):
    with pytest.raises(ValueError) as e:
        DraftContext.parse(spec)
    assert "\n" not in str(e.value) and "ctx" in str(e.value)


def test_the_run_hands_a_policy_the_prompt_tokens_the_draft_reads():
    """engine.run.policy_for: a window policy learns the draft's first catch-up from the drafter (the whole prompt
    for a plain draft model, S + W through a context window)."""
    from engine.run import policy_for

    seen = []

    class Spy(type(parse_policy("fixed:2"))):
        def for_request(self, ctx):
            seen.append(ctx.first_catchup)
            return self

    target, lm, prompt = TableLM(12, seed=1), TableLM(12, seed=2), list(range(1, 31))
    cfg = DecodeConfig(max_new_tokens=4)
    policy_for(Spy(), target, lm, cfg, prompt)
    policy_for(Spy(), target, AutoregressiveDrafter(lm, DraftContext(window=6, sink=2)), cfg, prompt)
    assert seen == [30, 8]
