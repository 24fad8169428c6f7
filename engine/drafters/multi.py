"""K i.i.d. draft blocks per step from one draft LM (for SpecTr, RRS, RBV, SpecTr-GBV).

Every block is drafted to the same length γ = the policy's cap (`keep` is not consulted: the
multi-draft verifiers need one common length). The first drafted position shares one draft
forward; each block then samples its own tokens with its own uniforms from the request generator,
so the K blocks are i.i.d. from q given the prefix — the assumption every multi-draft verifier
needs.

Two ways to run the K drafts (`mode`):

    "batch"       replicate the draft KV cache K ways and run one batch-K forward per position
                  (γ − 1 forwards in all); commit keeps the chosen row.  HFModel only.
    "sequential"  draft the blocks one after another, cropping back to the prefix in between
                  (K·(γ − 1) forwards); works for any LM (TableLM in the tests).
    "auto"        batch for an HFModel, sequential otherwise.

Cache bookkeeping (S = tokens in the sequence): after `draft` the sequential cache holds x[:S];
the batched cache holds K rows of x[:S] + x^k_{1:γ−1}. `commit(keep_len, chosen)` selects row `chosen`
(batch) and crops to min(length, keep_len), so the cache is always a prefix of the sequence.

Worked example: K = 3, γ = 4, batch mode → 1 forward for the shared first position (plus any
uncached tokens) and 3 forwards of batch 3, versus 1 + 9 one-token forwards in sequential mode.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.core.lm import prefill
from engine.core.sampling import SamplingConfig, draw_token
from engine.drafters.base import DrafterBase, Keep, Proposal


@dataclass(frozen=True)
class MultiDraftConfig:
    k: int = 3  # SpecTr-GBV's main setting (K = 3); K = 1 is ordinary speculative decoding
    mode: str = "auto"  # batched drafting where the LM supports it: one forward per position for all K

    def __post_init__(self) -> None:
        if not 1 <= self.k <= 16:
            raise ValueError(f"K must be in [1, 16], got {self.k}")
        if self.mode not in ("auto", "batch", "sequential"):
            raise ValueError(f"mode must be auto, batch or sequential, got {self.mode!r}")


def _is_hf(lm) -> bool:
    """An LM with a batchable KV cache (engine.core.lm.HFModel)."""
    return hasattr(lm, "extend_batch") and hasattr(lm, "cache")


class MultiDrafter(DrafterBase):
    """K i.i.d. draft blocks of the policy's cap length from one draft LM."""

    def __init__(self, lm, cfg: MultiDraftConfig = MultiDraftConfig()) -> None:
        self.lm = lm
        self.cfg = cfg
        self.k = cfg.k
        self.vocab_size = lm.vocab_size
        self.device = getattr(lm, "device", None)
        self.dtype = getattr(lm, "dtype", None)
        self.vocab_subset = getattr(lm, "vocab_subset", None)  # trace headers report the reduced head
        self.name = f"{getattr(lm, 'name', 'draft')}×{cfg.k}"
        mode = cfg.mode
        if mode == "auto":
            mode = "batch" if _is_hf(lm) and cfg.k > 1 else "sequential"
        if mode == "batch" and not _is_hf(lm):
            raise ValueError("batched drafting needs an HFModel draft (use mode='sequential')")
        self.mode = mode
        self._rows = 1  # batch rows currently in the draft cache
        self._last: int | None = None  # sequential mode: the block whose drafts are still cached
        self._base = 0  # sequential mode: cache length before the blocks were drafted

    def reset(self, prompt_ids: list[int]) -> None:
        self.lm.reset()
        self._rows, self._last = 1, None
        if len(prompt_ids) > 1:
            prefill(self.lm, prompt_ids[:-1])

    def draft(self, seq: list[int], cap: int, keep: Keep, sc: SamplingConfig, gen: torch.Generator) -> Proposal:
        K = self.k
        if cap <= 0:
            return Proposal.empty(self.vocab_size, K)
        first = self.lm.extend(seq[self.lm.length:])[-1]  # shared first position
        S = self.lm.length
        blocks, qs, shown, ents = [], [], [], []

        def add(k: int, logits_row: torch.Tensor) -> None:
            d = draw_token(logits_row.float(), sc, gen)  # float32 confidences whatever the LM's logits dtype
            blocks[k].append(d.token), qs[k].append(d.q), shown[k].append(d.shown), ents[k].append(d.entropy)

        for k in range(K):
            blocks.append([]), qs.append([]), shown.append([]), ents.append([])
            add(k, first)
        if self.mode == "batch" and cap > 1:
            self.lm.cache.batch_repeat_interleave(K)
            self._rows = K
            for _ in range(cap - 1):
                ids = torch.tensor([[b[-1]] for b in blocks], dtype=torch.long)
                logits = self.lm.extend_batch(ids)[:, -1]
                for k in range(K):
                    add(k, logits[k])
        elif cap > 1:
            for k in range(K):
                for _ in range(cap - 1):
                    add(k, self.lm.extend([blocks[k][-1]])[-1])
                if k < K - 1:
                    self.lm.crop(S)
            self._last, self._base = K - 1, S  # the cache still holds the last block's drafted tokens
        q_mats = [torch.stack(r) for r in qs]
        return Proposal(blocks, q_mats, shown, ents, "cap", {"k": K, "draft_mode": self.mode})

    def commit(self, keep_len: int, chosen: int = 0) -> None:
        if self._rows > 1:
            self.lm.cache.batch_select_indices(torch.tensor([chosen], device=self.lm.device))
            self._rows = 1
        elif self._last is not None and chosen != self._last:
            # Sequential: the cache still holds the last block's drafts; keep them only if it was chosen.
            keep_len = min(keep_len, self._base)
        self._last = None
        self.lm.crop(min(self.lm.length, keep_len))

    def observe(self, target) -> None:
        pass
