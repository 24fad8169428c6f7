"""Tiny random Llama models built from a config: for tests, the app's offline demo and sweep examples.

They have no special tokens (no BOS/EOS/PAD), so generate() neither stops early on a random EOS nor
masks prompt tokens as padding, and nothing is ever downloaded.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(seed: int, vocab: int = 64, layers: int = 2, hidden: int = 32) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model


def noisy_copy(model: LlamaForCausalLM, seed: int, scale: float = 0.5) -> LlamaForCausalLM:
    """The model's weights plus Gaussian noise of `scale` × each tensor's std: a draft that agrees with
    the target often but not always (its quality is tunable by `scale`)."""
    cfg = model.config
    draft = tiny_llama(seed, cfg.vocab_size, cfg.num_hidden_layers, cfg.hidden_size)
    draft.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=g))
    return draft
