"""`make_drafter(spec, target)`: every drafter the CLI, the benchmark and the Live page can name.

    spec                                   drafter                                  verifies with
    None / ""                              none: autoregressive decoding            the target
    DRAFT (short name, dir, hub id)        the draft model, one token per forward   the target
      … with a multi-draft verifier        MultiDrafter: K i.i.d. blocks            TreeTarget (one pass)
    lookup[:n=,ngram=,pick=]               prompt lookup (model-free, q = δ)        the target
    suffix[:n=,depth=,p=,corpus=]          suffix-trie drafting (model-free)        the target
    phrase:model=DRAFT[,n=,k=,…]           draft model + phrase pool                the target (k > 1: TreeTarget)
    block:PATH                             DFlash-style block drafter saved at PATH FeatureLM (target + layer features)
    block:TARGET                           the committed block drafter of a target  FeatureLM
                                           (BLOCK_DRAFTERS: qwen2.5-coder-1.5b, smollm2-135m)
    eagle:PATH | eagle:TARGET              an EAGLE-style head (engine.drafters.eagle;
                                           EAGLE_HEADS: qwen2.5-coder-1.5b)         FeatureLM

Returns (target LM to decode with, drafter or None). A plain draft model comes back as its LM:
`decode` wraps it in an AutoregressiveDrafter, and the trace header and the hindsight oracle read
the model itself. `target` is a LoadedModel (engine.models.load: needed to load a draft model next to
it) or, for specs that load nothing (model-free, block), a bare LM.
"""

from __future__ import annotations

from pathlib import Path

from engine.paths import REPO_ROOT
from engine.verify import MULTI_DRAFT

BLOCK = "block"
EAGLE = "eagle"
FEATURE_KINDS = ("block", "eagle")  # drafters that read the target's layer features (verify with a FeatureLM)
MULTI_VERIFIERS = "rrs, kseq, rbv, kbv, spectr-gbv-published"


# Block drafters by the target they draft for: `--draft block:qwen2.5-coder-1.5b`.
BLOCK_DRAFTERS = {"qwen2.5-coder-1.5b": "models/block-drafter-qwen2.5-coder-1.5b",
                  "smollm2-135m": "models/block-drafter-smollm2"}


# EAGLE-style heads by target: `--draft eagle:qwen2.5-coder-1.5b`.
EAGLE_HEADS = {"qwen2.5-coder-1.5b": "models/eagle-qwen2.5-coder-1.5b"}


def is_block(spec: str | None) -> bool:
    return bool(spec) and spec.strip().partition(":")[0] == BLOCK


def is_eagle(spec: str | None) -> bool:
    return bool(spec) and spec.strip().partition(":")[0] == EAGLE


def _saved_path(spec: str, kind: str, committed: dict[str, str], what: str, train: str) -> Path:
    """'KIND:PATH' → that directory; 'KIND:TARGET' → the committed one of that target (`committed`); a
    relative path that does not exist from the working directory is read from the checkout (the Live page
    runs from anywhere)."""
    name, _, path = spec.strip().partition(":")
    if name != kind or not path.strip():
        raise ValueError(f"bad draft spec {spec!r}: {kind} needs a path, {kind}:PATH (a saved {what})")
    name = path.strip()
    if name in committed and not Path(name).exists():
        p = REPO_ROOT / committed[name]
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"{kind}:{name}: no committed {what} at {p} (train one: {train})")
        return p
    p = Path(name).expanduser()
    if not p.exists() and not p.is_absolute() and (REPO_ROOT / p).exists():
        return REPO_ROOT / p
    return p


def block_path(spec: str) -> Path:
    """'block:models/block-drafter-smollm2' → that directory; 'block:TARGET' → BLOCK_DRAFTERS."""
    return _saved_path(spec, BLOCK, BLOCK_DRAFTERS, "block drafter",
                       "`python -m engine dpace train-qwen`, then pass block:<run>/drafter")


def eagle_path(spec: str) -> Path:
    """'eagle:PATH' → that directory; 'eagle:qwen2.5-coder-1.5b' → the committed head (EAGLE_HEADS)."""
    return _saved_path(spec, EAGLE, EAGLE_HEADS, "head", "`python -m engine eagle train`, then pass eagle:<run>/head")


def drafter_kind(spec: str | None) -> str:
    """none | model-free | phrase | block | eagle | model: what `make_drafter` will build for this spec."""
    from engine.drafters.modelfree import is_model_free
    from engine.drafters.phrase import is_phrase

    if not spec:
        return "none"
    if is_model_free(spec):
        return "model-free"
    if is_phrase(spec):
        return "phrase"
    if is_block(spec):
        return "block"
    if is_eagle(spec):
        return "eagle"
    return "model"


def make_drafter(spec: str | None, target, *, verifier: str = "token", k: int = 1, want_hidden: bool = False,
                 dtype: str = "auto", device: str = "auto", draft_lm=None, weights: str | None = None):
    """(target LM to decode with, drafter or None) for a `--draft` spec; see the module doc.

    `verifier` / `k`: the multi-draft verifiers take a draft model only (K i.i.d. blocks);
    `want_hidden`: the policy reads draft hidden states (pacer); `draft_lm`: an already loaded draft
    model for a plain DRAFT spec (the Live page's shared weights); `weights`: the draft model's own weights
    path (engine.models.pair_weights: a mixed pair), None = the target's."""
    target_lm = getattr(target, "lm", target)
    kind = drafter_kind(spec)
    multi = verifier in MULTI_DRAFT
    if kind in ("model-free", *FEATURE_KINDS) and (multi or k != 1):
        raise ValueError(f"--draft {spec} proposes one block per step: use a K = 1 verifier")
    if kind == "model-free":  # lookup / suffix: no weights, only the target's vocabulary
        from engine.drafters.modelfree import make_model_free

        return target_lm, make_model_free(spec, target_lm.vocab_size)
    if kind == "block":
        from engine.drafters.block import load_block

        return load_block(block_path(spec), target_lm)
    if kind == "eagle":
        from engine.drafters.eagle import load_eagle

        return load_eagle(eagle_path(spec), target_lm)
    if not multi and k != 1:
        raise ValueError(f"--k {k} needs a multi-draft verifier ({MULTI_VERIFIERS})")
    if kind == "none":
        return target_lm, None
    if kind == "phrase":  # a draft model extended with phrases: the target may become a TreeTarget
        from engine.drafters.phrase import load_phrase_drafter

        return load_phrase_drafter(spec, target, dtype, device, want_hidden, verifier, weights=weights)
    if draft_lm is None:
        from engine.models.load import check_pair, load_model

        if not hasattr(target, "lm"):
            raise ValueError(f"--draft {spec}: loading a draft model needs the loaded target (a LoadedModel)")
        draft = load_model(spec, dtype, device, role="draft", target=target, want_hidden=want_hidden, weights=weights)
        check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
        draft_lm = draft.lm
    if multi:
        from engine.core.tree import TreeTarget
        from engine.drafters.multi import MultiDraftConfig, MultiDrafter

        return TreeTarget(target_lm), MultiDrafter(draft_lm, MultiDraftConfig(k=k))
    return target_lm, draft_lm
