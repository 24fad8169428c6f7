"""A GGUF file's Q4_K tensors as their raw blocks, by transformers name: what the quantized path reads where
the file is on disk (`make models` keeps it for the peers), so its 4-bit layers are the GGUF's own weights at the
GGUF's own 4.5 bits (engine.kernels.qkernel.QGemmLinear.from_q4k) rather than a re-quantisation of their
de-quantised values at 5.

    Q4KBlocks(path)            memory-maps the file's tensor data (its header parsed once: provision.gguf_tensors)
    Q4KBlocks(path)(hf_name)   uint8 [N, K/256·144]: that tensor's blocks, row by row as the file stores them;
                               None for a tensor that is not Q4_K or not in the file
    q4k_source(model) -> Q4KBlocks | None    an installed model's pinned GGUF, when it is on disk and
                               SPECLAB_Q4K is not 0 (0: the re-quantised int4 layers, for comparisons)

A Q4_K tensor of ggml dims [K, N] is N rows of K / 256 blocks of 144 bytes (qgemm.c's header: d, dmin, 12 bytes of
scale and minimum codes, 128 of nibbles). Names map as engine.models.gguf_types maps them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from engine.models.gguf_types import hf_name

Q4_K = 12  # ggml's type number
BLOCK, BLOCK_BYTES = 256, 144


class Q4KBlocks:
    def __init__(self, path: Path) -> None:
        from engine.models.provision import gguf_tensors

        self.path = Path(path)
        start, _, tensors = gguf_tensors(self.path)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._q4k = {}
        for name, dims, ttype, offset, nbytes in tensors:
            hf = hf_name(name)
            if hf is None or ttype != Q4_K or len(dims) != 2 or dims[0] % BLOCK:
                continue
            k, n = dims
            if nbytes != n * k // BLOCK * BLOCK_BYTES or start + offset + nbytes > self._map.size:
                raise ValueError(f"{self.path.name}: tensor {name} does not fit its Q4_K shape {dims} (truncated file? "
                                 "`python -m engine models --keep-gguf` re-assembles it; SPECLAB_Q4K=0 loads without it)")
            self._q4k[hf] = (start + offset, n, k // BLOCK * BLOCK_BYTES)

    def __contains__(self, hf: str) -> bool:
        return hf in self._q4k

    def __call__(self, hf: str) -> torch.Tensor | None:
        got = self._q4k.get(hf)
        if got is None:
            return None
        at, n, row = got
        return torch.from_numpy(np.array(self._map[at:at + n * row]).reshape(n, row))


def q4k_source(model: str) -> Q4KBlocks | None:
    """The pinned GGUF of an installable model (engine.models.provision.MODELS) as Q4KBlocks, when on disk."""
    if os.environ.get("SPECLAB_Q4K", "1") == "0":
        return None
    from engine.models.provision import MODELS, gguf_path

    if model not in MODELS:
        return None
    p = gguf_path(MODELS[model])
    return Q4KBlocks(p) if p.is_file() else None
