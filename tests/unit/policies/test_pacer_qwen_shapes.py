"""PACER on the Qwen pair's shapes: a tiny random Qwen2-config pair with the 0.5B draft's hidden size
(896) goes through the same path as the real pair — recording, packed training, the by-hidden-size
default weights, decoding — in seconds."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import engine.policies.pacer as pacer_mod
from engine.core.lm import HFModel
from engine.decode import DecodeConfig, decode
from engine.offline.steps import load_split
from engine.policies.base import parse_policy
from engine.train.pacer.fit import PacerTrainConfig, train
from tests.conftest import greedy_reference, record_pacer_shards

QWEN_DRAFT_HIDDEN = 896  # Qwen2.5-Coder-0.5B-Instruct


def tiny_qwen(seed: int, noise_from: Qwen2ForCausalLM | None = None) -> Qwen2ForCausalLM:
    """One layer at the 0.5B's width and head layout (14 heads of 64, 2 KV heads, tied embeddings)."""
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=64, hidden_size=QWEN_DRAFT_HIDDEN, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    m = Qwen2ForCausalLM(cfg).eval()
    m.generation_config.eos_token_id = m.generation_config.pad_token_id = None
    if noise_from is not None:  # a draft that agrees with the target often but not always
        m.load_state_dict(noise_from.state_dict())
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.3 * p.std() * torch.randn(p.shape, generator=g))
    return m


@pytest.fixture(scope="module")
def qwen_pair():
    t = tiny_qwen(0)
    return t, tiny_qwen(1, noise_from=t)


@pytest.fixture(scope="module")
def trained(qwen_pair, tmp_path_factory):
    tm, dm = qwen_pair
    root = tmp_path_factory.mktemp("qwen-pacer")
    record_pacer_shards(HFModel(tm, "qt"), HFModel(dm, "qd", want_hidden=True), root, max_new_tokens=16)
    w = root / "mb.safetensors"
    out = train(PacerTrainConfig(data_dir=str(root), out=str(w), run_dir=str(root / "run"), steps=4,
                                 batch_rows=2, pack_len=24, eval_every=2, d_model=16), progress=False)
    return root, w, out


def test_recorded_states_are_896_wide_and_mb_reads_them(trained):
    root, w, out = trained
    data = load_split(root, "train")
    assert data.hidden.shape[1] == QWEN_DRAFT_HIDDEN
    mb, _ = pacer_mod.load_weights(w)
    assert mb.cfg.hidden_size == QWEN_DRAFT_HIDDEN and mb.proj.in_features == QWEN_DRAFT_HIDDEN
    assert 0.0 <= out["heldout"]["ece"] <= 1.0


def test_default_weights_follow_the_draft_hidden_size(trained, qwen_pair, monkeypatch):
    _, w, _ = trained
    tm, dm = qwen_pair
    monkeypatch.setitem(pacer_mod.DEFAULT_WEIGHTS_BY_HIDDEN, QWEN_DRAFT_HIDDEN, w)
    pol = parse_policy("pacer:b=2,t=0.5,max=6")
    assert pol.model is None  # chosen at the first drafted token, by its hidden size
    target, draft = HFModel(tm, "qt"), HFModel(dm, "qd", want_hidden=True)
    steps = list(decode(target, draft, [3, 17, 5], pol, DecodeConfig(max_new_tokens=12)))
    assert pol.model is not None and pol.model.cfg.hidden_size == QWEN_DRAFT_HIDDEN
    assert [t for s in steps for t in s.emitted_tokens] == greedy_reference(tm, [3, 17, 5], 12)
    assert any(s.policy_fields.get("blocks") for s in steps), "M_B never scored a block"


def test_unknown_hidden_size_and_mismatched_weights_are_refused(qwen_pair, monkeypatch):
    tm, dm = qwen_pair
    target, draft = HFModel(tm, "qt"), HFModel(dm, "qd", want_hidden=True)
    monkeypatch.delitem(pacer_mod.DEFAULT_WEIGHTS_BY_HIDDEN, QWEN_DRAFT_HIDDEN)
    with pytest.raises(ValueError, match="no committed pacer weights for draft hidden size 896"):
        list(decode(target, draft, [3, 17, 5], parse_policy("pacer"), DecodeConfig(max_new_tokens=4)))
    smollm_weights = pacer_mod.DEFAULT_WEIGHTS  # trained on 576-wide states
    with pytest.raises(ValueError, match="expect draft hidden size 576, the draft gives 896"):
        list(decode(target, draft, [3, 17, 5], parse_policy(f"pacer:weights={smollm_weights}"),
                    DecodeConfig(max_new_tokens=4)))


def test_committed_default_weights_match_their_hidden_sizes():
    """Each by-hidden-size default is committed and was trained on states of that width."""
    for size, path in pacer_mod.DEFAULT_WEIGHTS_BY_HIDDEN.items():
        assert path.is_file(), path
        mb, _ = pacer_mod.load_weights(path)
        assert mb.cfg.hidden_size == size, (path, mb.cfg.hidden_size)
