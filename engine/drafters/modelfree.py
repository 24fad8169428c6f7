"""Model-free drafters by CLI spec: `lookup`, `lookup:n=10,ngram=2`, `suffix:depth=32,p=0.1` → a drafter
(`make_model_free`). They need only the target's vocabulary size.

Why they are lossless (q = δ of the copied token) is in engine.drafters.copier, with `CopyDrafter`,
the plumbing both share; the drafters are engine.drafters.lookup and engine.drafters.suffix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.drafters.copier import CopyDrafter


def _kv(rest: str, spec: str, known: dict[str, str]) -> dict[str, int | float]:
    out: dict[str, int | float] = {}
    for part in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq:
            key, value = next(iter(known)), key  # the first key is positional: lookup:10
        if key not in known:
            raise ValueError(f"bad draft spec {spec!r}: no parameter {key!r} (known: {', '.join(known)})")
        try:
            out[known[key]] = int(value)
        except ValueError:
            try:
                out[known[key]] = float(value)
            except ValueError:
                raise ValueError(f"bad draft spec {spec!r}: {key}={value!r} is not a number") from None
    return out


MODEL_FREE = ("lookup", "suffix")


def is_model_free(spec: str | None) -> bool:
    return bool(spec) and spec.strip().partition(":")[0] in MODEL_FREE


def make_model_free(spec: str, vocab_size: int) -> "CopyDrafter":
    """'lookup', 'lookup:n=10,ngram=2', 'suffix', 'suffix:depth=32,p=0.1,n=16,corpus=1' → a drafter."""
    name, _, rest = spec.strip().partition(":")
    if name == "lookup":
        from engine.drafters.lookup import LookupDrafter

        return LookupDrafter(vocab_size, **_kv(rest, spec, {"n": "num_tokens", "ngram": "max_ngram",
                                                            "pick": "pick_recent"}))
    if name == "suffix":
        from engine.drafters.suffix import SuffixDrafter

        return SuffixDrafter(vocab_size, **_kv(rest, spec, {"n": "max_tokens", "depth": "depth",
                                                            "p": "min_prob", "corpus": "corpus"}))
    raise ValueError(f"unknown model-free drafter {name!r}; choose from {', '.join(MODEL_FREE)}")
