"""DFlash-style parallel block drafter: one draft forward predicts a whole block of B tokens.

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
block, never another anchor's block.

Decoding: `BlockDrafter` implements the drafter protocol of `engine.drafters`; the target must be a
`FeatureLM` (an `HFModel` that also keeps the selected layers' hidden states of every cached
position). Per step: one draft forward over B query tokens; `observe` appends the new target
features to the drafter's context K/V cache (positions < the next anchor). The block's own K/V is
never cached. Verification is the engine's usual lossless verifier.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.core.load import HFModel
from engine.core.sampling import SamplingConfig, entropy, probs_from_logits, sample_from

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
        sub = h @ self._sub_head.T.to(h.dtype)
        out = torch.full((*h.shape[:-1], self.vocab_size), float("-inf"), dtype=sub.dtype, device=h.device)
        out[..., self.vocab_subset] = sub
        return out


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


class FeatureLM(HFModel):
    """An HFModel that also keeps the selected layers' hidden states of every cached position.

    `features` [length, K·D] stays aligned with the KV cache through extend / crop / reset, so a
    block drafter can read the target's state after each verify call (drafter.observe).
    """

    def __init__(self, model, layer_ids: tuple[int, ...], name: str = "") -> None:
        super().__init__(model, name=name)
        self.layer_ids = tuple(layer_ids)
        self.features = torch.zeros(0, len(self.layer_ids) * model.config.hidden_size)

    def reset(self) -> None:
        super().reset()
        self.features = self.features[:0]

    def crop(self, n: int) -> None:
        super().crop(n)
        self.features = self.features[:n]

    @torch.inference_mode()
    def extend(self, ids: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        pos = torch.arange(self.length, self.length + len(ids), device=self.device).unsqueeze(0)
        base = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
        out = base(input_ids=x, use_cache=True, position_ids=pos, output_hidden_states=True,
                   **{self._cache_kw: self.cache})
        f = torch.cat([out.hidden_states[l + 1][0] for l in self.layer_ids], -1).float().cpu()
        self.features = torch.cat([self.features, f])
        logits = self.model.get_output_embeddings()(out.last_hidden_state[0])
        self.length += len(ids)
        return logits.float()


# ------------------------------------------------------------------ decode-time drafter


class BlockDrafter:
    """Drafter protocol for a block drafter: one draft forward per step proposes up to B−1 tokens.

    The context K/V cache holds the projected target features of positions [0, n_ctx); it is synced
    from `target.features` in reset() (after the decode loop's prefill) and observe() (after each
    verify + crop). The anchor of a step is the last sequence token x[S−1] at position S−1, and the
    target cache then holds exactly positions < S−1, so the block sees context positions < anchor.
    """

    def __init__(self, lm: BlockLM, target: FeatureLM) -> None:
        if tuple(target.layer_ids) != tuple(lm.config.target_layer_ids):
            raise ValueError(f"target features come from layers {target.layer_ids}, the drafter was trained on "
                             f"{lm.config.target_layer_ids}")
        self.lm = lm
        self.target = target
        self.vocab_size = lm.vocab_size
        self.device = target.device
        self.dtype = lm.model.fc.weight.dtype
        self.name = "block-drafter"
        self.block_size = lm.config.block_size
        self._k: list[torch.Tensor] = []
        self._v: list[torch.Tensor] = []
        self.n_ctx = 0

    def _sync(self) -> None:
        n = self.target.length
        if n < self.n_ctx:  # never happens in the decode loop (only committed positions are ingested)
            self._k = [k[:, :, :n] for k in self._k]
            self._v = [v[:, :, :n] for v in self._v]
            self.n_ctx = n
        if n == self.n_ctx:
            return
        with torch.inference_mode():
            feats = self.target.features[self.n_ctx:n][None]
            pos = torch.arange(self.n_ctx, n)[None]
            kv = self.lm.model.context_kv(feats, pos)
        if not self._k:
            self._k, self._v = [k for k, _ in kv], [v for _, v in kv]
        else:
            self._k = [torch.cat([a, k], 2) for a, (k, _) in zip(self._k, kv)]
            self._v = [torch.cat([a, v], 2) for a, (_, v) in zip(self._v, kv)]
        self.n_ctx = n

    def reset(self, prompt_ids: list[int]) -> None:
        self.n_ctx = 0
        c = self.lm.config
        dt = self.lm.model.fc.weight.dtype
        empty = torch.zeros(1, c.num_kv_heads, 0, c.head_dim, dtype=dt)
        self._k = [empty for _ in range(c.num_layers)]
        self._v = [empty for _ in range(c.num_layers)]
        self._sync()

    @torch.inference_mode()
    def block_logits(self, anchor: int, pos0: int) -> torch.Tensor:
        """Logits [B−1, V] of the block anchored at `anchor` (position pos0)."""
        c = self.lm.config
        ids = torch.full((1, c.block_size), c.mask_token_id, dtype=torch.long)
        ids[0, 0] = anchor
        pos = torch.arange(pos0, pos0 + c.block_size)[None]
        h = self.lm.model(self.lm.embed(ids), pos, list(zip(self._k, self._v)), None)
        return self.lm.logits(h[0, 1:]).float()

    def propose(self, seq: list[int], cap: int, policy, sc: SamplingConfig, gen: torch.Generator):
        from engine.drafters.base import Proposal

        self._sync()
        if self.n_ctx != len(seq) - 1:
            raise RuntimeError(f"block drafter out of sync: context {self.n_ctx}, sequence {len(seq)}")
        n = min(cap, self.block_size - 1)
        if n <= 0:
            return Proposal([[]], [torch.zeros(0, self.vocab_size)], [[]], [[]], "cap",
                            {"block_size": self.block_size})
        logits = self.block_logits(seq[-1], len(seq) - 1)[:n]
        drafts, rows, shown, ents = [], [], [], []
        for i in range(n):
            q = probs_from_logits(logits[i], sc)
            soft = q if not sc.greedy else logits[i].softmax(-1)
            tok = int(q.argmax()) if sc.greedy else sample_from(q, float(torch.rand((), generator=gen)))
            drafts.append(tok)
            rows.append(q)
            shown.append(float(soft[tok]))
            ents.append(float(entropy(soft)))
        stop = "cap" if n == cap else "block"
        return Proposal([drafts], [torch.stack(rows)], [shown], [ents], stop, {"block_size": self.block_size})

    def commit(self, keep: int, chosen: int = 0) -> None:
        pass  # the block's own K/V is never cached; context K/V only grows with committed positions

    def observe(self, target) -> None:
        self._sync()


# ------------------------------------------------------------------ save / load


def save_block_drafter(model: BlockDrafterModel, out_dir: str | Path, extra: dict | None = None,
                       dtype: torch.dtype = torch.float32, vocab_subset: torch.Tensor | None = None) -> Path:
    """config.json + model.safetensors (drafter weights only; embedding/head come from the target),
    and vocab_subset.safetensors when the drafter scores a reduced head."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().clone() for k, v in model.state_dict().items()}
    tmp = out / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt", "schema": SCHEMA})
    os.replace(tmp, out / "model.safetensors")
    if vocab_subset is not None:
        tv = out / "vocab_subset.safetensors.tmp"
        save_file({"vocab_subset": vocab_subset.to(torch.int32).contiguous()}, str(tv))
        os.replace(tv, out / "vocab_subset.safetensors")
    cfg = {"schema": SCHEMA, "version": 1, **model.config.to_dict(), **(extra or {})}
    tmpc = out / "config.json.tmp"
    tmpc.write_text(json.dumps(cfg, indent=1))
    os.replace(tmpc, out / "config.json")
    return out


def load_block_drafter(path: str | Path) -> BlockDrafterModel:
    from safetensors.torch import load_file

    p = Path(path)
    if not (p / "config.json").is_file() or not (p / "model.safetensors").is_file():
        raise FileNotFoundError(f"{p} is not a block-drafter directory (config.json + model.safetensors)")
    d = json.loads((p / "config.json").read_text())
    if d.get("schema") != SCHEMA:
        raise ValueError(f"{p}/config.json: schema {d.get('schema')!r} is not {SCHEMA!r}")
    keys = {f for f in BlockDrafterConfig.__dataclass_fields__}
    model = BlockDrafterModel(BlockDrafterConfig.from_dict({k: v for k, v in d.items() if k in keys}))
    model.load_state_dict({k: v.float() for k, v in load_file(str(p / "model.safetensors")).items()})
    return model.eval()


def load_block_vocab(path: str | Path) -> torch.Tensor | None:
    """The reduced head a drafter was trained with (None: the full vocabulary)."""
    from safetensors.torch import load_file

    f = Path(path) / "vocab_subset.safetensors"
    return load_file(str(f))["vocab_subset"].long() if f.is_file() else None


__all__ = ["BlockDrafterConfig", "BlockDrafterModel", "BlockLM", "BlockDrafter", "FeatureLM", "block_logits",
           "block_attention_mask", "block_inputs", "target_features", "build_target_layer_ids",
           "save_block_drafter", "load_block_drafter", "load_block_vocab"]
