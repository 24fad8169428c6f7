"""Tiny random Llama models built from configs: the app's stand-in pair when no trained one is around.

They exist so the bundled demo traces and the Live page work on a fresh clone with nothing
downloaded. Their weights are random, so their "text" is meaningless token ids; every place that
shows them says so. The draft is the target plus weight noise, which makes it agree with the target
often but not always — the regime where window length matters. Imports torch: only the Live page and
`app.make_demo_traces` use this module.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

TINY_LABEL = "tiny random demo models (untrained; tokens are ids, not text)"
TINY_TARGET = "tiny-random-llama-target"
TINY_DRAFT = "tiny-random-llama-draft"
TINY_VOCAB = 64  # as in the tests: big enough for varied drafts, small enough to build instantly


def tiny_llama(seed: int, vocab: int = TINY_VOCAB, layers: int = 2, hidden: int = 32) -> LlamaForCausalLM:
    """A two-layer Llama with no special tokens, so decoding never stops early on a random EOS."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model


def noisy_copy(model: LlamaForCausalLM, seed: int, scale: float) -> LlamaForCausalLM:
    """The target's weights plus Gaussian noise of `scale` × each tensor's std: a draft of tunable quality."""
    cfg = model.config
    draft = tiny_llama(seed, cfg.vocab_size, cfg.num_hidden_layers, cfg.hidden_size)
    draft.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=g))
    return draft


def tiny_pair(seed: int = 0, noise: float = 0.1):
    """(target, draft) as HFModel wrappers. noise 0.1 gives a fixed:4 acceptance of about two thirds
    on the demo prompts — a realistic trained-draft regime (0.2 already drops it to about a quarter)."""
    from engine.models import HFModel

    target = tiny_llama(seed)
    draft = noisy_copy(target, seed + 1, noise)
    return HFModel(target, TINY_TARGET), HFModel(draft, TINY_DRAFT)


def text_to_ids(text: str, vocab: int = TINY_VOCAB) -> list[int]:
    """Tiny models have no tokenizer: one id per UTF-8 byte, folded into the vocabulary."""
    return [b % vocab for b in text.encode("utf-8")]
