"""Decoding with the EAGLE-style head (engine.drafters.eagle_model): `--draft eagle:PATH`.

Per step, with S = len(seq) (x_0 … x_{S−1}) and the target's cache holding positions < S − 1:

    sync     the head's K/V cache gets the positions it lacks up to S − 2, each built from the target's
             feature f_t (engine.drafters.block.FeatureLM) and E x_{t+1}, in one batched forward; the
             output h_{S−2} of the last one drafts d_1 (≈ x_S)
    step i   (h_{S−3+i}, E d_{i−1}) at position S − 3 + i attends to the real cache and the step's
             earlier drafts (kept in a scratch cache, dropped after the step) → d_i
    keep()   after each draft, like every model drafter (the window policy decides when to stop)

Only verified positions enter the head's cache, so commit() has nothing to undo. Verification is
the engine's usual lossless verifier: greedy output is the target's own, at T > 0 its law.
The head's q is a softmax over the draft vocabulary's rows of the target's head (zero elsewhere).

Directory format (`save_eagle` / `load_eagle`): config.json (schema speclab.eagle_head, EagleConfig
and the training record) + model.safetensors (bf16). The embedding and head rows are read from the
target at load time; the draft vocabulary is models/qwen2.5-coder/draft-vocab.safetensors unless the
directory has its own vocab_subset.safetensors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from engine.core.kv_cache import GrowingTensor
from engine.core.lm import subset_logits
from engine.core.sampling import SamplingConfig, draw_token
from engine.drafters.base import DrafterBase, DrafterCaps, Keep, Proposal
from engine.drafters.block import FeatureLM, check_feature_target
from engine.drafters.eagle_model import SCHEMA, EagleConfig, EagleHead
from engine.policies.base import DraftInfo


class EagleDrafter(DrafterBase):
    """The drafter protocol over an EagleHead reading a FeatureLM target."""

    caps = DrafterCaps(hidden=True)

    def __init__(self, head: EagleHead, target: FeatureLM, subset: torch.Tensor) -> None:
        c = head.config
        if tuple(target.layer_ids) != tuple(c.target_layers):
            raise ValueError(f"target features come from layers {target.layer_ids}, the head reads {c.target_layers}")
        self.head, self.target, self.config = head, target, c
        hf = target.model
        self.dtype = next(head.parameters()).dtype
        self.embed = hf.get_input_embeddings().weight
        self.subset = subset
        self.sub_head = hf.get_output_embeddings().weight[subset].to(self.dtype)
        self.vocab_size = int(c.vocab_size)
        self.vocab_subset = subset  # trace headers report the reduced head
        self.name = "eagle"
        self.device = target.device
        self._k = GrowingTensor(2)
        self._v = GrowingTensor(2)
        self.n_ctx = 0
        self._h_last: torch.Tensor | None = None

    def reset(self, prompt_ids: list[int]) -> None:
        c = self.config
        self._k, self._v = GrowingTensor(2), GrowingTensor(2)
        empty = torch.zeros(1, c.num_heads, 0, c.head_dim, dtype=self.dtype)
        self._k.append(empty)
        self._v.append(empty.clone())
        self.n_ctx, self._h_last = 0, None

    def _attend(self, q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, causal_from: int) -> torch.Tensor:
        """q [1, H, s, hd] at positions causal_from … causal_from + s − 1 over keys 0 … len − 1."""
        s, n = q.shape[2], k_all.shape[2]
        qpos = torch.arange(causal_from, causal_from + s)[:, None]
        mask = torch.arange(n)[None, :] <= qpos
        return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask)

    @torch.inference_mode()
    def _sync(self, seq: list[int]) -> None:
        upto = len(seq) - 1  # positions 0 … S − 2 have a target feature and a next token
        if self.target.length < upto:
            raise RuntimeError(f"eagle drafter out of sync: target has {self.target.length} positions, needs {upto}")
        if self.n_ctx >= upto:
            return
        c, h = self.config, self.head
        a = self.n_ctx
        feats = self.target.features[a:upto].to(self.dtype)[None]
        nxt = torch.tensor(seq[a + 1: upto + 1])[None]
        u = h.inputs(F.embedding(nxt, self.embed).to(self.dtype), h.fuse(feats))
        q, k, v = h.layer.qkv(u, torch.arange(a, upto)[None])
        rep = c.num_heads // c.num_kv_heads
        self._k.append(k.repeat_interleave(rep, 1))
        self._v.append(v.repeat_interleave(rep, 1))
        att = self._attend(q, self._k.view(), self._v.view(), a)
        self._h_last = h.layer.finish(u, att)[0, -1]
        self.n_ctx = upto

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        sub = (self.head.norm_f(h[None]) @ self.sub_head.T)[0].float()
        return subset_logits(sub, self.subset, self.vocab_size)

    @torch.inference_mode()
    def draft(self, seq: list[int], cap: int, keep: Keep, sc: SamplingConfig, gen: torch.Generator) -> Proposal:
        if cap <= 0 or len(seq) < 2:  # a one-token sequence has no target feature to draft from yet
            return Proposal.empty(self.vocab_size)
        self._sync(seq)
        c, hd = self.config, self.head
        rep = c.num_heads // c.num_kv_heads
        drafts, q_rows, shown, ents, stop = [], [], [], [], "cap"
        h = self._h_last
        ks, vs = self._k.view(), self._v.view()
        pos = len(seq) - 2
        while True:
            d = draw_token(self._logits(h), sc, gen)
            drafts.append(d.token)
            q_rows.append(d.q)
            shown.append(d.shown)
            ents.append(d.entropy)
            hidden = h.float() if keep.want_hidden else None
            if not keep(DraftInfo(len(drafts), d.token, d.shown, d.entropy, hidden, d.q_max)):
                drop = keep.dropped
                if len(drafts) < cap or drop:
                    stop = "policy"
                if drop:
                    del drafts[-drop:], q_rows[-drop:], shown[-drop:], ents[-drop:]
                break
            if len(drafts) >= cap:
                break
            pos += 1  # the next draft step: (h, E d) at the next position, scratch K/V for this step only
            u = hd.inputs(F.embedding(torch.tensor([[d.token]]), self.embed).to(self.dtype), h[None, None])
            q, k, v = hd.layer.qkv(u, torch.tensor([[pos]]))
            ks = torch.cat([ks, k.repeat_interleave(rep, 1)], 2)
            vs = torch.cat([vs, v.repeat_interleave(rep, 1)], 2)
            h = hd.layer.finish(u, F.scaled_dot_product_attention(q, ks, vs))[0, -1]
        q_mat = torch.stack(q_rows) if q_rows else torch.zeros(0, self.vocab_size)
        return Proposal([drafts], [q_mat], [shown], [ents], stop, gated=True)

    def verify_target(self, target):
        """Verify with this drafter's FeatureLM (it keeps the target's layer features while verifying)."""
        if target is self.target or getattr(target, "model", None) is self.target.model:
            return self.target
        raise ValueError("the eagle drafter reads features of its own target: decode with the target it was "
                         "built with (engine.drafters.make_drafter returns it)")


# ------------------------------------------------------------------ save / load


def save_eagle(head: EagleHead, out_dir: str | Path, extra: dict | None = None) -> Path:
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).contiguous().clone() for k, v in head.state_dict().items()}
    tmp = out / "model.safetensors.tmp"
    save_file(sd, str(tmp), metadata={"format": "pt", "schema": SCHEMA})
    os.replace(tmp, out / "model.safetensors")
    tmpc = out / "config.json.tmp"
    tmpc.write_text(json.dumps({"schema": SCHEMA, "version": 1, **head.config.to_dict(), **(extra or {})}, indent=1))
    os.replace(tmpc, out / "config.json")
    return out


def read_config(path: str | Path) -> EagleConfig:
    p = Path(path).expanduser()
    f = p / "config.json"
    if not f.is_file() or not (p / "model.safetensors").is_file():
        raise FileNotFoundError(f"{p} is not an eagle-head directory (config.json + model.safetensors)")
    try:
        d = json.loads(f.read_text())
    except ValueError as e:
        raise ValueError(f"{f}: not JSON ({e})") from None
    if d.get("schema") != SCHEMA:
        raise ValueError(f"{f}: schema {d.get('schema')!r} is not {SCHEMA!r}")
    return EagleConfig.from_dict(d)


def check_eagle(path: str | Path, target_lm) -> EagleConfig:
    """The head's config after checking (config.json alone) that it fits `target_lm`."""
    c = read_config(path)
    check_feature_target(f"eagle:{path}", target_lm, c.target_layers, c.hidden_size, c.vocab_size)
    hf = target_lm.model
    if int(hf.config.num_attention_heads) != c.num_heads:
        raise ValueError(f"eagle:{path} has {c.num_heads} attention heads; {target_lm.name} has "
                         f"{hf.config.num_attention_heads}")
    return c


def load_head(path: str | Path) -> tuple[EagleHead, torch.Tensor]:
    """(head in fp32, its draft vocabulary) from a head directory; one line on any mismatch."""
    from safetensors.torch import load_file

    from engine.models.vocab_subset import load_subset

    c = read_config(path)
    p = Path(path).expanduser()
    head = EagleHead(c)
    try:
        head.load_state_dict({k: v.float() for k, v in load_file(str(p / "model.safetensors")).items()})
    except RuntimeError as e:
        raise ValueError(f"{p / 'model.safetensors'}: weights do not fit its config ({str(e).splitlines()[0]})") from None
    vf = p / "vocab_subset.safetensors"
    subset = load_subset(vf) if vf.is_file() else load_subset()
    if subset is None or int(subset.numel()) != c.draft_vocab:
        raise ValueError(f"eagle:{path} scores {c.draft_vocab} draft-vocabulary rows; the vocabulary file has "
                         f"{None if subset is None else int(subset.numel())}")
    return head.eval(), subset


def load_eagle(path: str | Path, target_lm, dtype: torch.dtype | None = None) -> tuple[FeatureLM, EagleDrafter]:
    """(FeatureLM to verify with, EagleDrafter) for a head directory and a loaded transformers target."""
    c = check_eagle(path, target_lm)
    head, subset = load_head(path)
    dt = dtype or next(target_lm.model.parameters()).dtype
    feats = FeatureLM(target_lm.model, c.target_layers, name=target_lm.name)
    return feats, EagleDrafter(head.to(dt), feats, subset)


def head_bytes(c: EagleConfig, bytes_per_weight: int = 2) -> int:
    """Weights a one-token draft step reads: the head itself plus the draft-vocabulary head rows."""
    D, I, H, KV, hd = c.hidden_size, c.intermediate_size, c.num_heads, c.num_kv_heads, c.head_dim
    layer = D * H * hd * 2 + 2 * D * KV * hd + 3 * D * I
    return bytes_per_weight * (layer + 2 * D * D + c.feat_dim * D + c.draft_vocab * D)
