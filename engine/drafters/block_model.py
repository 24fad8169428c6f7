"""The DFlash-style block drafter's network (config, layers, `BlockDrafterModel`, `BlockLM`) and its
training-time forward (`block_attention_mask`, `block_inputs`, `block_logits`, `target_features`).

Architecture (DFlash, Chen et al. 2026, arXiv 2602.06036; official code z-lab/dflash):
  * target context feature  H_t = RMSNorm(W_c [h^(l1); …; h^(lK)])  from K target layers;
  * block input [x_anchor, <mask> × (B−1)], embedded with the target's frozen embedding table;
  * 1–2 Qwen3-style layers (pre-RMSNorm, QK-norm, RoPE, SwiGLU); in every layer the projected
    context is injected as extra keys/values: K = [W_K H_t ; W_K H_d], V = [W_V H_t ; W_V H_d],
    queries come from the block only; attention inside the block is bidirectional;
  * final RMSNorm, then the target's frozen LM head (optionally a reduced head over a token subset).
Block position k (1 ≤ k < B) predicts x_{a+k}; position 0 is the anchor (the last accepted token).

Training (engine.train.dpace.fit) puts many anchors of one sequence in one forward with
`block_attention_mask`: the block of anchor a sees context keys at positions < a and its own
block, never another anchor's block. Decoding with it: engine.drafters.block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.lm import subset_logits

SCHEMA = "speclab.block_drafter"


@dataclass(frozen=True)
class BlockDrafterConfig:
    hidden_size: int  # = the target's hidden size (embedding and head are the target's)
    target_layer_ids: tuple[int, ...]  # 0-indexed target layers; feature = output of layer l
    mask_token_id: int  # a row that exists in the target embedding and never occurs in data
    vocab_size: int
    block_size: int = 8  # B: anchor + B−1 drafted tokens
    num_layers: int = 1
    num_heads: int = 4
    num_kv_heads: int = 4
    head_dim: int = 32
    intermediate_size: int = 384
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.block_size < 2:
            raise ValueError(f"block_size must be ≥ 2, got {self.block_size}")
        if not self.target_layer_ids:
            raise ValueError("target_layer_ids must name at least one target layer")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target_layer_ids"] = list(self.target_layer_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BlockDrafterConfig":
        d = dict(d)
        d["target_layer_ids"] = tuple(d["target_layer_ids"])
        return cls(**d)


def build_target_layer_ids(num_target_layers: int, n: int) -> tuple[int, ...]:
    """DFlash's default layer choice (uniform from layer 1 to L−3; the middle layer when n = 1)."""
    if n == 1:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    if end <= start:  # degenerate for tiny targets: spread over all layers instead
        return tuple(sorted({round(i * (num_target_layers - 1) / (n - 1)) for i in range(n)}))
    return tuple(round(start + i * (end - start) / (n - 1)) for i in range(n))


# ------------------------------------------------------------------ model


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (rotate-half convention). x [b, h, n, d], pos [b, n] absolute positions."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.to(torch.float32)[..., None] * inv  # [b, n, d/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None].to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None].to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class _Layer(nn.Module):
    def __init__(self, c: BlockDrafterConfig) -> None:
        super().__init__()
        D, H, Hk, hd = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
        self.c = c
        self.input_norm = nn.RMSNorm(D, eps=c.rms_eps)
        self.q_proj = nn.Linear(D, H * hd, bias=False)
        self.k_proj = nn.Linear(D, Hk * hd, bias=False)
        self.v_proj = nn.Linear(D, Hk * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, D, bias=False)
        self.q_norm = nn.RMSNorm(hd, eps=c.rms_eps)
        self.k_norm = nn.RMSNorm(hd, eps=c.rms_eps)
        self.post_norm = nn.RMSNorm(D, eps=c.rms_eps)
        self.gate = nn.Linear(D, c.intermediate_size, bias=False)
        self.up = nn.Linear(D, c.intermediate_size, bias=False)
        self.down = nn.Linear(c.intermediate_size, D, bias=False)

    def kv(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values of inputs x [b, n, D] at positions pos [b, n] → [b, Hk, n, hd] each."""
        b, n, _ = x.shape
        c = self.c
        k = self.k_norm(self.k_proj(x).view(b, n, c.num_kv_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, c.num_kv_heads, c.head_dim).transpose(1, 2)
        return _rope(k, pos, c.rope_theta), v

    def forward(self, x, pos, ctx_k, ctx_v, mask):
        c = self.c
        b, n, _ = x.shape
        h = self.input_norm(x)
        q = self.q_norm(self.q_proj(h).view(b, n, c.num_heads, c.head_dim)).transpose(1, 2)
        q = _rope(q, pos, c.rope_theta)
        k_blk, v_blk = self.kv(h, pos)
        k = torch.cat([ctx_k, k_blk], 2)
        v = torch.cat([ctx_v, v_blk], 2)
        rep = c.num_heads // c.num_kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None])
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, n, c.num_heads * c.head_dim))
        h = self.post_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class BlockDrafterModel(nn.Module):
    """The trainable part: fc + hidden_norm + layers + final norm (no embedding, no head)."""

    def __init__(self, c: BlockDrafterConfig) -> None:
        super().__init__()
        self.config = c
        K = len(c.target_layer_ids)
        self.fc = nn.Linear(K * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = nn.RMSNorm(c.hidden_size, eps=c.rms_eps)
        self.layers = nn.ModuleList([_Layer(c) for _ in range(c.num_layers)])
        self.norm = nn.RMSNorm(c.hidden_size, eps=c.rms_eps)

    def context_kv(self, feats: torch.Tensor, pos: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer context K/V from raw target features feats [b, C, K·D] at positions pos [b, C]."""
        ht = self.hidden_norm(self.fc(feats.to(self.fc.weight.dtype)))
        return [layer.kv(ht, pos) for layer in self.layers]

    def forward(self, x: torch.Tensor, pos: torch.Tensor, ctx_kv, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [b, Q, D] block embeddings, pos [b, Q]; ctx_kv from context_kv; mask [b, Q, C+Q] bool
        (True = may attend) or None (every query sees every context key and every block key)."""
        for layer, (ck, cv) in zip(self.layers, ctx_kv):
            x = layer(x, pos, ck, cv, mask)
        return self.norm(x)


class BlockLM:
    """Drafter model + the target's frozen embedding and LM head (optionally a reduced head)."""

    def __init__(self, model: BlockDrafterModel, embed_weight: torch.Tensor, head_weight: torch.Tensor,
                 vocab_subset: torch.Tensor | None = None) -> None:
        self.model = model
        self.config = model.config
        self.embed_weight = embed_weight.detach()
        self.head_weight = head_weight.detach()
        self.vocab_size = int(head_weight.shape[0])
        self.vocab_subset = vocab_subset
        self._sub_head = None if vocab_subset is None else self.head_weight[vocab_subset]

    @classmethod
    def from_target(cls, model: BlockDrafterModel, target, vocab_subset=None) -> "BlockLM":
        return cls(model, target.get_input_embeddings().weight, target.get_output_embeddings().weight, vocab_subset)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.embed_weight).to(self.model.fc.weight.dtype)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        if self._sub_head is None:
            return h @ self.head_weight.T.to(h.dtype)
        return subset_logits(h @ self._sub_head.T.to(h.dtype), self.vocab_subset, self.vocab_size)


# ------------------------------------------------------------------ training-time block forward


def block_attention_mask(anchors: torch.Tensor, ctx_len: int, block_size: int) -> torch.Tensor:
    """[b, N·B, S + N·B] bool: query (n, k) sees context key j iff j < a_n, and block key (m, k') iff m = n."""
    b, N = anchors.shape
    B = block_size
    dev = anchors.device
    ctx = torch.arange(ctx_len, device=dev)[None, None, :] < anchors[:, :, None]  # [b, N, S]
    ctx = ctx[:, :, None, :].expand(b, N, B, ctx_len).reshape(b, N * B, ctx_len)
    blk_id = torch.arange(N, device=dev).repeat_interleave(B)
    own = (blk_id[:, None] == blk_id[None, :])[None].expand(b, N * B, N * B)
    return torch.cat([ctx, own], -1)


def block_inputs(ids: torch.Tensor, anchors: torch.Tensor, block_size: int, mask_id: int):
    """Block token ids [b, N, B] = [x_a, MASK…], positions [b, N, B], labels [b, N, B] (x_{a+k}, clamped),
    in_range [b, N, B] (a+k < S)."""
    S = ids.shape[1]
    k = torch.arange(block_size, device=ids.device)
    pos = anchors[..., None] + k  # [b, N, B]
    in_range = pos < S
    labels = ids.gather(1, pos.clamp(max=S - 1).flatten(1)).view_as(pos)
    blk = torch.full_like(pos, mask_id)
    blk[..., 0] = ids.gather(1, anchors)
    return blk, pos, labels, in_range


def block_logits(lm: BlockLM, ids: torch.Tensor, feats: torch.Tensor, anchors: torch.Tensor):
    """All anchors of each sequence in one forward. Returns (logits [b, N, B, V], labels, in_range)."""
    c = lm.config
    b, S = ids.shape
    N, B = anchors.shape[1], c.block_size
    blk, pos, labels, in_range = block_inputs(ids, anchors, B, c.mask_token_id)
    ctx_pos = torch.arange(S, device=ids.device)[None].expand(b, S)
    ctx_kv = lm.model.context_kv(feats, ctx_pos)
    mask = block_attention_mask(anchors, S, B)
    h = lm.model(lm.embed(blk.flatten(1)), pos.flatten(1), ctx_kv, mask)
    return lm.logits(h).view(b, N, B, -1), labels, in_range


# ------------------------------------------------------------------ target with layer features


@torch.no_grad()
def target_features(model, ids: torch.Tensor, layer_ids: tuple[int, ...]) -> torch.Tensor:
    """Concatenated outputs of the chosen target layers for full sequences: [b, S, K·D] float32.

    hidden_states[l + 1] is the output of layer l (hidden_states[0] is the embedding output), as in
    DFlash's extract_context_feature. Used for training data; `FeatureLM` computes the same values
    incrementally during decoding.
    """
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    out = base(input_ids=ids, output_hidden_states=True, use_cache=False)
    return torch.cat([out.hidden_states[l + 1] for l in layer_ids], -1).float()
