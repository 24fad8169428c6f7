"""Training the EAGLE-style head for the Qwen2.5-Coder-1.5B target: features (`features_config`, the
block-data extractor with the head's defaults), data (`data`), the trainer (`train`) and the report
(`report`). Features are made and consumed on one machine in one session: only the head, its training
trace and its curve are kept (models/, docs/results/)."""

from __future__ import annotations

import dataclasses

from engine.train.blockdata.extract import ExtractConfig

# Six layers serve both drafter kinds from one extraction: EAGLE-3's low/mid/high (1, 13, 25) and the
# top layer (27) for the head, DFlash's five (1, 7, 13, 19, 25) for the block drafter. 18 KB a token.
EAGLE_LAYERS = (1, 7, 13, 19, 25, 27)


def features_config() -> ExtractConfig:
    """The extractor's defaults for this session's head: both cores, GEMM-filling prefill batches
    (4 × 1024 tokens: 126 → 155 tok/s from 4 × 512 to 8 × 512 measured on an AMX Xeon), every position labelled."""
    from engine.models.smollm import cache_root

    return dataclasses.replace(ExtractConfig(), out_dir=str(cache_root() / "features-qwen-eagle"), layers=EAGLE_LAYERS,
                               threads=2, batch_tokens=4096, label_prompt=True, min_free_gb=20.0)
