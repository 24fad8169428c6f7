"""DFlash-style block drafter: block mask (no leakage), training/inference agreement, target features,
greedy exactness of block-drafter decoding through the engine's decode loop."""

import pytest
import torch

from engine.decode import DecodeConfig, decode
from engine.drafters.block import (BlockDrafter, BlockDrafterConfig, BlockDrafterModel, BlockLM, FeatureLM,
                                   block_attention_mask, block_logits, build_target_layer_ids, load_block_drafter,
                                   save_block_drafter, target_features)
from engine.policies.simple import Fixed
from tests.conftest import REPO, VOCAB, greedy_reference, tiny_llama

LAYERS = (0, 1)
B = 6


@pytest.fixture(scope="module")
def target():
    return tiny_llama(3, layers=2, hidden=32)


def make_lm(target, seed=0, block=B) -> BlockLM:
    cfg = BlockDrafterConfig(hidden_size=32, target_layer_ids=LAYERS, mask_token_id=VOCAB - 1, vocab_size=VOCAB,
                             block_size=block, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                             intermediate_size=48)
    torch.manual_seed(seed)
    return BlockLM.from_target(BlockDrafterModel(cfg).eval(), target)


def test_mask_shape_and_rule():
    a = torch.tensor([[2, 5]])
    m = block_attention_mask(a, ctx_len=7, block_size=3)
    assert m.shape == (1, 6, 7 + 6)
    assert m[0, 0, :7].tolist() == [True, True, False, False, False, False, False]  # ctx keys < anchor 2
    assert m[0, 3, :7].tolist() == [True] * 5 + [False, False]
    assert m[0, 0, 7:].tolist() == [True, True, True, False, False, False]  # own block, bidirectional
    assert m[0, 4, 7:].tolist() == [False, False, False, True, True, True]


def test_no_leakage_between_anchors(target):
    """Outputs for one anchor do not change when other anchors' inputs (anchor tokens) or context
    features at positions ≥ its anchor change."""
    lm = make_lm(target)
    g = torch.Generator().manual_seed(0)
    S = 24
    ids = torch.randint(0, VOCAB - 1, (2, S), generator=g)
    feats = target_features(target, ids, LAYERS)
    anchors = torch.tensor([[3, 9, 15], [4, 10, 16]])
    with torch.no_grad():
        ref, _, _ = block_logits(lm, ids, feats, anchors)
        ids2 = ids.clone()
        ids2[:, [9, 15]] = (ids2[:, [9, 15]] + 1) % (VOCAB - 1)
        ids2[1, [10, 16]] = (ids2[1, [10, 16]] + 1) % (VOCAB - 1)
        feats2 = feats.clone()
        feats2[0, 3:] += torch.randn(feats2[0, 3:].shape, generator=g)
        feats2[1, 4:] += torch.randn(feats2[1, 4:].shape, generator=g)
        out, _, _ = block_logits(lm, ids2, feats2, anchors)
        assert torch.allclose(out[:, 0], ref[:, 0], atol=1e-5)  # anchor 0 of each sequence is untouched
        assert not torch.allclose(out[:, 1], ref[:, 1], atol=1e-3)  # the others did change
        feats3 = feats.clone()
        feats3[0, 2] += 1.0  # a context position < anchor 3 must matter
        out3, _, _ = block_logits(lm, ids, feats3, anchors)
        assert not torch.allclose(out3[0, 0], ref[0, 0], atol=1e-4)


def test_training_forward_equals_decode_forward(target):
    """The block-masked multi-anchor forward equals the unmasked per-block forward the drafter runs
    at decode time (context = exactly the positions before the anchor)."""
    lm = make_lm(target, seed=1)
    S = 20
    ids = torch.randint(0, VOCAB - 1, (1, S), generator=torch.Generator().manual_seed(1))
    feats = target_features(target, ids, LAYERS)
    anchors = torch.tensor([[0, 6, 11]])
    with torch.no_grad():
        logits, _, _ = block_logits(lm, ids, feats, anchors)
    ft = FeatureLM(target, LAYERS)
    d = BlockDrafter(lm, ft)
    for n, a in enumerate(anchors[0].tolist()):
        ft.reset()
        if a:
            ft.extend(ids[0, :a].tolist())
        d.reset(ids[0, :a + 1].tolist())
        got = d.block_logits(int(ids[0, a]), a)
        assert torch.allclose(got, logits[0, n, 1:], atol=1e-4), a


def test_feature_lm_matches_full_forward(target):
    ids = torch.randint(0, VOCAB, (1, 15), generator=torch.Generator().manual_seed(2))
    full = target_features(target, ids, LAYERS)[0]
    ft = FeatureLM(target, LAYERS)
    ft.extend(ids[0, :6].tolist())
    ft.extend(ids[0, 6:11].tolist())
    ft.crop(9)
    ft.extend(ids[0, 9:].tolist())
    assert ft.features.shape == full.shape and ft.length == 15
    assert torch.allclose(ft.features, full, atol=1e-4)


def _quick_train(lm, target, steps=60):
    """A few uniform-CE steps on the target's greedy continuations: enough for some acceptances."""
    from engine.train.dpace.objectives import make_objective

    g = torch.Generator().manual_seed(5)
    prompts = torch.randint(0, VOCAB - 1, (16, 4), generator=g)
    seqs = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=28, do_sample=False)
    feats = target_features(target, seqs, LAYERS)
    obj = make_objective("uniform")
    opt = torch.optim.AdamW(lm.model.parameters(), lr=3e-3)
    lm.model.train()
    S = seqs.shape[1]
    for t in range(steps):
        a = torch.stack([torch.randperm(S - 4, generator=g)[:6] + 3 for _ in range(16)]).sort(-1).values
        logits, labels, in_range = block_logits(lm, seqs, feats, a)
        valid = in_range.clone()
        valid[..., 0] = False
        ce = torch.nn.functional.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none")
        loss, _ = obj.loss(ce.view(labels.shape) * valid, valid, 16)
        opt.zero_grad()
        loss.backward()
        opt.step()
    lm.model.eval()
    return lm


@pytest.mark.parametrize("trained", [False, True])
def test_greedy_decoding_exact(target, trained):
    """Greedy decoding with the block drafter reproduces the target's greedy output exactly."""
    lm = make_lm(target, seed=2)
    if trained:
        _quick_train(lm, target)
    ft = FeatureLM(target, LAYERS, name="tiny-target")
    drafter = BlockDrafter(lm, ft)
    accepted = 0
    for prompt in ([5], [1, 2, 3, 4], [7, 7, 9, 11, 13, 2]):
        recs = list(decode(ft, drafter, prompt, Fixed(B - 1), DecodeConfig(max_new_tokens=40)))
        out = [t for r in recs for t in r.emitted_tokens]
        assert out == greedy_reference(target, prompt, 40)
        assert all(r.window <= B - 1 for r in recs)
        accepted += sum(r.accepted for r in recs)
    if trained:
        assert accepted > 0  # the exactness check covered accepting steps, not only corrections


def test_sampling_decoding_runs_and_is_seeded(target):
    from engine.core.sampling import SamplingConfig

    lm = make_lm(target, seed=3)
    ft = FeatureLM(target, LAYERS)
    cfg = DecodeConfig(max_new_tokens=20, sampling=SamplingConfig(temperature=1.0, seed=4))
    a = [t for r in decode(ft, BlockDrafter(lm, ft), [1, 2], Fixed(4), cfg) for t in r.emitted_tokens]
    b = [t for r in decode(ft, BlockDrafter(lm, ft), [1, 2], Fixed(4), cfg) for t in r.emitted_tokens]
    assert a == b and len(a) == 20


def test_save_load_roundtrip(tmp_path, target):
    lm = make_lm(target, seed=4)
    save_block_drafter(lm.model, tmp_path / "d", extra={"note": "x"})
    m2 = load_block_drafter(tmp_path / "d")
    assert m2.config == lm.config
    for k, v in lm.model.state_dict().items():
        assert torch.equal(v, m2.state_dict()[k])


def test_layer_ids_and_config_checks(target):
    assert build_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)
    assert build_target_layer_ids(24, 5) == (1, 6, 11, 16, 21)
    assert build_target_layer_ids(30, 1) == (15,)
    with pytest.raises(ValueError):
        BlockDrafterConfig(hidden_size=32, target_layer_ids=(), mask_token_id=0, vocab_size=8)
    lm = make_lm(target)
    with pytest.raises(ValueError, match="layers"):
        BlockDrafter(lm, FeatureLM(target, (1,)))


def test_reduced_head(target):
    lm = make_lm(target, seed=5)
    sub = torch.tensor([0, 3, 7, 20])
    red = BlockLM(lm.model, lm.embed_weight, lm.head_weight, vocab_subset=sub)
    h = torch.randn(3, 32)
    full, part = lm.logits(h), red.logits(h)
    assert torch.allclose(part[:, sub], full[:, sub])
    mask = torch.ones(VOCAB, dtype=torch.bool)
    mask[sub] = False
    assert torch.isinf(part[:, mask]).all()


COMMITTED = REPO / "models" / "block-drafter-tiny"


@pytest.mark.skipif(not (COMMITTED / "drafter" / "model.safetensors").is_file(), reason="no committed drafter")
def test_committed_tiny_drafter_is_exact_and_accepts():
    from engine.models.tiny import ByteTokenizer, load_target

    tgt = load_target(COMMITTED / "target")
    model = load_block_drafter(COMMITTED / "drafter")
    ft = FeatureLM(tgt, model.config.target_layer_ids)
    d = BlockDrafter(BlockLM.from_target(model, tgt), ft)
    prompt = ByteTokenizer().encode("Write a short story about a robot who")
    recs = list(decode(ft, d, prompt, Fixed(model.config.block_size - 1), DecodeConfig(max_new_tokens=48)))
    assert [t for r in recs for t in r.emitted_tokens] == greedy_reference(tgt, prompt, 48)
    assert 48 / len(recs) > 2.0  # a trained drafter: more than two tokens per target call


@pytest.mark.skipif(not (COMMITTED / "drafter" / "model.safetensors").is_file(), reason="no committed drafter")
def test_block_spec_through_factory_decodes_exactly():
    """`make_drafter("block:PATH", target)` gives (the target to verify with, the drafter); greedy
    decoding through `decode()` equals the target's autoregressive decoding token for token — also when
    decode is handed the plain target (the drafter verifies with its own feature view of it)."""
    from engine.models.load import load_model
    from engine.drafters import make_drafter
    from engine.drafters.block import BlockDrafter, FeatureLM

    t = load_model(str(COMMITTED), "fp32", "cpu", role="target")
    target_lm, drafter = make_drafter(f"block:{COMMITTED}", t)
    assert isinstance(target_lm, FeatureLM) and isinstance(drafter, BlockDrafter)
    prompt = t.tokenizer("Write a short story about a robot who")["input_ids"]
    cfg = DecodeConfig(max_new_tokens=48)
    ar = [x for r in decode(t.lm, None, prompt, None, cfg) for x in r.emitted_tokens]
    assert ar == greedy_reference(t.lm.model, prompt, 48)
    for tgt in (target_lm, t.lm):
        recs = list(decode(tgt, drafter, prompt, Fixed(drafter.block_size - 1), cfg))
        assert [x for r in recs for x in r.emitted_tokens] == ar
        assert len(recs) < 24  # drafts were accepted: fewer than half as many target calls as tokens
    with pytest.raises(ValueError, match="K = 1 verifier"):
        make_drafter(f"block:{COMMITTED}", t, verifier="rrs", k=2)
    with pytest.raises(ValueError, match="block:PATH"):
        make_drafter("block:", t)


def test_the_bench_probe_times_one_block_forward_and_leaves_the_drafter_usable(target):
    """engine.bench.runner.block_step_ms: a finite time for one block forward, the target's cache left empty, and
    the next request's drafts exactly a fresh drafter's; nan for a drafter that is not a block drafter."""
    import math

    from engine.bench.runner import block_step_ms

    lm = make_lm(target, seed=3)
    ft = FeatureLM(target, LAYERS)
    d = BlockDrafter(lm, ft)
    ids = list(range(2, 14))
    t = block_step_ms(ft, d, ids, reps=2)
    assert math.isfinite(t) and t > 0 and ft.length == 0
    ft.extend(ids[:-1])
    d.reset(ids)
    ref_ft = FeatureLM(target, LAYERS)
    ref = BlockDrafter(lm, ref_ft)
    ref_ft.extend(ids[:-1])
    ref.reset(ids)
    assert torch.equal(d.block_logits(ids[-1], len(ids) - 1), ref.block_logits(ids[-1], len(ids) - 1))
    assert math.isnan(block_step_ms(ft, object(), ids))
