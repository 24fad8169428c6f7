"""Tiny models: random Llamas built from a config (tests, the app's offline demo, sweep examples), and
the byte-level tiny target's tokenizer and loader (models/block-drafter-tiny; trained by
engine.train.dpace.tiny_target, loaded here so that engine.models.load needs nothing from train/).

The random Llamas have no special tokens (no BOS/EOS/PAD), so generate() neither stops early on a
random EOS nor masks prompt tokens as padding, and nothing is ever downloaded.
"""

from __future__ import annotations

from pathlib import Path

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


# ------------------------------------------------------------------ the byte-level tiny target

# Bytes 0–255, then four special ids; the mask id never occurs in the data (see tiny_target's doc).
PAD, BOS, EOS, MASK = 256, 257, 258, 259
VOCAB = 260


class ByteTokenizer:
    """Minimal tokenizer: UTF-8 bytes plus four special ids (never a chat template)."""

    vocab_size = VOCAB
    pad_token_id, bos_token_id, eos_token_id, mask_token_id = PAD, BOS, EOS, MASK
    chat_template = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def __call__(self, text: str) -> dict:
        return {"input_ids": self.encode(text)}

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


def load_target(path: str | Path, dtype=torch.float32) -> LlamaForCausalLM:
    """The tiny target saved under `path` (local files only), with generate()'s EOS/PAD stops off."""
    m = LlamaForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True).eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = None
    return m
