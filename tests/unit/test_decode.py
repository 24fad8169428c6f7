"""The decode generator: greedy equivalence, χ² losslessness of the real loop, KV rollback."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from engine.decode import DecodeConfig, decode
from engine.core.lm import HFModel, TableLM
from engine.policies.base import parse_policy
from engine.core.sampling import SamplingConfig
from tests.conftest import exact_joint, greedy_reference

PROMPTS = [[1, 5, 9, 3], [7], [2, 2, 2, 2, 2, 2, 2, 2, 11, 40]]
POLICIES = ["fixed:1", "fixed:3", "fixed:6", "heuristic", "heuristic:2,max=8", "confidence", "confidence:0.9",
            "confidence:0.4,refit=1",
            "cumulative", "cumulative:0.2", "entropy", "entropy:0.5"]


def run(target, draft, prompt, policy, n, **kw):
    steps = list(decode(target, draft, prompt, parse_policy(policy) if policy else None,
                        DecodeConfig(max_new_tokens=n, **kw)))
    return [t for s in steps for t in s.emitted_tokens], steps


@pytest.mark.parametrize("policy", POLICIES)
def test_greedy_equals_target_generate(tiny_target, pair, policy):
    target, draft = pair
    for prompt in PROMPTS:
        ref = greedy_reference(tiny_target, prompt, 24)
        out, steps = run(target, draft, prompt, policy, 24)
        assert out == ref, (policy, prompt)
        assert len(steps) < 24, "the noisy-copy draft should be accepted sometimes"


def test_autoregressive_is_the_same_generator(tiny_target, pair):
    target, _ = pair
    prompt = PROMPTS[0]
    ref = greedy_reference(tiny_target, prompt, 16)
    out, steps = run(target, None, prompt, None, 16)
    assert out == ref and len(steps) == 16 and all(s.window == 0 and s.emitted == 1 for s in steps)


def test_record_bookkeeping(pair):
    target, draft = pair
    out, steps = run(target, draft, PROMPTS[0], "fixed:4", 30)
    ctx = len(PROMPTS[0])
    for s in steps:
        assert s.context_len == ctx
        assert s.accepted <= s.window <= s.window_cap <= 4
        assert s.emitted_tokens[: s.accepted] == s.draft_tokens[: s.accepted] or s.finished
        assert (s.bonus is None) != (s.correction is None)
        assert s.bonus is None or s.accepted == s.window
        assert len(s.q_draft) == len(s.p_target) == len(s.accept_probs) == s.window
        ctx += s.emitted
    assert len(out) == 30 and steps[-1].finished == "max_new_tokens"
    # The window is capped so the budget is never overshot.
    assert all(s.window_cap <= 30 - (s.context_len - len(PROMPTS[0])) - 1 for s in steps)


def test_eos_stops_and_truncates(tiny_target, pair):
    target, draft = pair
    out, _ = run(target, draft, PROMPTS[0], "fixed:4", 24)
    eos = out[5]
    steps = list(decode(target, draft, PROMPTS[0], parse_policy("fixed:4"), DecodeConfig(max_new_tokens=24),
                        eos_ids=(eos,)))
    got = [t for s in steps for t in s.emitted_tokens]
    assert got == out[: out.index(eos) + 1] and steps[-1].finished == "eos"


def test_sampling_is_seeded(pair):
    target, draft = pair
    cfg = dict(sampling=SamplingConfig(temperature=0.8, top_p=0.95, seed=7))
    a, _ = run(target, draft, PROMPTS[0], "fixed:3", 20, **cfg)
    b, _ = run(target, draft, PROMPTS[0], "fixed:3", 20, **cfg)
    c, _ = run(target, draft, PROMPTS[0], "fixed:3", 20, sampling=SamplingConfig(temperature=0.8, top_p=0.95, seed=8))
    assert a == b and a != c


def test_vocab_mismatch_refused(tiny_target):
    from tests.conftest import tiny_llama

    with pytest.raises(ValueError, match=r"draft vocabulary \(80\) differs from the target's \(64\)"):
        next(decode(HFModel(tiny_target), HFModel(tiny_llama(3, vocab=80)), [1, 2], parse_policy("fixed:2")))


def test_kv_crop_equals_fresh_forward(tiny_target):
    lm = HFModel(tiny_target.float())
    prefix, extra = [3, 1, 4, 1, 5, 9, 2, 6], [5, 3, 5, 8]
    lm.extend(prefix)
    lm.extend(extra)  # verify-style multi-token extend, then roll back two tokens
    lm.crop(len(prefix) + 2)
    after_crop = lm.extend([7])
    fresh = HFModel(tiny_target)
    ref = fresh.extend(prefix + extra[:2] + [7])[-1:]
    assert lm.length == len(prefix) + 3
    torch.testing.assert_close(after_crop, ref, atol=1e-4, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("policy,samples", [("fixed:2", 60_000), ("confidence:0.5,max=3", 40_000)])
def test_chi_square_of_the_real_loop(policy, samples):
    """Sample whole continuations with the real decode loop (toy table models, T = 1) and compare the
    joint distribution of the first 3 tokens with the exact target joint."""
    target, draft = TableLM(3, seed=11), TableLM(3, seed=12)
    prompt, n = [0], 3
    cells, expected = exact_joint(target, prompt, n)
    index = {c: i for i, c in enumerate(cells)}
    counts = np.zeros(len(cells))
    pol = parse_policy(policy)
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=1.0, seed=s))
        out = [t for r in decode(target, draft, prompt, pol, cfg) for t in r.emitted_tokens]
        counts[index[tuple(out)]] += 1
    exp = expected * samples
    assert exp.min() >= 5
    stat, pval = chisquare(counts, exp)
    tv = 0.5 * np.abs(counts / samples - expected).sum()
    assert pval > 1e-4, (stat, pval, tv)
    # A lossy loop (e.g. correction drawn from p instead of the residual) shifts TV by ≥ 1e-2 here.
    assert tv < 0.01


def test_chi_square_detects_a_biased_loop():
    """Sanity check of the statistic itself: the draft's own distribution must be rejected."""
    target, draft = TableLM(3, seed=11), TableLM(3, seed=12)
    cells, expected = exact_joint(target, [0], 3)
    _, draft_joint = exact_joint(draft, [0], 3)
    counts = np.random.default_rng(0).multinomial(20_000, draft_joint)
    assert chisquare(counts, expected * 20_000).pvalue < 1e-4


def test_auto_dtype_is_bf16_only_where_native(monkeypatch):
    """'auto' picks bf16 on CUDA and on CPUs with bf16 instructions, fp32 where torch would emulate it."""
    import builtins
    import io

    import torch

    from engine.models import load as models

    assert models.resolve_dtype("auto", "cuda") == torch.bfloat16
    real_open = builtins.open
    for flags, want in (("flags : fpu avx2 fma", torch.float32), ("flags : avx2 avx512f avx512_bf16", torch.bfloat16),
                        ("flags : avx2 amx_bf16 amx_tile", torch.bfloat16)):
        monkeypatch.setattr(builtins, "open", lambda p, *a, _f=flags, **k: io.StringIO(_f) if p == "/proc/cpuinfo"
                            else real_open(p, *a, **k))
        assert models.resolve_dtype("auto", "cpu") == want, flags
    monkeypatch.setattr(builtins, "open", real_open)
    assert models.resolve_dtype("fp32") == torch.float32 and models.resolve_dtype("bf16") == torch.bfloat16


def test_prefill_caches_without_logits(tiny_target):
    """prefill caches the prompt with the decoder alone (no LM head over every prompt position), and the
    next extend gives the same logits as feeding the whole prompt."""
    from engine.core.lm import prefill

    prompt = [1, 5, 9, 3, 7, 2]
    full = HFModel(tiny_target, "ref").extend(prompt)[-1]
    lm = HFModel(tiny_target, "t")
    calls = []
    hook = tiny_target.get_output_embeddings().register_forward_hook(lambda *a: calls.append(1))
    try:
        prefill(lm, prompt[:-1])
    finally:
        hook.remove()
    assert not calls and lm.length == len(prompt) - 1
    torch.testing.assert_close(lm.extend(prompt[-1:])[-1], full, atol=1e-5, rtol=0)
    table = TableLM(8, seed=3)  # an LM without prefill: extended, logits dropped
    prefill(table, [1, 2, 3])
    assert table.tokens == [1, 2, 3]


def test_one_step_runs_the_files_the_map_names(tiny_target, tiny_draft):
    """docs/architecture.md's "one path of a decode step" names every engine file one speculative step runs
    (fp32, heuristic window, a draft model, token verify) and says how many: profiled here, not counted by hand."""
    import re
    import sys

    from tests.conftest import REPO

    gen = decode(HFModel(tiny_target, "t"), HFModel(tiny_draft, "d"), [1, 5, 9, 3], parse_policy("heuristic"),
                 DecodeConfig(max_new_tokens=12))
    next(gen)  # the first step also prefills: the steady step is the second
    ran: set[str] = set()

    def seen(frame, event, arg):
        name = frame.f_code.co_filename
        if event == "call" and "/engine/" in name:
            ran.add(name.split("/engine/", 1)[1])

    sys.setprofile(seen)
    try:
        next(gen)
    finally:
        sys.setprofile(None)
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text[text.index("## The one path of a decode step"):text.index("## How to add")]
    named = {m.removeprefix("engine/") for m in re.findall(r"`((?:engine/)?[a-z_/]+\.py)", section)}
    assert ran and not ran - named, f"files a step runs that the map does not name: {sorted(ran - named)}"
    words = {10: "Ten", 11: "Eleven", 12: "Twelve", 13: "Thirteen", 14: "Fourteen", 15: "Fifteen"}
    assert f"{words.get(len(ran), len(ran))} files hold every line that runs" in section, sorted(ran)
