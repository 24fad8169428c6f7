"""Hindsight: the target's own run and the draft's predictions along it — the one computation behind
reference runs (engine.offline.reference) and the hindsight oracle policy (engine.policies.oracle).

Notation: y_0..y_{N-1} = the target's output (decode with draft=None), position j = the prediction
of y_j from prompt + y_<j. Teacher-forcing the draft along y gives its logits at every j, hence
d_j = argmax q_j (the draft's greedy prediction ŷ_j) and

    match_j = [d_j == y_j],     A(j) = match_j · (1 + A(j+1)),  A(N) = 0

A(j) is the accepted run (excluding the bonus token) of a greedy step that starts at j with an
unlimited window: the oracle drafts exactly min(A(j), max) tokens, the offline replay walks A.

How many tokens one teacher-forced forward feeds is the only knob: a reference feeds CHUNK at a
time (it needs every row's full distribution and bounds the [chunk, V] logits memory); the oracle
feeds one at a time, the decode loop's own one-token forwards, so its ŷ are the very numbers the
draft produces while drafting. Both prefill prompt[:-1] in CHUNK pieces (one forward for prompts up
to CHUNK + 1 tokens, as the drafter's own prefill).

torch and the decode loop are imported inside the functions: the reference file reader imports
`accept_runs` from here and must stay torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.trace.reference_file import accept_runs  # noqa: F401  (A(j): defined with the file it fills)

if TYPE_CHECKING:
    import torch

    from engine.core.sampling import SamplingConfig
    from engine.decode import StepRecord

CHUNK = 256  # tokens per teacher-forced forward of a reference: bounds the [chunk, V] logits memory


def target_run(target, prompt: list[int], max_new_tokens: int, sampling: "SamplingConfig | None" = None,
               eos_ids=(), request_id: int = 0) -> "list[StepRecord]":
    """The target alone (decode with draft=None, greedy unless `sampling`); y = the steps' emitted tokens."""
    from engine.decode import DecodeConfig, decode

    cfg = DecodeConfig(max_new_tokens=max_new_tokens) if sampling is None else \
        DecodeConfig(max_new_tokens=max_new_tokens, sampling=sampling)
    return list(decode(target, None, prompt, None, cfg, eos_ids=eos_ids, request_id=request_id))


def teacher_forced(lm, prompt: list[int], output: list[int], feed: int = CHUNK) -> "torch.Tensor":
    """Logits [N, V] of `lm` predicting each y_j from prompt + y_<j, `feed` tokens per forward;
    leaves the full context cached."""
    import torch

    from engine.core.lm import prefill

    lm.reset()
    if len(prompt) > 1:
        for i in range(0, len(prompt) - 1, CHUNK):
            prefill(lm, prompt[i:min(i + CHUNK, len(prompt) - 1)])
    rows = []
    ctx = prompt[-1:] + output[:-1]
    for i in range(0, len(ctx) if output else 0, feed):
        rows.append(lm.extend(ctx[i:i + feed]))
    return torch.cat(rows) if rows else torch.zeros(0, lm.vocab_size)


def hindsight(target, draft, prompt_ids: list[int], max_new_tokens: int, eos_ids=()) -> tuple[list[int], list[int]]:
    """(y, ŷ): the target's greedy continuation and the draft's teacher-forced greedy predictions,
    one token per forward (what the hindsight oracle needs; see the module doc)."""
    import torch

    with torch.inference_mode():
        y = [t for s in target_run(target, prompt_ids, max_new_tokens, eos_ids=eos_ids) for t in s.emitted_tokens]
        pred = teacher_forced(draft, prompt_ids, y, feed=1).argmax(-1).tolist()
    return y, [int(p) for p in pred]
