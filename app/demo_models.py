"""Tiny random Llama models built from configs: the app's stand-in pair when no trained one is around.

They exist so the bundled demo traces and the Live page work on a fresh clone with nothing
downloaded. Their weights are random, so their "text" is meaningless token ids; every place that
shows them says so. The draft is the target plus weight noise, which makes it agree with the target
often but not always — the regime where window length matters. Imports torch: only the Live page and
`app.make_demo_traces` use this module.
"""

from __future__ import annotations

from engine.models.tiny import noisy_copy, tiny_llama  # noqa: F401  (the demo pair's builders)

TINY_LABEL = "tiny random demo models (untrained; tokens are ids, not text)"
TINY_TARGET = "tiny-random-llama-target"
TINY_DRAFT = "tiny-random-llama-draft"
TINY_VOCAB = 64  # as in the tests: big enough for varied drafts, small enough to build instantly


def tiny_pair(seed: int = 0, noise: float = 0.1):
    """(target, draft) as HFModel wrappers. noise 0.1 gives a fixed:4 acceptance of about two thirds
    on the demo prompts — a realistic trained-draft regime (0.2 already drops it to about a quarter)."""
    from engine.core.lm import HFModel

    target = tiny_llama(seed)
    draft = noisy_copy(target, seed + 1, noise)
    return HFModel(target, TINY_TARGET), HFModel(draft, TINY_DRAFT)


def text_to_ids(text: str, vocab: int = TINY_VOCAB) -> list[int]:
    """Tiny models have no tokenizer: one id per UTF-8 byte, folded into the vocabulary."""
    return [b % vocab for b in text.encode("utf-8")]
