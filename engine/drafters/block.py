"""Decoding with a DFlash-style block drafter: one draft forward proposes a whole block of B−1 tokens.

The network (config, layers, `BlockLM`, the training-time forward) is engine.drafters.block_model;
this module holds what decoding needs: `FeatureLM` (the target, keeping the selected layers' hidden
states of every cached position), `BlockDrafter` (the drafter protocol of engine.drafters.base), and
the drafter directory format (`save_block_drafter`, `load_block_drafter`, `load_block_vocab`,
`load_block`). `--draft block:PATH` (engine.drafters.make_drafter) loads one for `decode`, `bench` and
the Live page.

Per step: one draft forward over B query tokens [x_{S−1}, <mask> × (B−1)] at positions S−1 … S+B−2;
`observe` appends the new target features to the drafter's context K/V cache (positions < the next
anchor). The block's own K/V is never cached. Verification is the engine's usual lossless verifier,
so greedy decoding reproduces the target's own output exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from engine.core.kv_cache import GrowingTensor
from engine.core.lm import HFModel
from engine.core.sampling import SamplingConfig, draw_token
from engine.drafters.base import DrafterBase, Keep, Proposal
from engine.drafters.block_model import (SCHEMA, BlockDrafterConfig, BlockDrafterModel, BlockLM, block_attention_mask,
                                         block_inputs, block_logits, build_target_layer_ids, target_features)

# ------------------------------------------------------------------ target with layer features


class FeatureLM(HFModel):
    """An HFModel that also keeps the selected layers' hidden states of every cached position.

    `features` [length, K·D] stays aligned with the KV cache through extend / crop / reset, so a
    block drafter can read the target's state after each verify call (drafter.observe).
    hidden_states[l + 1] is the output of layer l (hidden_states[0] is the embedding output).
    """

    def __init__(self, model, layer_ids: tuple[int, ...], name: str = "") -> None:
        super().__init__(model, name=name)
        self.layer_ids = tuple(layer_ids)
        # grows in place: a cat per verify re-copied every position's features (~5 MB at 760 positions on
        # SmolLM2), a few % of each step even when the cost-aware window chose a plain AR step
        self._feats = GrowingTensor(0)
        self._feats.append(torch.zeros(0, len(self.layer_ids) * model.config.hidden_size))

    @property
    def features(self) -> torch.Tensor:
        """[length, K·D] float32: the selected layers' hidden states of every cached position."""
        return self._feats.view()

    def reset(self) -> None:
        super().reset()
        self._feats.crop(0)

    def crop(self, n: int) -> None:
        super().crop(n)
        self._feats.crop(n)

    def _run(self, ids: list[int]):
        out = self.run_decoder(torch.tensor([ids], dtype=torch.long, device=self.device), output_hidden_states=True)
        self._feats.append(torch.cat([out.hidden_states[l + 1][0] for l in self.layer_ids], -1).float().cpu())
        return out

    @torch.inference_mode()
    def extend(self, ids: list[int]) -> torch.Tensor:
        return self.head(self._run(ids).last_hidden_state[0]).float()

    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> None:
        """The prompt's features, no logits (HFModel.prefill)."""
        self._run(ids)


# ------------------------------------------------------------------ decode-time drafter


class BlockDrafter(DrafterBase):
    """Drafter protocol for a block drafter: one draft forward per step proposes up to B−1 tokens.

    The context K/V cache holds the projected target features of positions [0, n_ctx); it is synced
    from `target.features` when a step drafts (lazily: after a run of autoregressive steps the positions
    they added are projected in one batch, and a step that does not draft costs nothing here). The anchor of a step is the last sequence token x[S−1] at position S−1, and the
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
        self.vocab_subset = lm.vocab_subset  # trace headers report the reduced head
        self.block_size = lm.config.block_size
        self._kg: list[GrowingTensor] = []  # per layer, along the position dim (2): grows in place
        self._vg: list[GrowingTensor] = []
        self.n_ctx = 0

    @property
    def _k(self) -> list[torch.Tensor]:
        return [g.view() for g in self._kg]

    @property
    def _v(self) -> list[torch.Tensor]:
        return [g.view() for g in self._vg]

    def _sync(self) -> None:
        n = self.target.length
        if n < self.n_ctx:  # never happens in the decode loop (only committed positions are ingested)
            for g in self._kg + self._vg:
                g.crop(n)
            self.n_ctx = n
        if n == self.n_ctx:
            return
        with torch.inference_mode():
            feats = self.target.features[self.n_ctx:n][None]
            pos = torch.arange(self.n_ctx, n)[None]
            kv = self.lm.model.context_kv(feats, pos)
        for gk, gv, (k, v) in zip(self._kg, self._vg, kv):
            gk.append(k)
            gv.append(v)
        self.n_ctx = n

    def reset(self, prompt_ids: list[int]) -> None:
        self.n_ctx = 0
        c = self.lm.config
        dt = self.lm.model.fc.weight.dtype
        empty = torch.zeros(1, c.num_kv_heads, 0, c.head_dim, dtype=dt)
        self._kg = [GrowingTensor(2) for _ in range(c.num_layers)]
        self._vg = [GrowingTensor(2) for _ in range(c.num_layers)]
        for g in self._kg + self._vg:
            g.append(empty)  # the prompt's positions are projected by the first draft (_sync), not here

    @torch.inference_mode()
    def block_logits(self, anchor: int, pos0: int) -> torch.Tensor:
        """Logits [B−1, V] of the block anchored at `anchor` (position pos0)."""
        self._sync()
        c = self.lm.config
        ids = torch.full((1, c.block_size), c.mask_token_id, dtype=torch.long)
        ids[0, 0] = anchor
        pos = torch.arange(pos0, pos0 + c.block_size)[None]
        h = self.lm.model(self.lm.embed(ids), pos, list(zip(self._k, self._v)), None)
        return self.lm.logits(h[0, 1:]).float()

    def verify_target(self, target):
        """The LM `decode` verifies with: this drafter's FeatureLM, which reads the target's layer features
        while it verifies. `target` must be it, or an LM over the same weights (the factory's target)."""
        if target is self.target or getattr(target, "model", None) is self.target.model:
            return self.target
        raise ValueError("the block drafter reads features of its own target: decode with the target it was "
                         "built with (engine.drafters.make_drafter returns it)")

    def draft(self, seq: list[int], cap: int, keep: Keep, sc: SamplingConfig, gen: torch.Generator) -> Proposal:
        """Up to min(cap, B−1) tokens from one draft forward (keep is not consulted: the block is one
        forward, and the window policy's cap is what shortens it)."""
        self._sync()
        if self.n_ctx != len(seq) - 1:
            raise RuntimeError(f"block drafter out of sync: context {self.n_ctx}, sequence {len(seq)}")
        n = min(cap, self.block_size - 1)
        if n <= 0:
            return Proposal.empty(self.vocab_size, block_size=self.block_size)
        logits = self.block_logits(seq[-1], len(seq) - 1)[:n]
        draws = [draw_token(logits[i], sc, gen) for i in range(n)]
        stop = "cap" if n == cap else "block"
        return Proposal([[d.token for d in draws]], [torch.stack([d.q for d in draws])], [[d.shown for d in draws]],
                        [[d.entropy for d in draws]], stop, {"block_size": self.block_size})

    def commit(self, keep_len: int, chosen: int = 0) -> None:
        pass  # the block's own K/V is never cached; context K/V only grows with committed positions

    def observe(self, target) -> None:
        pass  # synced lazily by the next draft (class doc)


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


def _drafter_dir(path: str | Path) -> Path:
    p = Path(path).expanduser()
    return p / "drafter" if (p / "drafter" / "config.json").is_file() else p


def check_block(path: str | Path, target_lm) -> BlockDrafterConfig:
    """The saved drafter's config, after checking (from config.json alone) that it drafts for
    `target_lm`: a transformers target with the hidden size and vocabulary it was trained on."""
    p = _drafter_dir(path)
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"{p} is not a block-drafter directory (config.json + model.safetensors)")
    d = json.loads((p / "config.json").read_text())
    if d.get("schema") != SCHEMA:
        raise ValueError(f"{p}/config.json: schema {d.get('schema')!r} is not {SCHEMA!r}")
    c = BlockDrafterConfig.from_dict({k: v for k, v in d.items() if k in BlockDrafterConfig.__dataclass_fields__})
    check_feature_target(f"block:{path}", target_lm, c.target_layer_ids, c.hidden_size, c.vocab_size)
    return c


def check_feature_target(name: str, target_lm, layers, hidden_size: int, vocab_size: int) -> None:
    """One line if a drafter reading the target's layer features (`name`, e.g. block:PATH) does not fit
    `target_lm`: no hidden states, too few layers, another hidden size or vocabulary."""
    hf = getattr(target_lm, "model", None)
    if hf is None or not hasattr(target_lm, "run_decoder"):
        raise ValueError(f"{name} drafts from a transformers target's hidden states; this target has none")
    depth = int(getattr(hf.config, "num_hidden_layers", 1 << 30))
    if max(layers) >= depth:
        raise ValueError(f"{name} reads target layers {list(layers)}; {target_lm.name} has only {depth} layers")
    if int(hf.config.hidden_size) != hidden_size or int(target_lm.vocab_size) != vocab_size:
        raise ValueError(f"{name} was trained for a target with hidden size {hidden_size} and {vocab_size} tokens; "
                         f"{target_lm.name} has {hf.config.hidden_size} and {target_lm.vocab_size}")


def load_block(path: str | Path, target_lm) -> tuple[FeatureLM, "BlockDrafter"]:
    """(FeatureLM to verify with, BlockDrafter) for the drafter directory `path` and a loaded target LM
    (an HFModel over the weights the drafter was trained on). `path` may also be a bundle holding
    `drafter/` next to its `target/` (models/block-drafter-tiny). The drafter runs where the target's
    features are kept: on the CPU."""
    check_block(path, target_lm)
    p = _drafter_dir(path)
    model = load_block_drafter(p)
    feats = FeatureLM(target_lm.model, model.config.target_layer_ids, name=target_lm.name)
    return feats, BlockDrafter(BlockLM.from_target(model, target_lm.model, load_block_vocab(p)), feats)


__all__ = ["BlockDrafterConfig", "BlockDrafterModel", "BlockLM", "BlockDrafter", "FeatureLM", "block_logits",
           "block_attention_mask", "block_inputs", "target_features", "build_target_layer_ids",
           "save_block_drafter", "load_block_drafter", "load_block_vocab", "load_block", "check_block", "SCHEMA"]
