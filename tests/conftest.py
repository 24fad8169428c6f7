"""Tiny models built from configs inside the tests: no downloads, seconds to build."""

import pytest
import torch
from engine.core.load import HFModel
from engine.core.tiny import noisy_copy, tiny_llama  # noqa: F401  (re-exported for the tests)

VOCAB = 64

# Test models are tiny: one thread avoids intra-op synchronisation that costs 30× on a loaded 2-core box.
torch.set_num_threads(1)


def greedy_reference(model, prompt, n):
    x = torch.tensor([prompt])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


@pytest.fixture(scope="session")
def tiny_target():
    return tiny_llama(0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_target):
    return noisy_copy(tiny_target, 1)


@pytest.fixture()
def pair(tiny_target, tiny_draft):
    return HFModel(tiny_target, "tiny-target"), HFModel(tiny_draft, "tiny-draft")


def decode_with_contexts(target, draft, prompt, policy, n, **kw):
    """A decode run's steps, the context each step started from, and the new tokens (drafter tests)."""
    from engine.decode import DecodeConfig, decode
    from engine.policies.base import parse_policy

    steps = list(decode(target, draft, prompt, parse_policy(policy), DecodeConfig(max_new_tokens=n, **kw)))
    seq, ctx = list(prompt), []
    for s in steps:
        ctx.append(list(seq))
        seq.extend(s.emitted_tokens)
    return steps, ctx, seq[len(prompt):]
