"""The draft model: a pruned copy of the target (chosen layers, the target's embedding frozen and
tied to the head), its reduced-vocabulary head, and the files it is saved as — a resumable training
checkpoint, and the deployable export that engine/models/smollm.py loads.

Every file is written atomically (engine.trace.jsonio.atomic_path): a kill mid-checkpoint leaves
the previous checkpoint, never half of one, so an early checkpoint is always usable.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.trace.jsonio import atomic_path, write_text_atomic

EMBED_KEY = "model.embed_tokens.weight"


def build_draft_from_target(target, keep_layers: tuple):
    """Pruned copy of the target: chosen layers, embedding and final norm copied; tied head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    d = target.config.to_dict()
    d["num_hidden_layers"] = len(keep_layers)
    d.pop("layer_types", None)
    d["tie_word_embeddings"] = True
    d.pop("_name_or_path", None)
    d.pop("_model_name_or_path", None)
    cfg = LlamaConfig(**{k: v for k, v in d.items() if k not in ("architectures", "transformers_version")})
    cfg.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(0)
    draft = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight.float())
        draft.model.norm.load_state_dict({k: v.float() for k, v in target.model.norm.state_dict().items()})
        for i, j in enumerate(keep_layers):
            draft.model.layers[i].load_state_dict({k: v.float() for k, v in target.model.layers[j].state_dict().items()})
    draft.tie_weights()
    return draft


def head_logits(draft, hidden: torch.Tensor, subset: torch.LongTensor | None) -> torch.Tensor:
    """Logits over the subset rows of the tied embedding (or all rows)."""
    W = draft.model.embed_tokens.weight
    if subset is not None:
        W = W[subset]
    return hidden @ W.to(hidden.dtype).t()


def draft_hidden(draft, ids: torch.Tensor) -> torch.Tensor:
    return draft.model(input_ids=ids, use_cache=False).last_hidden_state


def trainable_state(draft) -> dict[str, torch.Tensor]:
    return {k: v for k, v in draft.state_dict().items() if k not in (EMBED_KEY, "lm_head.weight")}


# ----------------------------------------------------------------------------------------------------
# Checkpoints


def _atomic_save(tensors: dict[str, torch.Tensor], path: Path, metadata: dict | None = None) -> None:
    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp),
                  metadata={k: (v if isinstance(v, str) else json.dumps(v)) for k, v in (metadata or {}).items()})


def save_checkpoint(path: Path, draft, opt, subset, state: dict) -> None:
    t = {f"model.{k}": v for k, v in trainable_state(draft).items()}
    names = [n for n, p in draft.named_parameters() if p.requires_grad]
    params = dict(draft.named_parameters())
    for n in names:
        st = opt.state.get(params[n], {})
        for k in ("exp_avg", "exp_avg_sq"):
            if k in st:
                t[f"opt.{n}.{k}"] = st[k]
        if "step" in st:
            t[f"opt.{n}.step"] = torch.as_tensor(st["step"], dtype=torch.float32).reshape(1)
    t["vocab_subset"] = subset if subset is not None else torch.zeros(0, dtype=torch.long)
    t["rng.torch"] = torch.get_rng_state()
    _atomic_save(t, path, {"state": state})


def load_checkpoint(path: Path, draft, opt) -> tuple[torch.LongTensor | None, dict]:
    from safetensors import safe_open

    t = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        state = json.loads(f.metadata()["state"])
    msd = {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}
    missing, unexpected = draft.load_state_dict(msd, strict=False)
    assert not unexpected and set(missing) <= {EMBED_KEY, "lm_head.weight"}, (missing, unexpected)
    params = dict(draft.named_parameters())
    for n, p in params.items():
        if not p.requires_grad or f"opt.{n}.exp_avg" not in t:
            continue
        opt.state[p] = {"exp_avg": t[f"opt.{n}.exp_avg"].clone(), "exp_avg_sq": t[f"opt.{n}.exp_avg_sq"].clone(),
                        "step": t[f"opt.{n}.step"].reshape(()).clone()}
    torch.set_rng_state(t["rng.torch"])
    sub = t["vocab_subset"]
    return (sub if sub.numel() else None), state


def export(draft, subset, exp_dir: Path, log_path: Path | None, summary: dict) -> None:
    """Write the deployable draft: non-embedding weights (bf16, shards under 20 MB), full-vocab config,
    vocab subset."""
    from engine.models.smollm import save_draft_state

    exp_dir.mkdir(parents=True, exist_ok=True)
    if subset is not None:
        _atomic_save({"ids": subset.long()}, exp_dir / "vocab_subset.safetensors")
    save_draft_state({k: v.to(torch.bfloat16) for k, v in trainable_state(draft).items()}, exp_dir,
                     {"format": "pt", "note": "embedding omitted: it is the target's (frozen, tied); see engine/models/smollm.py"})
    cj = draft.config.to_dict()
    cj["dtype"] = "bfloat16"
    cj.pop("_name_or_path", None)
    write_text_atomic(json.dumps(cj, indent=2, sort_keys=True) + "\n", exp_dir / "config.json")
    if log_path is not None and log_path.is_file():
        with atomic_path(exp_dir / "train_log.jsonl") as tmp:
            shutil.copyfile(log_path, tmp)
    write_text_atomic(json.dumps(summary, indent=2, sort_keys=True) + "\n", exp_dir / "training_summary.json")
