"""The model wrapper the decode loop drives: `HFModel` (a transformers causal LM with a croppable
KV cache, optionally a reduced-vocabulary head) and `TableLM` (a context-keyed toy for exact tests).

The protocol every LM here implements (engine.decode never touches a transformers cache):

    lm.extend(ids) -> logits [len(ids), V]   feed tokens after the cached prefix, cache them
    lm.crop(n)                               keep the first n cached positions (KV rollback)
    lm.length                                number of cached positions
    lm.reset()                               forget everything (new request)
    lm.last_hidden                           last-layer hidden states of the latest extend (opt-in)
    lm.score_paths / lm.commit               a step's block scoring and commit (engine.core.target)

`HFModel` adds the public forwards other modules build on — `forward_ids` (a batch of ids, custom
positions or attention mask), `extend_batch`, `run_decoder` + `head` (hidden states, then logits
through the full or reduced head) and `cache_kwargs` — so the reduced-head projection and the
cache keyword exist once, here. Loading by name lives in engine.models.load.

Reduced head (FR-Spec style), with V′ ⊂ V the kept ids and W the output embedding:
    logits_v = h · W_v   for v ∈ V′,   −inf otherwise
so q′ is zero outside V′; verification stays lossless because the target checks every token.
"""

from __future__ import annotations

from contextlib import nullcontext
from time import perf_counter  # bound at import: a test that fakes time.perf_counter leaves this clock alone
from typing import Any

import torch

from engine.core.target import TargetBase


def subset_logits(sub: torch.Tensor, subset: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Full-vocabulary logits [..., V] from a reduced head's [..., |V′|]: sub on V′, −inf elsewhere
    (so softmax puts zero mass off V′). Every reduced head (HFModel, the block drafter's BlockLM) ends here."""
    logits = torch.full((*sub.shape[:-1], vocab_size), float("-inf"), device=sub.device, dtype=sub.dtype)
    logits[..., subset] = sub
    return logits


class _SubsetHead(torch.nn.Module):
    """The reduced head's rows W[V′]: h ↦ h W[V′]ᵀ (weight-major, as the fp32 path's linears in
    engine.kernels.accelerate). A module so that forward hooks (the bench's model-time clock) see it as model time."""

    def __init__(self, weight: torch.Tensor, kernel: bool = False) -> None:
        super().__init__()
        self.weight = weight.contiguous() if kernel else weight
        self.kernel = kernel  # the dense bf16 kernel (engine.kernels.dense_kernel) routes the model's linears

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.kernel:
            from engine.kernels.dense_kernel import linear

            return linear(h, self.weight)
        h2 = h.reshape(-1, h.shape[-1])
        return torch.mm(self.weight, h2.T).T.reshape(*h.shape[:-1], self.weight.shape[0])


class _LazySubsetHead(torch.nn.Module):
    """The reduced head of the current V′, cut from the output embedding on its first call after `set`:
    a request whose prompt adds tokens to V′ but never drafts never pays the cut (on the quantized path
    re-quantizing ~32k rows takes ~0.8 s, more than a short answer's decode). One module for the model's
    life, so the bench's forward hooks keep timing it as model time."""

    def __init__(self, build) -> None:
        super().__init__()
        self._build, self.ids, self.inner = build, None, None

    def set(self, ids: torch.Tensor) -> None:
        self.ids, self.inner = ids, None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.inner is None:
            self.inner = self._build(self.ids)
        return self.inner(h)


# causal LMs whose forward is the decoder, then the output embedding, nothing else (no logit scaling or soft-capping)
PLAIN_CAUSAL_LMS = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")


class _LeanStep(torch.nn.Module):
    """The one-call decoder's direct step (engine.kernels.fast_decoder.step) as a module, so that forward hooks (the
    bench's model-time clock, engine.bench.runner) time it as model time, as they time the decoder's own calls."""

    def __init__(self, fn, with_head=None) -> None:
        super().__init__()
        self.fn = fn
        self.with_head = with_head  # fast_decoder.step_head: the final norm and the head in the same C call, or None

    def forward(self, ids: torch.Tensor, cache, start: int, head: bool = False):
        return self.with_head(ids, cache, start) if head else self.fn(ids, cache, start)


def _lean_step(model) -> _LeanStep | None:
    """The direct step where the model is a plain causal LM whose decoder was patched for it, else None."""
    if type(model).__name__ not in PLAIN_CAUSAL_LMS:
        return None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "model", None)
    fn = getattr(decoder, "_speclab_step", None)
    return None if fn is None else _LeanStep(fn, getattr(decoder, "_speclab_step_head", None))


class HFModel(TargetBase):
    """A transformers causal LM with a KV cache that can be cropped after verification.

    `vocab_subset` (FR-Spec-style reduced head): logits are computed only for those token ids by
    multiplying the last hidden state with the matching rows of the output embedding; every other
    id gets −inf. Verification stays lossless because the target checks every token.
    """

    prefilled = 0  # tokens `prefill` has cached over this model's life (a draft's catch-ups, for the bench)
    prefill_s = 0.0  # wall seconds `prefill` took over this model's life (the bench's measured catch-up time)

    def __init__(self, model, name: str = "", vocab_subset: torch.Tensor | None = None,
                 want_hidden: bool = False, subset_adds_prompt: bool = False) -> None:
        from engine.core.kv_cache import make_cache

        self.model = model.eval()
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        from engine.kernels.quant import weights_of

        self.weights = weights_of(model)  # 'dense' or a quantized path (engine.kernels.quant)
        self.cache = make_cache()  # grows in place: no whole-cache copy per step (engine.core.kv_cache)
        self._cache_cls = type(self.cache)
        self.length = 0
        self.want_hidden = want_hidden
        self.last_hidden: torch.Tensor | None = None
        # transformers ≥ 5.2x renamed `past_key_values` to `cache`; older versions only know the former.
        import inspect

        params = inspect.signature(type(model).forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        # The fast paths (kernels, fused layers, row-wise attention) are chosen before this wrapper, once per
        # model, by engine.kernels.accelerate (load_model calls it): this class drives whatever model it is handed.
        self.lean_step = _lean_step(model)  # None: every forward through the model's own modules
        self.vocab_subset = None
        self.base_subset = None
        self.subset_adds_prompt = subset_adds_prompt
        if vocab_subset is not None:
            self.base_subset = self.vocab_subset = vocab_subset.to(self.device)
            self.sub_head = _LazySubsetHead(self._subset_head)
            self.sub_head.set(self.vocab_subset)

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
            self.sub_head.set(sub)

    def _subset_head(self, ids: torch.Tensor) -> torch.nn.Module:
        """The reduced head's rows W[V′], dense or in the format of the quantized head it is cut from."""
        head = self.model.get_output_embeddings()
        from engine.kernels import qkernel
        from engine.kernels.quant import quantized_linear

        if self.weights == "dense" or isinstance(head, torch.nn.Linear):
            from engine.kernels.dense_kernel import kernel_of

            return _SubsetHead(head.weight[ids].detach(), kernel=kernel_of(self.model) != "torch")
        if isinstance(head, qkernel.QGemmLinear) and head.bits in qkernel.BLOCK_FMT:  # a GGUF's own blocks: their rows
            if head.bits in qkernel.TILED.values():  # rows regrouped in sixteens: the GGUF's rows, re-tiled if they fit
                return qkernel.QGemmLinear.from_blocks(qkernel.as_gguf_blocks(head.q, head.bits)[ids.cpu()], None,
                                                       qkernel.BASE[head.bits])
            return qkernel.QGemmLinear.from_blocks(head.q[ids.cpu()], None, head.bits)
        return quantized_linear(head.weight[ids].detach(), None, head.fmt, head.act_dtype)

    def reset(self) -> None:
        self.cache = self._cache_cls()
        self.length = 0
        self.last_hidden = None

    def crop(self, n: int) -> None:
        if n < self.length:
            # DynamicCache.crop accepts a negative count (tokens to drop) on every version we support.
            self.cache.crop(n - self.length)
            self.length = n

    # ------------------------------------------------------------ forwards on the cache
    # Every forward of this LM goes through `forward_ids` (or `run_decoder` + `head`), so the cache
    # keyword, the positions and the reduced head are written once (tree scoring, batched drafting,
    # block-drafter features and the step probe all use these).

    def cache_kwargs(self) -> dict[str, Any]:
        """{keyword: cache} that hands this LM's KV cache to its transformers model on this version."""
        return {self._cache_kw: self.cache}

    def positions(self, rows: int, n: int) -> torch.Tensor:
        """Position ids [rows, n] of n tokens fed after the cached prefix: length … length+n−1."""
        return torch.arange(self.length, self.length + n, device=self.device).unsqueeze(0).expand(rows, n)

    @property
    def decoder(self) -> torch.nn.Module:
        """The base model under the LM head (hidden states out)."""
        return self.model.get_decoder() if hasattr(self.model, "get_decoder") else self.model.model

    def run_decoder(self, ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                    attention_mask: torch.Tensor | None = None, output_hidden_states: bool = False):
        """The decoder on ids [B, n] after the cached prefix (the cache holds B rows); the HF output
        (last_hidden_state, hidden_states). The cache grows by n; `length` does too."""
        B, n = ids.shape
        pos = self.positions(B, n) if position_ids is None else position_ids
        kw = self.cache_kwargs()
        if attention_mask is not None:
            kw["attention_mask"] = attention_mask
        if output_hidden_states:
            kw["output_hidden_states"] = True
        out = self.decoder(input_ids=ids.to(self.device), use_cache=True, position_ids=pos, **kw)
        self.length += n
        return out

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] of hidden states h [..., D]: the output embedding, or with a reduced head
        h·W[V′]ᵀ on the kept ids and −inf on every other id."""
        if self.vocab_subset is None:
            return self.model.get_output_embeddings()(h)
        return subset_logits(self.sub_head(h), self.vocab_subset, self.vocab_size)

    @torch.inference_mode()
    def forward_ids(self, ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                    attention_mask: torch.Tensor | None = None, want_hidden: bool = False) -> torch.Tensor:
        """Logits [B, n, V] (float32) of ids [B, n] fed after the cached prefix; the cache grows by n.

        `want_hidden` keeps row 0's last-layer states in `last_hidden` (float32). The full-vocabulary
        path without hidden states is the causal LM's own forward; otherwise decoder + `head`. A plain forward
        (one row, positions after the cache, no mask) on a model whose decoder runs in one C call
        (engine.kernels.fast_decoder) takes that call directly and then `head`: the same bits, without the
        causal LM's and the decoder's module calls (~0.3 ms of a small model's ~8 ms step); where the decoder has a
        tail (fast_decoder.step_head), the final norm and the head run in that call too."""
        lean = self.lean_step
        if lean is not None and position_ids is None and attention_mask is None:
            if lean.with_head is not None and self.vocab_subset is None:
                got = lean(ids.to(self.device), self.cache, self.length, head=True)
                if got is not None:  # the layers, the final norm and the head in one C call: the bits of the below
                    self.length += ids.shape[1]
                    self.last_hidden = got[0][0].float() if want_hidden else None
                    return got[1].float()
            h = lean(ids.to(self.device), self.cache, self.length)
            if h is not None:
                self.length += ids.shape[1]
                self.last_hidden = h[0].float() if want_hidden else None
                return self.head(h).float()
        if self.vocab_subset is None and not want_hidden:
            B, n = ids.shape
            pos = self.positions(B, n) if position_ids is None else position_ids
            kw = self.cache_kwargs()
            if attention_mask is not None:
                kw["attention_mask"] = attention_mask
            logits = self.model(input_ids=ids.to(self.device), use_cache=True, position_ids=pos, **kw).logits
            self.length += n
            return logits.float()
        h = self.run_decoder(ids, position_ids, attention_mask).last_hidden_state
        self.last_hidden = h[0].float() if want_hidden else None
        return self.head(h).float()

    def extend(self, ids: list[int]) -> torch.Tensor:
        """Logits [len(ids), V] of one sequence's next tokens (the decode loop's call)."""
        return self.forward_ids(torch.tensor([ids], dtype=torch.long, device=self.device),
                                want_hidden=self.want_hidden)[0]

    @torch.inference_mode()
    def prefill(self, ids: list[int]) -> None:
        """Cache a prompt without its logits: the decoder only. Nobody reads a prompt's logits, and
        the head over every prompt position is not free — 700 tokens × Qwen's 152k vocabulary is a
        ~160 GFLOP matmul and 0.4 GB of float32 logits, seconds on a CPU."""
        from engine.kernels.qkernel import long_forward

        t0 = perf_counter()
        # cached once, never verified: the quantized path's products may take their long-forward product
        with nullcontext() if self.weights == "dense" else long_forward():
            self.run_decoder(torch.tensor([ids], dtype=torch.long, device=self.device))
        self.last_hidden = None
        self.prefilled += len(ids)  # tokens cached without logits, ever: a bench counts a draft's catch-ups by it
        self.prefill_s += perf_counter() - t0

    @torch.inference_mode()
    def extend_batch(self, ids: torch.Tensor) -> torch.Tensor:
        """`extend` for a batch [B, n] on a cache already holding B rows (batch_repeat_interleave):
        logits [B, n, V]. Batched multi-drafting and batch tree scoring use it."""
        return self.forward_ids(ids)


def prefill(lm, ids: list[int]) -> None:
    """Cache `ids` in `lm` without computing logits where the LM can (`HFModel.prefill`); an LM
    without a `prefill` (toy tables, wrappers) extends and drops the logits."""
    if not ids:
        return
    fn = getattr(lm, "prefill", None)
    if fn is not None:
        fn(ids)
    else:
        lm.extend(ids)


class TableLM(TargetBase):
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
