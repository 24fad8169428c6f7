"""The head's window replay is exact: replayed steps equal the decode loop's own steps."""

import pytest
import torch

from engine.decode import DecodeConfig, decode
from engine.drafters.block import FeatureLM
from engine.drafters.eagle import EagleDrafter
from engine.drafters.eagle_model import EagleConfig, EagleHead
from engine.policies.simple import Fixed
from engine.train.eagle import windows as W
from tests.conftest import greedy_reference, tiny_llama

LAYERS = (0, 1)


def _setup():
    t = tiny_llama(7, vocab=16, layers=2, hidden=32)
    with torch.no_grad():
        t.lm_head.weight.mul_(8.0)  # a peaked target: the head gets some drafts right
    c = EagleConfig(hidden_size=32, target_layers=LAYERS, num_heads=4, num_kv_heads=2, intermediate_size=48,
                    rope_theta=10000.0, vocab_size=16, draft_vocab=16, target="tiny")
    torch.manual_seed(1)
    head = EagleHead(c)
    _fit(head, t)
    return t, head.eval()


def _fit(head, t, steps=150):
    """A few Adam steps on the target's greedy continuations, so that replays cover accepted drafts."""
    from engine.train.eagle.data import IGNORE
    from engine.train.eagle.train import Frozen, step_loss

    g = torch.Generator().manual_seed(0)
    fr = Frozen(t.get_input_embeddings().weight, t.get_output_embeddings().weight, torch.arange(16))
    fr.embed, fr.sub_head = fr.embed.float(), fr.sub_head.float()  # the tiny test runs without autocast
    opt = torch.optim.Adam(head.parameters(), lr=3e-3)
    for _ in range(steps):
        ids = torch.stack([torch.tensor(greedy_reference(t, torch.randint(0, 16, (3,), generator=g).tolist(), 13))
                           for _ in range(4)])
        with torch.no_grad():
            out = t(ids, output_hidden_states=True)
        feats = torch.cat([out.hidden_states[l + 1] for l in LAYERS], -1)
        nxt = out.logits.argmax(-1)  # the target's next token at every position
        lab = torch.full_like(ids, IGNORE)
        lab[:, :-1] = nxt[:, 1:]
        loss, _ = step_loss(head, fr, ids, feats, lab, 2)
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.slow  # ~25 s: a real decode loop beside the replay; the full suite runs it
def test_fixed_windows_replay_the_decode_loop_exactly():
    t, head = _setup()
    prompt, n = [3, 1, 4, 1, 5], 24
    y = greedy_reference(t, prompt, n)
    W_emb, sub = t.get_input_embeddings().weight, t.get_output_embeddings().weight
    ch = W.chains(head, W_emb, sub, torch.arange(16), t, prompt, y, K=5, task="x")
    total_acc = 0
    for K in (1, 2, 3, 5):
        ft = FeatureLM(t, LAYERS)
        recs = list(decode(ft, EagleDrafter(head, ft, torch.arange(16)), prompt, Fixed(K),
                           DecodeConfig(max_new_tokens=n)))
        ws, acc = W.replay(ch, lambda row: K)
        assert [r.accepted for r in recs] == acc
        total_acc += sum(acc)
    assert total_acc > 0  # the comparison covered accepting steps


@pytest.mark.slow  # ~25 s: a real decode loop beside the replay; the full suite runs it
def test_oracle_is_no_worse_than_any_fixed_window_and_autocorrelation():
    t, head = _setup()
    prompt, n = [2, 7, 1, 8], 20
    y = greedy_reference(t, prompt, n)
    ch = W.chains(head, t.get_input_embeddings().weight, t.get_output_embeddings().weight, torch.arange(16), t,
                  prompt, y, K=4, task="x")
    v = W.verify_curve({1: 10.0, 2: 11.0, 4: 13.0, 8: 18.0})
    res = W.analyse([ch], c=0.1, v=v, K=4)["tasks"]["overall"]
    assert res["oracle"]["speedup"] >= max(res[f"fixed:{k}"]["speedup"] for k in range(1, 5)) - 1e-9
    assert res["oracle_over_best_fixed"] >= 1.0
    assert W.lag1([1, 0, 1, 0, 1, 0]) < -0.5 and W.lag1([0, 0, 1, 1, 1]) > 0
    assert v(1) == 1.0 and abs(v(3) - 1.2) < 1e-9
