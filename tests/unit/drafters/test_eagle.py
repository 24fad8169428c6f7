"""EAGLE-style head: the training-time test equals decode-time drafting, greedy decoding is exact,
checkpoints and configs that do not fit are refused in one line."""

import pytest
import torch
import torch.nn.functional as F

from engine.core.sampling import SamplingConfig
from engine.decode import DecodeConfig, decode
from engine.drafters.base import KEEP_ALL
from engine.drafters.block import FeatureLM
from engine.drafters.eagle import EagleDrafter, check_eagle, load_eagle, save_eagle
from engine.drafters.eagle_model import EagleConfig, EagleHead
from engine.policies.simple import Fixed
from tests.conftest import VOCAB, greedy_reference, pooled_chi_square, tiny_llama

LAYERS = (0, 1)


@pytest.fixture(scope="module")
def target():
    return tiny_llama(3, layers=2, hidden=32)


def make_head(seed=0, layers=LAYERS) -> EagleHead:
    c = EagleConfig(hidden_size=32, target_layers=layers, num_heads=4, num_kv_heads=2, intermediate_size=48,
                    rope_theta=10000.0, vocab_size=VOCAB, draft_vocab=VOCAB, target="tiny")
    torch.manual_seed(seed)
    h = EagleHead(c)
    with torch.no_grad():  # non-trivial norms so a wrong input order would show
        for p in h.parameters():
            if p.dim() == 1:
                p.add_(0.3 * torch.randn_like(p))
    return h.eval()


def test_unrolled_equals_decode_time_drafting(target):
    """Step j of the training-time unroll at position S−2+j−1 gives exactly the distribution the
    drafter's j-th draft of a decode step had, on the drafter's own chain."""
    head = make_head(1)
    ft = FeatureLM(target, LAYERS)
    d = EagleDrafter(head, ft, torch.arange(VOCAB))
    seq = [3, 9, 4, 17, 5, 22, 8]
    K = 4
    ft.reset()
    ft.prefill(seq[:-1])  # the target's cache holds positions < S − 1, as after a verify
    d.reset(seq)
    prop = d.draft(seq, K, KEEP_ALL, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(1))
    drafts = prop.tokens[0]
    assert len(drafts) == K
    x = torch.tensor([seq + drafts])
    with torch.no_grad():
        out = target(x, output_hidden_states=True)
        feats = torch.cat([out.hidden_states[l + 1] for l in LAYERS], -1)
        nxt = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], 1)
        emb = F.embedding(nxt, target.get_input_embeddings().weight)
        hs = head.unrolled(emb, feats, torch.arange(x.shape[1])[None], K)
        W = target.get_output_embeddings().weight
    S = len(seq)
    for j in range(1, K + 1):
        t = S - 2 + j - 1
        q = torch.softmax(head.norm_f(hs[j - 1][0, t]) @ W.T, -1)
        assert torch.allclose(q, prop.q[0][j - 1], atol=1e-5), j


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_decoding_with_the_head(target, temperature):
    head = make_head(3)
    ft = FeatureLM(target, LAYERS, name="tiny-target")
    drafter = EagleDrafter(head, ft, torch.arange(VOCAB))
    cfg = DecodeConfig(max_new_tokens=30, sampling=SamplingConfig(temperature=temperature, seed=5))
    for prompt in ([5], [1, 2, 3, 4]):
        recs = list(decode(ft, drafter, prompt, Fixed(3), cfg))
        out = [t for r in recs for t in r.emitted_tokens]
        assert len(out) == 30
        if temperature == 0.0:
            assert out == greedy_reference(target, prompt, 30)


def test_save_load_and_refusals(tmp_path, target):
    from engine.core.lm import HFModel
    from engine.models.vocab_subset import save_subset

    head = make_head(5)
    save_eagle(head, tmp_path / "h")
    save_subset(torch.arange(VOCAB), tmp_path / "h" / "vocab_subset.safetensors", {})
    lm = HFModel(target, name="tiny")
    ft, d = load_eagle(tmp_path / "h", lm)
    for k, v in head.state_dict().items():
        assert torch.allclose(v.to(torch.bfloat16).float(), d.head.state_dict()[k].float())
    other = HFModel(tiny_llama(3, layers=2, hidden=64), name="wide")
    with pytest.raises(ValueError, match="hidden size 32"):
        check_eagle(tmp_path / "h", other)
    with pytest.raises(FileNotFoundError, match="not an eagle-head directory"):
        check_eagle(tmp_path, lm)
    with pytest.raises(ValueError, match="layers"):
        EagleDrafter(head, FeatureLM(target, (1,)), torch.arange(VOCAB))


def test_bench_prices_the_head_per_drafted_token(target):
    """The bench's cost probe times the head (its c numerator); the modelled speedup prices an
    `@eagle` config with that probe instead of 0."""
    from engine.bench.modelled import draft_ms
    from engine.bench.runner import eagle_token_ms
    from engine.core.lm import HFModel

    lm = HFModel(target, name="tiny")
    head = make_head(6)
    ft = FeatureLM(target, LAYERS)
    ms = eagle_token_ms(lm, EagleDrafter(head, ft, torch.arange(VOCAB)), list(range(1, 12)), reps=3)
    assert ms > 0
    assert eagle_token_ms(lm, object(), list(range(1, 12))) != eagle_token_ms(lm, object(), list(range(1, 12)))  # nan
    costs = {"t_draft_ms": 40.0, "by_drafter": {"fixed:3@eagle:x": {"t_draft_ms": 4.0}}}
    assert draft_ms(costs, "fixed:3@eagle:x") == 4.0
    assert draft_ms(costs, "fixed:3@lookup:n=3") == 0.0 and draft_ms(costs, "fixed:3") == 40.0


def test_run_spec_refuses_a_missing_or_foreign_head(tmp_path, target):
    from engine.core.lm import HFModel
    from engine.spec import RunSpec

    errs = RunSpec(draft=f"eagle:{tmp_path}/nothing", policy="fixed:3").check()
    assert errs and "not an eagle-head directory" in errs[0] and "\n" not in errs[0]
    save_eagle(make_head(7), tmp_path / "h")
    wide = HFModel(tiny_llama(3, layers=2, hidden=64), name="wide")
    errs = RunSpec(draft=f"eagle:{tmp_path}/h", policy="fixed:3").check(wide)
    assert errs and "hidden size 32" in errs[0]
    assert RunSpec(draft=f"eagle:{tmp_path}/h", policy="fixed:3", k=2, verifier="rbv").check()


@pytest.mark.slow
def test_chi_square_at_t07():
    """Two tokens sampled by the real loop with the head drafting (T = 0.7, vocab 16) against the exact
    joint of the target's own T = 0.7 law: speculative sampling stays exact with this drafter."""
    import itertools

    import numpy as np
    from engine.core.lm import HFModel

    t = tiny_llama(5, vocab=16, layers=2, hidden=32)
    with torch.no_grad():
        t.lm_head.weight.mul_(12.0)  # sharp enough for the test to have power (see the last assert)
    c = EagleConfig(hidden_size=32, target_layers=LAYERS, num_heads=4, num_kv_heads=2, intermediate_size=48,
                    rope_theta=10000.0, vocab_size=16, draft_vocab=16, target="tiny")
    torch.manual_seed(0)
    head = EagleHead(c).eval()
    prompt, temp, n, samples = [1, 2, 3], 0.7, 2, 4000

    def joint(tau):
        def dist(ctx):
            return torch.softmax(HFModel(t).extend(list(ctx))[-1].double() / tau, -1)

        first, seconds = dist(prompt), {a: dist(prompt + [a]) for a in range(16)}
        return np.array([float(first[a] * seconds[a][b]) for a, b in cells])

    cells = list(itertools.product(range(16), repeat=n))
    index = {x: i for i, x in enumerate(cells)}
    counts = np.zeros(len(cells))
    ft = FeatureLM(t, LAYERS)
    drafter = EagleDrafter(head, ft, torch.arange(16))
    accepted = 0
    for s in range(samples):
        cfg = DecodeConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=temp, seed=s))
        recs = list(decode(ft, drafter, prompt, Fixed(2), cfg))
        accepted += sum(r.accepted for r in recs)
        counts[index[tuple(x for r in recs for x in r.emitted_tokens)]] += 1

    def pvalue(joint_probs):
        return pooled_chi_square(counts, joint_probs, samples)

    assert accepted > samples // 10  # the accept branch was exercised, not only corrections
    assert pvalue(joint(temp)) > 1e-4
    assert pvalue(joint(1.0)) < 1e-4  # power: a loop that dropped the temperature would fail
