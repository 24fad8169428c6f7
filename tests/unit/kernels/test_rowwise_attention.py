"""The batch-invariant attention of the quantized path: a k-token forward gives bit-identical logits to
k one-token steps; masks it cannot take go to SDPA."""

import pytest
import torch

from engine.kernels import qkernel
from engine.core.lm import HFModel
from engine.kernels.accelerate import accelerate
from engine.kernels.rowwise_attention import NAME, _plain_causal, rowwise_attention
from tests.conftest import tiny_llama

needs_kernel = pytest.mark.skipif(qkernel.available() is not None, reason=f"qgemm kernel: {qkernel.available()}")


@needs_kernel
@pytest.mark.parametrize("weights", ["int4", "int8"])
def test_a_verify_block_equals_its_one_token_steps_bit_for_bit(weights):
    m = tiny_llama(0, layers=3).to(torch.bfloat16)
    accelerate(m, weights, act_dtype=torch.bfloat16)  # what model loading runs
    assert m.config._attn_implementation == NAME
    lm = HFModel(m)
    prompt, block = [4, 8, 15, 16, 23, 42, 7], [3, 1, 4, 1, 5, 9, 2, 6]
    lm.extend(prompt)
    steps = torch.stack([lm.extend([t])[-1] for t in block])
    lm.reset()
    lm.extend(prompt)
    assert torch.equal(lm.extend(block), steps)


def test_torch_kernels_keep_sdpa():
    m = tiny_llama(0).to(torch.bfloat16)
    accelerate(m, "int8", act_dtype=torch.bfloat16, kernel="torch")  # not batch-invariant: nothing to gain
    assert m.config._attn_implementation != NAME


def test_the_causal_check():
    q, kv = 3, 7
    causal = torch.ones(q, kv, dtype=torch.bool).tril(kv - q)[None, None]
    assert _plain_causal(None, q, kv) and _plain_causal(causal, q, kv)
    additive = torch.zeros(1, 1, q, kv).masked_fill(~causal, float("-inf"))
    assert _plain_causal(additive, q, kv)
    tree = causal.clone()
    tree[0, 0, 2, 5] = False  # a sibling branch masked out: not plain causal
    assert not _plain_causal(tree, q, kv) and not _plain_causal(causal.expand(2, 1, q, kv), q, kv)


def test_rows_match_sdpa_numerically_and_other_masks_fall_back():
    torch.manual_seed(0)
    qy, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    causal = torch.ones(3, 7, dtype=torch.bool).tril(4)[None, None]
    ref = torch.nn.functional.scaled_dot_product_attention(qy, k, v, attn_mask=causal, enable_gqa=True).transpose(1, 2)
    out, _ = rowwise_attention(torch.nn.Module(), qy, k, v, causal, scaling=8 ** -0.5)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    tree = causal.clone()
    tree[0, 0, 2, 5] = False
    attn = torch.nn.Module()
    attn.num_key_value_groups, attn.is_causal = 2, True  # what transformers' SDPA reads off the layer
    fallback, _ = rowwise_attention(attn, qy, k, v, tree, scaling=8 ** -0.5)
    ref_tree = torch.nn.functional.scaled_dot_product_attention(qy, k, v, attn_mask=tree, enable_gqa=True)
    torch.testing.assert_close(fallback, ref_tree.transpose(1, 2), atol=1e-5, rtol=1e-5)
