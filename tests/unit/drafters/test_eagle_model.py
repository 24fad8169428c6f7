"""The head's network: causality of every unrolled step, and the start from a target layer."""

import torch

from engine.drafters.eagle_model import EagleConfig, EagleHead, init_from_target
from tests.conftest import tiny_llama


def make_head(seed=0, layers=(0, 1)) -> EagleHead:
    c = EagleConfig(hidden_size=32, target_layers=layers, num_heads=4, num_kv_heads=2, intermediate_size=48,
                    rope_theta=10000.0, vocab_size=64, draft_vocab=64, target="tiny")
    torch.manual_seed(seed)
    return EagleHead(c).eval()


def test_unrolled_step_ignores_future_features():
    head = make_head(2)
    g = torch.Generator().manual_seed(0)
    feats = torch.randn(1, 12, 64, generator=g)
    emb = torch.randn(1, 12, 32, generator=g)
    pos = torch.arange(12)[None]
    with torch.no_grad():
        a = head.unrolled(emb, feats, pos, 3)
        f2 = feats.clone()
        f2[0, 6:] += 1.0  # positions ≥ 6 change: every step's output at t ≤ 5 must not
        b = head.unrolled(emb, f2, pos, 3)
    for j in range(3):
        assert torch.allclose(a[j][0, :6], b[j][0, :6], atol=1e-6)
        assert not torch.allclose(a[j][0, 8:], b[j][0, 8:], atol=1e-3)



def test_init_from_a_target_layer_copies_attention_and_prunes_the_mlp():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    t = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2)).eval()
    head = make_head(1)
    info = init_from_target(head, t, -1)
    tl = t.model.layers[-1]
    assert torch.equal(head.layer.q_proj.weight, tl.self_attn.q_proj.weight)
    assert info["layer"] == 1 and info["mlp_neurons"] == 48
    kept = tl.mlp.down_proj.weight.norm(dim=0).topk(48).indices.sort().values
    assert torch.equal(head.layer.down_proj.weight, tl.mlp.down_proj.weight[:, kept])
    D = 32  # the layer first sees the deepest fused feature passed through
    assert torch.equal(head.fuse.weight[:, -D:], torch.eye(D)) and float(head.fuse.weight[:, :-D].abs().sum()) == 0
