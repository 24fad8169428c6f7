"""Tiny models built from configs inside the tests: no downloads, seconds to build."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.models import HFModel

VOCAB = 64

# Test models are tiny: one thread avoids intra-op synchronisation that costs 30× on a loaded 2-core box.
torch.set_num_threads(1)


def tiny_llama(seed: int, layers: int = 2, hidden: int = 32, vocab: int = VOCAB) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    # No special tokens: generate() must neither stop early nor mask prompt tokens as padding.
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model


def greedy_reference(model, prompt, n):
    x = torch.tensor([prompt])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt):].tolist()


def noisy_copy(model: LlamaForCausalLM, seed: int, scale: float = 0.5) -> LlamaForCausalLM:
    """A draft that agrees with the target often but not always: the target plus weight noise."""
    draft = tiny_llama(seed, layers=model.config.num_hidden_layers, hidden=model.config.hidden_size,
                       vocab=model.config.vocab_size)
    draft.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=g))
    return draft


@pytest.fixture(scope="session")
def tiny_target() -> LlamaForCausalLM:
    return tiny_llama(0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_target) -> LlamaForCausalLM:
    return noisy_copy(tiny_target, 1)


@pytest.fixture()
def pair(tiny_target, tiny_draft):
    return HFModel(tiny_target, "tiny-target"), HFModel(tiny_draft, "tiny-draft")
