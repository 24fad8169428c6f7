"""Toy fixtures for the block-data tests: a tiny random Qwen2-shaped target, a byte tokenizer with
the chat template's shape, and toy examples (no real model, no ShareGPT, no network)."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.train.blockdata.sources import Example

IM_START, IM_END, EOT, PAD, MASK = 256, 257, 258, 259, 260
VOCAB = 272
LAYERS = (0, 2)


class ByteChatTokenizer:
    """Bytes 0–255 + a few specials; `apply_chat_template` wraps the message like Qwen's template."""

    eos_token_id = IM_END
    pad_token_id = PAD
    unk_token_id = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def convert_tokens_to_ids(self, t: str):
        return {"<|im_end|>": IM_END, "<|endoftext|>": EOT}.get(t)

    def apply_chat_template(self, msgs, add_generation_prompt=True, tokenize=True):
        ids = [IM_START] + self.encode("user\n" + msgs[0]["content"]) + [IM_END, IM_START]
        return ids + self.encode("assistant\n")


def tiny_target(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    c = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                    tie_word_embeddings=False, pad_token_id=PAD, eos_token_id=IM_END)
    return Qwen2ForCausalLM(c).eval()


def save_target(model, d: Path) -> Path:
    from safetensors.torch import save_file

    d.mkdir(parents=True, exist_ok=True)
    model.config.to_json_file(str(d / "config.json"))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(d / "model.safetensors"))
    return d


def toy_streams(n: int = 24) -> dict[str, list[Example]]:
    words = ["alpha", "beta", "gamma", "delta", "def f(x):", "return x", "print(y)", "for i in range(3):"]
    sg = [Example("sharegpt", f"c{i}", f"question {i}: {words[i % 8]}?",
                  " ".join(words[(i + j) % 8] for j in range(8 + i % 5))) for i in range(n)]
    sl = [Example("stdlib", f"m:f{i}", f"Write f{i}", "```python\n" + "\n".join(words[(i * 3 + j) % 8]
                                                                          for j in range(6)) + "\n```")
          for i in range(n // 2)]
    return {"sharegpt": sg, "stdlib": sl}
