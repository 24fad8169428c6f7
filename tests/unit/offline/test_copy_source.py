"""The copy-drafter step source (engine.offline.copy_source): replaying a model-free drafter over one
greedy autoregressive run through the one `walk` equals real decoding step for step — on the tiny
pair (real `decode` runs), on hand-made sequences with known A(j), and on the bundled Qwen traces of
one bench run (per-request target calls of lookup fixed:10 / matchlen and suffix matchlen)."""

import pytest

from engine.core.lm import HFModel
from engine.decode import DecodeConfig, decode
from engine.drafters.modelfree import make_model_free
from engine.offline.copy_source import copy_request, copy_run, copy_steps
from engine.offline.costmodel import CostModel
from engine.offline.replay import parse_spec, walk
from engine.policies.base import parse_policy
from tests.conftest import REPO

TRACES = REPO / "traces"
PROMPTS = [[1, 5, 9, 3, 1, 5, 9], [2, 2, 2, 2, 2, 2, 2, 2, 11, 40], [7], [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]]
SPECS = ["lookup:n=10,ngram=2", "lookup:n=4,ngram=1", "lookup:3,pick=1", "suffix:n=16", "suffix:n=6,depth=8,p=0.3"]
POLICIES = ["fixed:3", "fixed:8", "matchlen:1,offset=2,max=10", "matchlen:2,offset=1,max=8,p=0.2", "heuristic:2,max=6"]
N = 40


def _replay(req, policy, budget):
    return walk(copy_steps(req, budget), parse_spec(policy), CostModel.flat(0.0))


@pytest.fixture(scope="module")
def ar_runs(tiny_target):
    """The one recorded autoregressive run per prompt (no EOS: every output is N tokens)."""
    target = HFModel(tiny_target, "tiny-target")
    cfg = DecodeConfig(max_new_tokens=N)
    return target, [[t for s in decode(target, None, p, None, cfg) for t in s.emitted_tokens] for p in PROMPTS]


@pytest.mark.parametrize("spec", SPECS)
def test_replay_equals_real_greedy_decoding(ar_runs, spec):
    target, outputs = ar_runs
    totals = {"calls": 0, "accepted": 0, "policy_stops": 0, "short_blocks": 0}
    for prompt, y in zip(PROMPTS, outputs):
        req = copy_request(prompt, y, spec)
        assert len(req["accept_run"]) == len(y) == N
        for policy in POLICIES:
            real = list(decode(target, make_model_free(spec, 64), prompt, parse_policy(policy),
                               DecodeConfig(max_new_tokens=N)))
            assert [t for s in real for t in s.emitted_tokens] == y  # greedy: the window never changes y
            sim = _replay(req, policy, N)
            got = [(s["window"], s["accepted"], s["emitted"]) for s in sim]
            want = [(s.window, s.accepted, s.emitted) for s in real]
            assert got == want, (spec, policy, prompt)
            assert (len(sim), sum(s["drafted"] for s in sim), sum(s["accepted"] for s in sim)) == \
                (len(real), sum(s.window for s in real), sum(s.accepted for s in real))
            totals["calls"] += len(real)
            totals["accepted"] += sum(s.accepted for s in real)
            totals["policy_stops"] += sum(s.stop_reason == "policy" for s in real)
            totals["short_blocks"] += sum(0 < s.window < s.window_cap and s.stop_reason != "policy" for s in real)
    # The comparison means something only if copies were accepted, policies stopped early, and blocks
    # ran out before the cap (the step's limit is the block, not only the budget).
    assert totals["accepted"] > 0 and totals["policy_stops"] > 0 and totals["short_blocks"] > 0, totals


def test_hand_made_lookup_blocks_and_accept_runs():
    # x = 5 6 7 8 5 6 | y = 7 8 9 5 6 7 (lookup n=4, ngram=2: the earliest match of the last bigram)
    req = copy_request([5, 6, 7, 8, 5, 6], [7, 8, 9, 5, 6, 7], "lookup:n=4,ngram=2")
    assert req["blocks"] == [[7, 8, 5, 6], [8, 5, 6, 7], [5, 6, 7, 8], [], [6, 7, 8, 5], [7, 8, 5, 6]]
    assert req["accept_run"] == [2, 1, 0, 0, 2, 1]
    info = req["infos"][0]
    assert [i.token for i in info] == [7, 8, 5, 6] and {(i.q_token, i.entropy, i.match_len) for i in info} == {(1.0, 0.0, 2)}
    # fixed:2 with M = 6: j=0 drafts 2, accepts 2, emits 3; j=3 has no block (an AR step); j=4 may draft
    # M − j − 1 = 1 token, accepts it and emits the last 2 tokens
    sim = _replay(req, "fixed:2", 6)
    assert [(s["pos"], s["window"], s["accepted"], s["emitted"]) for s in sim] == [(0, 2, 2, 3), (3, 0, 0, 1),
                                                                                   (4, 1, 1, 2)]
    # fixed:4 drafts whole blocks; the oracles draft A(j) (a) or A(j)+1 (b), capped by the block and budget
    assert [s["window"] for s in _replay(req, "fixed:4", 6)] == [4, 0, 1]
    assert [s["window"] for s in _replay(req, "oracle:a", 6)] == [2, 0, 1]
    assert [s["window"] for s in _replay(req, "oracle:b", 6)] == [3, 0, 1]
    # matchlen:1 → a window of ⌊match_len⌋ = 2 at j=0 (bigram match), 1 where only a unigram matched
    assert [(s["pos"], s["window"]) for s in _replay(req, "matchlen:1", 6)] == [(0, 2), (3, 0), (4, 1)]


def test_hand_made_suffix_block():
    # The longest earlier-repeated suffix of x is 1 2 3 1 2 (match_len 5); its continuation 3 1 2.
    req = copy_request([1, 2, 3, 1, 2, 3, 1, 2], [3, 1, 4], "suffix:n=16,p=0")
    assert req["blocks"][0] == [3, 1, 2] and req["accept_run"][0] == 2
    assert req["infos"][0][0].match_len == 5 and req["infos"][0][0].score == 1.0
    with pytest.raises(ValueError, match="corpus"):
        copy_request([1, 2], [3], "suffix:corpus=1")


# ---------------------------------------------------------------- the bundled Qwen traces of one bench run

BUNDLED = [("lookup:n=10,ngram=2", "fixed:10", "qwen-lookup-fixed-10-t0.jsonl", 271),
           ("lookup:n=10,ngram=2", "matchlen:1,offset=2,max=10", "qwen-lookup-matchlen-t0.jsonl", 294),
           ("suffix:n=16", "matchlen:1,offset=1", "qwen-suffix-matchlen-t0.jsonl", 287)]


@pytest.fixture(scope="module")
def qwen_runs():
    from engine.trace.read import load_trace

    ar = load_trace(TRACES / "qwen-modelfree-ar-t0.jsonl")
    return {spec: copy_run(ar, spec) for spec in {b[0] for b in BUNDLED}}


@pytest.mark.parametrize("spec,policy,name,calls", BUNDLED)
def test_replay_reproduces_the_bundled_qwen_runs(qwen_runs, spec, policy, name, calls):
    from engine.trace.read import load_trace

    real = load_trace(TRACES / name)
    run = qwen_runs[spec]
    assert real.header["draft"]["name"] == run.header["draft"]["name"]
    total = 0
    for req in run.requests:
        rid = req["request_id"]
        steps = [s for s in real.steps if s["request_id"] == rid]
        assert real.ends[rid]["output_ids"] == req["output_ids"]
        sim = walk(run.step_source(req), parse_spec(policy), CostModel.flat(0.0))
        assert len(sim) == len(steps), (name, rid)
        assert [s["window"] for s in sim] == [s["window"] for s in steps], (name, rid)
        acc, want = [s["accepted"] for s in sim], [s["accepted"] for s in steps]
        if req["finished"] == "eos":  # the real final step may accept drafts past EOS (then discarded)
            assert acc[:-1] == want[:-1] and acc[-1] <= want[-1]
        else:
            assert acc == want, (name, rid)
        total += len(sim)
    assert total == calls


def test_copy_run_refuses_a_speculative_trace_and_a_model_drafter():
    with pytest.raises(ValueError, match="greedy autoregressive"):
        copy_run(TRACES / "qwen-lookup-fixed-10-t0.jsonl", "lookup")
    with pytest.raises(ValueError, match="model-free"):
        copy_request([1, 2], [3], "smollm2-draft")
