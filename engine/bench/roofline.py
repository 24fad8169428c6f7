"""The memory roofline of a one-token decode step: the weight bytes it reads, and how close a measured
speed comes to reading them at the machine's bandwidth (engine.bench.bandwidth).

    bytes_per_token(lm) -> TokenBytes    the weight bytes one one-token forward reads, per kind
    fraction(tps, bytes, bw) -> float    the share of the roofline a measured speed reaches
    annotate(rows, bytes, bw)            adds `roofline_fraction` to result rows that carry tokens/s

The floor of a step that must read B bytes at bandwidth W is B ÷ W seconds, so

    roofline tokens/s   R = W ÷ B
    fraction            f = (B ÷ W) ÷ measured s/token = measured tokens/s ÷ R = tps · B ÷ W

Worked example: the 1.5B target in bf16 reads B ≈ 3.09 GB a token (1.31 G linear weights + the
151,936 × 1536 head, ×2 bytes); at W = 10 GB/s, R = 3.24 tokens/s; measured 2.80 tokens/s → f = 0.86.
Its quantized path reads ≈ 1.1 GB: R = 9.1 tokens/s, and 3.14 tokens/s is f = 0.35 — compute-bound.
A speculative row can exceed 1: it emits several tokens per read of the target's weights; its
fraction is still tokens/s ÷ the target's AR roofline, i.e. how far past the AR floor it went.

What a one-token step reads (`bytes_per_token`), per module of the model:
    linear      every linear layer's weight (and bias) as stored: bf16 / fp32 tensors, or the packed
                quantized buffers of engine.kernels.quant / engine.kernels.qkernel (codes, scales, minima);
                a quantized head's dense `weight` attribute (kept for shape readers) is never read
    head        the output head, whole — or only its |V′| rows for a reduced head (vocab_subset)
    embedding   one row: the lookup is a gather, not a stream
    other       norms, rotary frequencies: every parameter and buffer of the remaining modules
A tensor that two modules share (fused views, tied heads) is counted once. The KV cache read grows with
the context: `kv_bytes_per_context_token` (2 · layers · kv heads · head dim · element size), reported
beside the weights, not in B.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

KINDS = ("linear", "head", "embedding", "other")


@dataclass(frozen=True)
class TokenBytes:
    """Weight bytes one one-token forward reads, by kind (see the module doc)."""

    linear: int
    head: int
    embedding: int
    other: int
    kv_per_context_token: int  # KV-cache bytes per token of context (read by attention, not in `total`)

    @property
    def total(self) -> int:
        return self.linear + self.head + self.embedding + self.other

    def to_dict(self) -> dict[str, int]:
        return {"bytes_per_token": self.total, "linear": self.linear, "head": self.head, "embedding": self.embedding,
                "other": self.other, "kv_bytes_per_context_token": self.kv_per_context_token}


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _is_quantized(m: torch.nn.Module) -> bool:
    """A layer of engine.kernels.quant / qkernel: its weights are its buffers (codes, scales, minima)."""
    return hasattr(m, "fmt") and hasattr(m, "out_features") and any(True for _ in m.buffers(recurse=False))


def _read_tensors(m: torch.nn.Module) -> list[torch.Tensor]:
    """The tensors a module's forward streams. A quantized layer reads its buffers and bias, never the dense
    `weight` a quantized head keeps for readers of its shape."""
    if _is_quantized(m):
        out = list(m.buffers(recurse=False))
        return out + ([m.bias] if getattr(m, "bias", None) is not None else [])
    return list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))


def _kv_bytes(model: torch.nn.Module) -> int:
    cfg = getattr(model, "config", None)
    layers = getattr(cfg, "num_hidden_layers", None)
    heads = getattr(cfg, "num_attention_heads", None)
    if cfg is None or not layers or not heads:
        return 0
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    elem = torch.finfo(next(model.parameters()).dtype).bits // 8
    return 2 * layers * kv * head_dim * elem


def bytes_per_token(lm: Any) -> TokenBytes:
    """The weight bytes a one-token forward of `lm` reads: an engine LM (engine.core.lm.HFModel: its
    `.model`, and `vocab_subset` for a reduced head) or a bare torch module."""
    model = lm if isinstance(lm, torch.nn.Module) else getattr(lm, "model", None)  # a causal LM's .model is its decoder
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"{type(lm).__name__} holds no torch model: no weight bytes to count")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    subset = getattr(lm, "vocab_subset", None)
    seen: set[tuple[int, int]] = set()
    counts = dict.fromkeys(KINDS, 0)
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding) and m is not head:
            counts["embedding"] += _nbytes(m.weight[0])  # one row per token: a gather
            continue
        tensors = _read_tensors(m)
        new = 0
        for t in tensors:
            key = (t.data_ptr(), _nbytes(t))
            if key in seen or not _nbytes(t):
                continue
            seen.add(key)
            new += _nbytes(t)
        if not new:
            continue
        if m is head:
            rows = getattr(m, "out_features", None) or m.weight.shape[0]
            counts["head"] += new if subset is None else new * int(subset.numel()) // rows
        elif isinstance(m, torch.nn.Linear) or _is_quantized(m):
            counts["linear"] += new
        else:
            counts["other"] += new
    return TokenBytes(counts["linear"], counts["head"], counts["embedding"], counts["other"], _kv_bytes(model))


def gguf_bytes_per_token(path) -> int | None:
    """The bytes llama.cpp reads per token from a GGUF: every tensor as stored, less the token embedding when
    the file has its own output head (then the embedding is only gathered); None where it cannot be read."""
    try:
        from gguf import GGUFReader

        tensors = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    except Exception:  # a stand-in or truncated file: the fraction is unknown, not an error of the run
        return None
    total = sum(tensors.values())
    if "output.weight" in tensors:
        total -= tensors.get("token_embd.weight", 0)
    return total or None


def fraction(tokens_per_s: float | None, bytes_per_token: float | None, bandwidth_gb_s: float | None) -> float | None:
    """f = tokens/s · bytes/token ÷ bandwidth (None when any is unknown or not positive).

    >>> round(fraction(2.80, 3.09e9, 10.0), 3)
    0.865
    """
    if not tokens_per_s or not bytes_per_token or not bandwidth_gb_s:
        return None
    if tokens_per_s < 0 or bytes_per_token < 0 or bandwidth_gb_s < 0:
        return None
    return tokens_per_s * bytes_per_token / (bandwidth_gb_s * 1e9)


def roofline_tokens_per_s(bytes_per_token: float, bandwidth_gb_s: float) -> float:
    """R = W ÷ B: the AR speed a step reading B bytes at W GB/s cannot beat (3.09 GB at 10 GB/s → 3.24)."""
    if not bytes_per_token > 0 or not bandwidth_gb_s > 0:
        raise ValueError(f"roofline needs positive bytes per token and bandwidth, got {bytes_per_token}, {bandwidth_gb_s}")
    return bandwidth_gb_s * 1e9 / bytes_per_token


def annotate(rows: list[dict[str, Any]], bytes_by_path: dict[str, int], bandwidth_gb_s: float | None,
             path_key: str = "weights", default_path: str = "dense") -> list[dict[str, Any]]:
    """Each row with `roofline_fraction` (its tokens/s against the AR roofline of its path's target) and,
    where the row has it, `decode_roofline_fraction` (decode-only tokens/s). Rows of a path with no byte
    count, or without a bandwidth, get None: the field says the figure is unknown, not zero."""
    out = []
    for r in rows:
        b = bytes_by_path.get(r.get(path_key) or default_path)
        r = dict(r, roofline_fraction=fraction(r.get("tokens_per_s"), b, bandwidth_gb_s))
        if "decode_tokens_per_s" in r:
            r["decode_roofline_fraction"] = fraction(r.get("decode_tokens_per_s"), b, bandwidth_gb_s)
        out.append(r)
    return out
