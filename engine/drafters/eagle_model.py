"""The EAGLE-style draft head: one decoder layer that drafts in the target's feature space.

Notation (EAGLE-1/3, mapped once): the target has processed x_0 … x_n; f_t is its feature at position t
(the outputs of `target_layers`, concatenated: [K·D]), the one that chose x_{t+1}. The head reads

    g_t   = fuse(f_t)                                     [D]   (EAGLE-3's low/mid/high fusion; K = 1: top layer)
    u_t   = fc([norm_e(E x_{t+1}) ; norm_g(g_t)])         [D]   E: the target's own embedding, frozen
    h_t   = Layer(u_{≤t})                                 [D]   one causal decoder layer (RoPE, GQA, SwiGLU)
    p̂(x_{t+2}) = softmax(W_sub · norm_f(h_t))                   W_sub: the target's LM-head rows of a draft vocabulary

and drafts autoregressively: the next draft step uses h_t in place of g_{t+1} (it has no target
feature for a token the target has not seen yet) with the embedding of the token it just drafted.
E and W_sub are read from the target at load time and never stored: a saved head is the fusion, fc,
the layer and three norms (~36 M parameters in bf16 ≈ 72 MB with the default 4096-wide MLP).

Training-time test (EAGLE-3): unroll step j ≥ 2 feeds h^{(j−1)}_{t−1} as g_t; its query at t attends
to the step-1 keys of positions ≤ t − j + 1 and, on the diagonal, to step i's key at t − j + i
(i = 2 … j) — exactly the cache a decode step j sees (real context, then its own earlier drafts).

Worked example (U = 2, positions 0…4): step-2's query at t = 3 attends to step-1 keys 0, 1, 2 and
its own step-2 key at 3, and predicts x_5 from h^{(1)}_2 and E x_4.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.drafters.block_model import _rope as rope  # the block drafter's rotate-half RoPE (Qwen2 layout)

SCHEMA = "speclab.eagle_head"


@dataclass(frozen=True)
class EagleConfig:
    hidden_size: int = 1536  # the target's D (Qwen2.5-Coder-1.5B)
    target_layers: tuple = (1, 13, 25)  # EAGLE-3's low/mid/high for 28 layers; (27,) = EAGLE-1's top feature
    num_heads: int = 12  # the target's head layout, so the layer can start from a target layer
    num_kv_heads: int = 2
    intermediate_size: int = 4096  # < the target's 8960: keeps the head ≤ 80 MB in bf16 and c small
    rope_theta: float = 1_000_000.0  # the target's RoPE base
    rms_eps: float = 1e-6
    vocab_size: int = 151_936  # the target's vocabulary (q rows are this wide)
    draft_vocab: int = 32_768  # rows of the target's head the drafter scores (models/qwen2.5-coder/draft-vocab)
    target: str = "qwen2.5-coder-1.5b"  # the short name of the target it was trained for

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def feat_dim(self) -> int:
        return len(self.target_layers) * self.hidden_size

    def to_dict(self) -> dict:
        return {**asdict(self), "target_layers": list(self.target_layers)}

    @classmethod
    def from_dict(cls, d: dict) -> "EagleConfig":
        f = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        if "target_layers" in f:
            f["target_layers"] = tuple(int(x) for x in f["target_layers"])
        return cls(**f)


class EagleLayer(nn.Module):
    """A Qwen2 decoder layer (names match transformers', so a target layer's weights load into it)."""

    def __init__(self, c: EagleConfig) -> None:
        super().__init__()
        D, H, KV, hd = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
        self.c = c
        self.input_layernorm = nn.RMSNorm(D, eps=c.rms_eps)
        self.post_attention_layernorm = nn.RMSNorm(D, eps=c.rms_eps)
        self.q_proj = nn.Linear(D, H * hd, bias=True)
        self.k_proj = nn.Linear(D, KV * hd, bias=True)
        self.v_proj = nn.Linear(D, KV * hd, bias=True)
        self.o_proj = nn.Linear(H * hd, D, bias=False)
        self.gate_proj = nn.Linear(D, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(D, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, D, bias=False)

    def qkv(self, u: torch.Tensor, pos: torch.Tensor):
        """q [b, H, s, hd], k, v [b, KV, s, hd] of inputs u [b, s, D] at positions pos [b, s]."""
        c = self.c
        b, s, _ = u.shape
        x = self.input_layernorm(u)
        q = self.q_proj(x).view(b, s, c.num_heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, c.num_kv_heads, c.head_dim).transpose(1, 2)
        return rope(q, pos, c.rope_theta), rope(k, pos, c.rope_theta), v

    def finish(self, u: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """The residual tail: attn [b, H, s, hd] → the layer output h [b, s, D]."""
        b, _, s, _ = attn.shape
        h = u + self.o_proj(attn.transpose(1, 2).reshape(b, s, -1))
        x = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class EagleHead(nn.Module):
    """The trainable part of the drafter (the module doc's fuse, fc, norms and layer)."""

    def __init__(self, c: EagleConfig) -> None:
        super().__init__()
        D = c.hidden_size
        self.config = c
        self.fuse = nn.Linear(c.feat_dim, D, bias=False)
        self.norm_e = nn.RMSNorm(D, eps=c.rms_eps)
        self.norm_g = nn.RMSNorm(D, eps=c.rms_eps)
        self.fc = nn.Linear(2 * D, D, bias=False)
        self.layer = EagleLayer(c)
        self.norm_f = nn.RMSNorm(D, eps=c.rms_eps)

    def inputs(self, emb: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.cat([self.norm_e(emb), self.norm_g(g)], -1))

    # ---------------------------------------------------------------- training: U unrolled steps
    def unrolled(self, emb: torch.Tensor, feats: torch.Tensor, pos: torch.Tensor, steps: int) -> list[torch.Tensor]:
        """Layer outputs h^{(j)} [b, s, D] for j = 1 … steps (module doc's training-time test).

        emb[t] = E x_{t+1}, feats[t] = f_t; every step's h^{(j)}[t] predicts x_{t+2} (step j reads the
        chain started at t − j + 1 from the real feature f_{t−j+1}). Position t of step j is valid for
        t ≥ j − 1; callers mask earlier ones out of the loss."""
        c = self.config
        g = self.fuse(feats)
        u = self.inputs(emb, g)
        q, k1, v1 = self.layer.qkv(u, pos)
        rep = c.num_heads // c.num_kv_heads
        k1r, v1r = k1.repeat_interleave(rep, 1), v1.repeat_interleave(rep, 1)
        h = self.layer.finish(u, F.scaled_dot_product_attention(q, k1r, v1r, is_causal=True))
        outs, diag_k, diag_v = [h], [], []
        s = emb.shape[1]
        scale = 1.0 / math.sqrt(c.head_dim)
        for j in range(2, steps + 1):
            prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)  # h^{(j−1)}_{t−1}
            u = self.inputs(emb, prev)
            q, k, v = self.layer.qkv(u, pos)
            diag_k.append(k.repeat_interleave(rep, 1))
            diag_v.append(v.repeat_interleave(rep, 1))
            # real context: step-1 keys at positions ≤ t − j + 1
            ctx = (q @ k1r.transpose(-1, -2)) * scale  # [b, H, s, s]
            allowed = torch.ones(s, s, dtype=torch.bool, device=q.device).tril(-(j - 1))
            ctx = ctx.masked_fill(~allowed, float("-inf"))
            # diagonal: step i's key at t − j + i (i = 2 … j; the last one is the query's own key)
            dk = [self._shift(kk, j - i) for i, kk in zip(range(2, j + 1), diag_k)]
            dv = [self._shift(vv, j - i) for i, vv in zip(range(2, j + 1), diag_v)]
            dscore = torch.stack([(q * kk).sum(-1) * scale for kk in dk], -1)  # [b, H, s, j−1]
            # rows with no real context yet (t < j − 1) are masked out of the loss; keep them finite
            w = torch.softmax(torch.cat([ctx, dscore.to(ctx.dtype)], -1).float(), -1).to(q.dtype)
            a = w[..., :s] @ v1r + (w[..., s:, None] * torch.stack(dv, -2)).sum(-2)
            h = self.layer.finish(u, a)
            outs.append(h)
        return outs

    @staticmethod
    def _shift(x: torch.Tensor, n: int) -> torch.Tensor:
        """x[..., t − n, :] along the sequence dim (2), zero-filled."""
        if n == 0:
            return x
        return torch.cat([torch.zeros_like(x[:, :, :n]), x[:, :, :-n]], 2)


def init_from_target(head: EagleHead, target, layer: int = -1) -> dict:
    """Start the head's layer from the target's `layer` (attention whole; the MLP from the
    `intermediate_size` neurons with the largest down-projection norms) and norm_f from the target's
    final norm. Returns what was copied, for the run record."""
    tl = target.model.layers[layer]
    L = head.layer
    with torch.no_grad():
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(L, n).weight.copy_(getattr(tl.self_attn, n).weight.float())
            if getattr(L, n).bias is not None:
                getattr(L, n).bias.copy_(getattr(tl.self_attn, n).bias.float())
        L.input_layernorm.weight.copy_(tl.input_layernorm.weight.float())
        L.post_attention_layernorm.weight.copy_(tl.post_attention_layernorm.weight.float())
        down = tl.mlp.down_proj.weight.float()  # [D, I]
        keep = down.norm(dim=0).topk(head.config.intermediate_size).indices.sort().values
        L.gate_proj.weight.copy_(tl.mlp.gate_proj.weight.float()[keep])
        L.up_proj.weight.copy_(tl.mlp.up_proj.weight.float()[keep])
        L.down_proj.weight.copy_(down[:, keep])
        head.norm_f.weight.copy_(target.model.norm.weight.float())
        # the layer first sees what a target layer sees: the deepest fused feature passed through
        # (u ≈ norm(f_t[last]) + a small share of the next token's embedding), not a random projection
        D = head.config.hidden_size
        head.fuse.weight.zero_()
        head.fuse.weight[:, -D:].copy_(torch.eye(D))
        head.fc.weight.zero_()
        head.fc.weight[:, :D].copy_(0.5 * torch.eye(D))
        head.fc.weight[:, D:].copy_(torch.eye(D))
    n_layers = len(target.model.layers)
    return {"init": "target", "layer": layer % n_layers, "mlp_neurons": int(keep.numel()),
            "fuse": "identity on the deepest feature", "fc": "[0.5·I | I]"}
