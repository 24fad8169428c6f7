"""PACER-style block-wise pre-verification: a tiny pre-verifier M_B and the `pacer` window policy.

Notation: p = target, q = draft, γ = window (drafted tokens per target call), b = block size,
i = 1..γ a token's position in the current draft, k = ⌈i/b⌉ its block index.

Pre-verifier M_B. For drafted token i with draft last-layer hidden state h_i (the state that
produced q_i), draft confidence m_i = max_x q_i(x) and draft entropy H_i:

    z_i = W_in · LN(h_i) + W_c · [log m_i, H_i] + E_pos[i] + E_blk[k]
    z   = causal transformer over z_1..z_i of the SAME step (1–2 layers, d = 64)
    c_i = w · z_i                                   (conditional: token i accepted given 1..i−1 were)
    s_i = Π_{j≤i} σ(c_j) ≈ P(token i is accepted)   (accepted: the whole prefix 1..i survives)

The product form (`cumulative=True`) makes s_i non-increasing in i, as prefix acceptance is
(`cumulative=False`: s_i = σ(c_i)). `prior=True`: c_i = a·logit m_i + b + w·z_i, w = 0, a = 1, b = 0 at
init, so an untrained M_B is the rule s_i = Π m_j and training learns the correction.

Why m_i = max_x q_i(x), not q_i(x_i): under greedy decoding they are equal (M_B's training data);
under sampling m_i, H_i and h_i are fixed before x_i is drawn, so s_i depends on tokens 1..i−1 only.
That makes `trim=1` with b = 1 exact at T > 0: dropping x_i does not look at x_i, so a kept x_i is
still a plain draw from q_i (a stopping rule, not a filter) and verification stays lossless. With
b > 1 a block's later scores read states computed from its own earlier tokens, so dropping a whole
block is exact for greedy decoding only.

Attention is causal within a step, so s_i depends only on tokens 1..i: a later block never changes
earlier scores, and one M_B serves every b. k (a function of i) is a coarse second position code. W_c (confidence features) is our addition; PACER's summary
names hidden states and positional encodings only ([unconfirmed], project notes §1.2).

Stop rule, after block k (tokens (k−1)b+1 .. kb) with threshold t (t = t₀ at the step's start):

    m_k = mean(s_i over block k)
    m_k <  t  → stop drafting, verify             (stop reason "pre_verify"; trim=1 drops block k
                                                   unverified — ours, not the paper's; exact for b = 1)
    m_k >= t  → t ← t·ρ (ρ ≥ 1), draft block k+1  (continuation gets harder as the draft grows)
    γ reaches max                                 (stop reason "cap")
Phrase tokens (scored by their drafter, no hidden states) get the same rule in `Pacer.keep_block`.

Defaults: the held-out sweep in docs/benchmarks.md (PACER). Weights: safetensors, config JSON in the metadata.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.measure import timed_ms
from engine.paths import MODELS_DIR
from engine.policies.base import DraftInfo, Needs, WindowPolicy

DEFAULT_WEIGHTS = MODELS_DIR / "pacer-smollm2" / "pacer.safetensors"
# `pacer` without weights= picks M_B by the draft's hidden size, read at the first drafted token:
# each committed M_B was trained on one draft's states, and the sizes of our drafts differ.
DEFAULT_WEIGHTS_BY_HIDDEN = {576: DEFAULT_WEIGHTS, 896: MODELS_DIR / "pacer-qwen" / "pacer.safetensors"}


def default_weights(hidden_size: int) -> Path:
    """The committed M_B for drafts of this hidden size; a one-line ValueError when there is none."""
    if hidden_size not in DEFAULT_WEIGHTS_BY_HIDDEN:
        raise ValueError(f"no committed pacer weights for draft hidden size {hidden_size} "
                         f"(have {sorted(DEFAULT_WEIGHTS_BY_HIDDEN)}): train one (`python -m engine pacer "
                         f"train`) and pass weights=PATH")
    return DEFAULT_WEIGHTS_BY_HIDDEN[hidden_size]
FORMAT = "speclab.pacer"


@dataclass(frozen=True)
class PreVerifierConfig:
    hidden_size: int = 576  # the draft's hidden size (SmolLM2-135M and our draft: 576)
    d_model: int = 64  # small enough that one forward over ≤16 tokens costs well under a draft forward
    layers: int = 2  # one layer to mix the step's context, one to read it out
    heads: int = 4  # head dim 16
    ff: int = 128  # 2× d_model: the head has little to compute
    max_pos: int = 64  # the largest window any policy may propose (WindowPolicy's max)
    block: int = 4  # b for the block-index encoding (the policy's b may differ, see module doc)
    use_pos: bool = True  # position-in-draft + block-index embeddings (off = the "no PE" ablation)
    use_conf: bool = True  # log q(x) and H(q) as two extra inputs: what confidence/entropy stops use
    cumulative: bool = True  # s_i = Π_{j≤i} σ(c_j): prefix acceptance is monotone by construction (data-efficient)
    prior: bool = True  # c_i = a·logit q_i + b + w·z_i, w = 0 at init: training starts AT the Π q rule
    dropout: float = 0.1  # a few thousand steps of training data: mild regularisation

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if not 1 <= self.block <= self.max_pos:
            raise ValueError(f"block must be in [1, {self.max_pos}], got {self.block}")


def step_mask(step_id: torch.Tensor) -> torch.Tensor:
    """Attention mask [..., T, T] for packed steps: token i may attend to j iff same step and j ≤ i.

    `step_id` [..., T] numbers the steps of a packed sequence; −1 marks padding (which attends only
    to itself, so no softmax row is empty)."""
    T = step_id.shape[-1]
    same = step_id.unsqueeze(-1) == step_id.unsqueeze(-2)
    causal = torch.ones(T, T, dtype=torch.bool, device=step_id.device).tril()
    eye = torch.eye(T, dtype=torch.bool, device=step_id.device)
    return (same & causal & (step_id.unsqueeze(-1) >= 0)) | eye


class _Layer(nn.Module):
    """Pre-LN transformer layer with an explicit boolean mask (exact for packed sequences)."""

    def __init__(self, cfg: PreVerifierConfig) -> None:
        super().__init__()
        self.h = cfg.heads
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.ff), nn.GELU(), nn.Linear(cfg.ff, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.h, D // self.h).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(D // self.h)
        att = att.masked_fill(~mask.unsqueeze(1), float("-inf")).softmax(-1)
        y = (self.drop(att) @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.drop(self.out(y))
        return x + self.drop(self.ff(self.ln2(x)))


class PreVerifier(nn.Module):
    """M_B: per-token acceptance logits for the drafted tokens of one or more (packed) steps."""

    def __init__(self, cfg: PreVerifierConfig = PreVerifierConfig()) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln_in = nn.LayerNorm(cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.d_model)
        self.conf = nn.Linear(2, cfg.d_model) if cfg.use_conf else None
        self.pos = nn.Embedding(cfg.max_pos + 1, cfg.d_model) if cfg.use_pos else None
        self.blk = nn.Embedding(cfg.max_pos + 1, cfg.d_model) if cfg.use_pos else None
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.layers))
        self.ln_out = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, 1)
        if cfg.prior:
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
            self.prior_ab = nn.Parameter(torch.tensor([1.0, 0.0]))  # a, b of a·logit(q) + b

    def forward(self, hidden: torch.Tensor, logq: torch.Tensor, ent: torch.Tensor, pos: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """hidden [B,T,H], logq/ent [B,T], pos [B,T] (1-based position in the draft, 0 = padding),
        mask [B,T,T] (see `step_mask`) → logits [B,T]."""
        x = self.proj(self.ln_in(hidden.to(self.proj.weight.dtype)))
        if self.conf is not None:
            x = x + self.conf(torch.stack([logq, ent], -1).to(x.dtype))
        if self.pos is not None:
            p = pos.clamp(0, self.cfg.max_pos)
            k = torch.where(p > 0, (p - 1) // self.cfg.block + 1, torch.zeros_like(p))
            x = x + self.pos(p) + self.blk(k)
        for layer in self.layers:
            x = layer(x, mask)
        c = self.head(self.ln_out(x)).squeeze(-1)
        if self.cfg.prior:
            lq = logq.to(c.dtype).clamp(-20.0, -1e-6)
            c = c + self.prior_ab[0] * (lq - torch.log(-torch.expm1(lq))) + self.prior_ab[1]
        if not self.cfg.cumulative:
            return c
        # log s_i = Σ_{j ≤ i, same step} log σ(c_j): the step mask selects exactly that prefix.
        log_s = (mask.to(c.dtype) @ F.logsigmoid(c).unsqueeze(-1)).squeeze(-1).clamp(max=-1e-6)
        return log_s - torch.log(-torch.expm1(log_s))  # logit(s_i)

    @torch.inference_mode()
    def score_step(self, hidden: torch.Tensor, q: torch.Tensor, ent: torch.Tensor) -> torch.Tensor:
        """Acceptance probabilities s_1..s_n for the n tokens drafted so far in one step."""
        n = hidden.shape[0]
        pos = torch.arange(1, n + 1, device=hidden.device).unsqueeze(0)
        mask = torch.ones(n, n, dtype=torch.bool, device=hidden.device).tril().unsqueeze(0)
        logq = q.clamp_min(1e-6).log()
        return self.forward(hidden.unsqueeze(0), logq.unsqueeze(0), ent.unsqueeze(0), pos, mask)[0].sigmoid()

    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


# ---------------------------------------------------------------- weights I/O


def save_weights(model: PreVerifier, path: str | Path, extra: dict[str, Any] | None = None) -> None:
    """Write safetensors atomically (engine.trace.jsonio.atomic_path); config and `extra` go in the metadata."""
    from safetensors.torch import save_file

    from engine.trace.jsonio import atomic_path

    meta = {"format": FORMAT, "version": "1", "config": json.dumps(asdict(model.cfg)),
            "extra": json.dumps(extra or {})}
    with atomic_path(path) as tmp:
        save_file({k: v.detach().float().contiguous().cpu() for k, v in model.state_dict().items()}, str(tmp), meta)


def load_weights(path: str | Path) -> tuple[PreVerifier, dict[str, Any]]:
    """Load M_B from safetensors; any problem is one ValueError line naming the path."""
    from safetensors import safe_open

    path = Path(path).expanduser()
    where = f"cannot load PACER weights {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where}: no such file (train one: python -m engine pacer train)")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            state = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for truncated/foreign files
        raise ValueError(f"{where}: not a safetensors file ({str(e).splitlines()[0][:120] or type(e).__name__})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{where}: metadata format is {meta.get('format')!r}, expected {FORMAT!r}")
    try:
        raw = json.loads(meta["config"])
        known = {f.name for f in fields(PreVerifierConfig)}
        cfg = PreVerifierConfig(**{k: v for k, v in raw.items() if k in known})
        extra = json.loads(meta.get("extra") or "{}")
        model = PreVerifier(cfg)
        model.load_state_dict(state, strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise ValueError(f"{where}: {' '.join(str(e).split())[:240]}") from None
    return model.eval(), extra


_CACHE: dict[tuple[str, float], PreVerifier] = {}


def cached_weights(path: str | Path) -> PreVerifier:
    """Benchmarks build a policy per run: load each weights file once per process."""
    p = Path(path).expanduser().resolve()
    key = (str(p), p.stat().st_mtime if p.is_file() else -1.0)
    if key not in _CACHE:
        _CACHE[key] = load_weights(p)[0]
    return _CACHE[key]


# ---------------------------------------------------------------- stop rule + policy


def block_decision(mean: float, threshold: float, rho: float) -> tuple[bool, float]:
    """(stop?, threshold for the next block): stop when m_k < t, else t ← t·ρ."""
    if mean < threshold:
        return True, threshold
    return False, threshold * rho


class Pacer(WindowPolicy):
    """Draft in blocks of b; after each block stop if M_B's mean acceptance < t, else t ← t·ρ.

    Defaults b = 1, t₀ = 0.7, ρ = 1.0, trim = 1 (unset trim = 1 for b = 1, 0 for b > 1), max = 16: the best row over greedy and sampled
    held-out steps of the sweep for smollm2-135m + smollm2-draft (docs/benchmarks.md, "PACER: exact
    trimming under sampling"). That draft is weak (≈0.5 accepted per step) and a 2-token verify costs
    ~1.4 single ones on the benchmark CPU, so per-token checks that drop the failing token win; the
    paper's rule (verify the failing block) is trim=0. Re-sweep for a stronger pair. `model` injects
    an M_B instance (tests), else `weights` is loaded; without it, the committed M_B for the draft's
    hidden size (DEFAULT_WEIGHTS_BY_HIDDEN: 576 → pacer-smollm2, 896 → pacer-qwen) at the first token.
    `precomputed=True` loads no M_B: the offline replay (engine.offline.replay) hands each step its
    recorded scores with `use_scores`, and the same stop rule runs on them."""

    name = "pacer"
    needs_hidden = True

    def __init__(self, block: int = 1, threshold: float = 0.7, rho: float = 1.0, max_window: int = 16,
                 weights: str | None = None, model: PreVerifier | None = None, trim: int | None = None,
                 precomputed: bool = False) -> None:
        super().__init__(max_window)
        if trim not in (None, 0, 1):
            raise ValueError(f"pacer trim must be 0 or 1, got {trim!r}")
        # Unset: trim where it is exact at every temperature (b = 1), the paper's rule otherwise.
        self.trim = (1 if block == 1 else 0) if trim is None else int(trim)
        if not (isinstance(block, int) and 1 <= block <= max_window):
            raise ValueError(f"pacer block b must be an integer in [1, max={max_window}], got {block}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"pacer threshold t must be in [0, 1], got {threshold}")
        if not 1.0 <= rho <= 4.0:
            raise ValueError(f"pacer growth rho must be in [1, 4], got {rho}")
        if weights is not None and not isinstance(weights, str):
            raise ValueError(f"pacer weights must be a path, got {weights!r}")
        self.block, self.threshold, self.rho = block, float(threshold), float(rho)
        self.weights = weights
        self.model = None if precomputed else model if model is not None else cached_weights(weights) if weights else None
        self.by_hidden = not precomputed and model is None and not weights  # M_B chosen at the first token
        if self.model is not None:
            self.model.eval()
        self.reset()

    @property
    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"b": self.block, "t": self.threshold, "rho": self.rho, "max": self.max_window}
        if self.weights:
            out["weights"] = self.weights
        out["trim"] = self.trim  # always spelled out: the default (1) is not the paper's rule (0)
        return out

    @property
    def trim_exact_when_sampling(self) -> bool:
        # b = 1: the score of token i is fixed before x_i is drawn (module doc). b > 1: a block's later
        # scores read states computed from its own earlier tokens, so dropping it filters by value.
        return not self.trim or self.block == 1

    def needs(self) -> Needs:
        """Hidden states of the size M_B reads (no weights given: any committed M_B's size)."""
        sizes = ((self.model.cfg.hidden_size,) if self.model is not None else
                 tuple(sorted(DEFAULT_WEIGHTS_BY_HIDDEN)) if self.by_hidden else None)
        return Needs(hidden=True, exact_under_sampling=self.trim_exact_when_sampling, hidden_sizes=sizes)

    def keep_block(self, infos: list[DraftInfo]) -> tuple[int, dict[str, Any]]:
        """The stop rule on a drafter's own scores (phrases: info.score, no M_B), from t₀; state untouched."""
        t, blocks = self.threshold, []
        for lo in range(0, len(infos), self.block):
            blk = [i.score for i in infos[lo:lo + self.block]]
            stop, t_next = block_decision(sum(blk) / len(blk), t, self.rho)
            blocks.append({"tokens": [lo + 1, lo + len(blk)], "mean": round(sum(blk) / len(blk), 5),
                           "t_before": round(t, 5), "decision": "stop" if stop else "continue"})
            if stop:
                return (lo if self.trim else lo + len(blk)), {"stop": "pre_verify", "blocks": blocks}
            t = t_next
        return len(infos), {"blocks": blocks}

    def drop_on_stop(self) -> int:
        """With trim=1 the block that failed pre-verification is discarded, not verified. Exact for
        greedy decoding always, and under sampling for b = 1 (the drop never looks at the dropped
        token); `decode` refuses trim=1 with b > 1 at T > 0."""
        if self.trim and self._stop == "pre_verify":
            self._dropped = self.block
            return self.block
        return 0

    def reset(self) -> None:
        super().reset()
        self._h: list[torch.Tensor] = []
        self._q: list[float] = []
        self._e: list[float] = []
        self._t = self.threshold
        self._blocks: list[tuple] = []  # (n, scores, mean, t_before, t_after, stop, ms) per M_B call
        self._stop: str | None = None
        self._mb_ms = 0.0
        self._dropped = 0
        self._given: list[float] | None = None

    def propose(self) -> int:
        self._h, self._q, self._e = [], [], []
        self._t, self._blocks, self._stop, self._mb_ms = self.threshold, [], None, 0.0
        self._dropped = 0
        self._given = None
        return self.max_window

    def use_scores(self, scores: list[float]) -> None:
        """This step's M_B scores s_1..s_W, known in advance (offline replay; call after propose):
        keep_drafting reads them instead of running M_B, and needs no hidden states."""
        self._given = scores

    def _score_block(self, n: int) -> tuple[list[float], float]:
        """Scores of the block ending at token n, and the ms M_B took (0 when the scores were given)."""
        if self._given is not None:
            return self._given[n - self.block:n], 0.0
        if self.model is None:
            raise ValueError("a precomputed pacer policy needs each step's scores (use_scores)")
        dev = self.model.head.weight.device
        blk: list[float] = []

        def score() -> None:
            h = torch.stack(self._h).to(dev)
            s = self.model.score_step(h, torch.tensor(self._q, device=dev), torch.tensor(self._e, device=dev))
            blk.extend(s[n - self.block:].tolist())

        return blk, timed_ms(score, dev)  # device-synchronised: on CUDA the M_B time, not its launch

    def keep_drafting(self, info: DraftInfo) -> bool:
        if self._given is None:
            self._take(info)
        n = info.index
        if n >= self.max_window:  # the loop stops here anyway: no M_B call needed
            self._stop = "cap"
            return True
        if n % self.block:
            return True
        blk, ms = self._score_block(n)
        self._mb_ms += ms
        mean = sum(blk) / len(blk)
        stop, t_after = block_decision(mean, self._t, self.rho)
        # kept raw, formatted for the trace in step_fields: the offline replay runs this rule millions of times
        self._blocks.append((n, blk, mean, self._t, t_after, stop, ms))
        self._t = t_after
        if stop:
            self._stop = "pre_verify"
            return False
        return True

    def _take(self, info: DraftInfo) -> None:
        """Keep M_B's inputs for the drafted token: hidden state, pre-sample confidence, entropy."""
        if info.hidden is None:
            raise ValueError("pacer needs the draft's hidden states: load the draft with want_hidden=True")
        if self.model is None and self.by_hidden:
            self.model = cached_weights(default_weights(int(info.hidden.shape[-1]))).eval()
        if self.model is not None and info.hidden.shape[-1] != self.model.cfg.hidden_size:
            raise ValueError(f"pacer weights expect draft hidden size {self.model.cfg.hidden_size}, "
                             f"the draft gives {info.hidden.shape[-1]}")
        self._h.append(info.hidden)
        self._q.append(info.q_token if info.q_max is None else info.q_max)
        self._e.append(info.entropy)

    @property
    def mb_calls(self) -> int:
        """M_B calls this step so far (one per scored block; none at the cap)."""
        return len(self._blocks)

    def step_fields(self) -> dict[str, Any]:
        # A step that ends between block boundaries was cut by the loop's own cap (token budget).
        blocks = [{"block": k + 1, "tokens": [n - self.block + 1, n], "scores": [round(x, 4) for x in blk],
                   "mean": round(mean, 5), "t_before": round(t0, 5), "t_after": round(t1, 5),
                   "decision": "stop" if stop else "continue", "mb_ms": round(ms, 4)}
                  for k, (n, blk, mean, t0, t1, stop, ms) in enumerate(self._blocks)]
        out = {"blocks": blocks, "stop": self._stop or "cap", "mb_ms": round(self._mb_ms, 4),
               "t0": self.threshold}
        if self.trim:
            out["dropped"] = self._dropped  # drafted, scored below t, never verified
        return out
