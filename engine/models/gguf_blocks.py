"""A GGUF file's Q4_K, Q5_0, Q8_0 and Q6_K tensors as their raw blocks, by transformers name: what the quantized
path reads where the file is on disk (`make models` keeps it for the peers), so those layers are the GGUF's own
weights at the GGUF's own bits (engine.kernels.qkernel.QGemmLinear.from_blocks) rather than a re-quantisation of
their de-quantised values — Q4_K at 4.5 bits a weight where int4 groups take 5, Q5_0 at 5.5 where int8 takes 9, Q8_0
at 8.5, Q6_K at 6.56 where int6 groups take 7 (on both builds of our qgemm kernel: `qkernel.reads`).

    GGUFBlocks(path)            memory-maps the file's tensor data (its header parsed once: provision.gguf_tensors)
    GGUFBlocks(path)(hf_name)   uint8 [N, row bytes]: that tensor's blocks, row by row as the file stores them;
                                None for a tensor of another type or not in the file
    GGUFBlocks(path).bits(hf_name)   its qgemm code (qkernel.Q4K, Q50, Q80, Q6K), None likewise
    gguf_source(model) -> GGUFBlocks | None   an installed model's pinned GGUF, when it is on disk and
                                SPECLAB_GGUF_BLOCKS is not 0 (0: every layer re-quantised, for comparisons;
                                SPECLAB_Q4K=0, its earlier name, too)

A tensor of ggml dims [K, N] is N rows of K / (weights a block) blocks (qgemm.c's header gives each layout).
Names map as engine.models.gguf_types maps them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from engine.kernels.qkernel import BLOCKS, Q4K, Q6K, Q50, Q80
from engine.models.gguf_types import hf_name

TYPES = {12: Q4K, 6: Q50, 8: Q80, 14: Q6K}  # ggml type number → the qgemm code that reads it (its shape: qkernel.BLOCKS)


class GGUFBlocks:
    def __init__(self, path: Path) -> None:
        from engine.models.provision import gguf_tensors

        self.path = Path(path)
        start, _, tensors = gguf_tensors(self.path)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._at = {}
        for name, dims, ttype, offset, nbytes in tensors:
            hf = hf_name(name)
            if hf is None or ttype not in TYPES or len(dims) != 2:
                continue
            code = TYPES[ttype]
            tname, per, size = BLOCKS[code]
            k, n = dims
            if k % per:
                continue
            if nbytes != n * k // per * size or start + offset + nbytes > self._map.size:
                raise ValueError(f"{self.path.name}: tensor {name} does not fit its {tname} shape {dims} (truncated "
                                 "file? `python -m engine models --keep-gguf` re-assembles it; SPECLAB_GGUF_BLOCKS=0 "
                                 "loads without it)")
            self._at[hf] = (start + offset, n, k // per * size, code)

    def __contains__(self, hf: str) -> bool:
        return hf in self._at

    def bits(self, hf: str) -> int | None:
        got = self._at.get(hf)
        return None if got is None else got[3]

    def __call__(self, hf: str) -> torch.Tensor | None:
        got = self._at.get(hf)
        if got is None:
            return None
        at, n, row, _ = got
        return torch.from_numpy(np.array(self._map[at:at + n * row]).reshape(n, row))


def gguf_source(model: str) -> GGUFBlocks | None:
    """The pinned GGUF of an installable model (engine.models.provision.MODELS) as GGUFBlocks, when on disk."""
    if os.environ.get("SPECLAB_GGUF_BLOCKS", "1") == "0" or os.environ.get("SPECLAB_Q4K", "1") == "0":
        return None  # SPECLAB_Q4K: the switch's name when only Q4_K was read (the 2026-12-06 logs use it)
    from engine.models.provision import MODELS, gguf_path

    if model not in MODELS:
        return None
    p = gguf_path(MODELS[model])
    return GGUFBlocks(p) if p.is_file() else None
