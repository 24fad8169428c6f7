"""Pure verifiers: (draft tokens, draft dists, target dists, uniforms) → VerifyResult.

No model calls and no global state, so `engine.bench.audit` can enumerate the very functions that the
decode loop calls.

Single-draft verifiers: fn(tokens [γ], q [γ, V], p [γ+1, V], u) → result with `.accepted`, `.tokens`.
Multi-draft verifiers (names in MULTI_DRAFT): fn(blocks [K][γ_k], q [K × [γ_k, V]], p [K × [γ_k+1, V]], u)
→ result that also carries `.chosen` (index of the block whose prefix was emitted).
"""

from engine.verify.token import VerifyResult, verify_token

VERIFIERS = {"token": verify_token}
MULTI_DRAFT: set[str] = set()
# Uniforms a verifier consumes per step, as a function of the block lengths; default γ + 1.
UNIFORMS: dict = {}


def uniforms_needed(name: str, lengths: list[int]) -> int:
    fn = UNIFORMS.get(name)
    return fn(lengths) if fn else lengths[0] + 1


def register_verifier(name: str, fn, multi: bool = False, uniforms=None) -> None:
    VERIFIERS[name] = fn
    if multi:
        MULTI_DRAFT.add(name)
    if uniforms is not None:
        UNIFORMS[name] = uniforms


# Block and multi-draft verifiers (engine.verify.block / multidraft / spectr_gbv). "rbv", "kbv" are ours;
# "spectr-gbv-published" reproduces the authors' public code and is NOT lossless for K ≥ 2.
from engine.verify.block import verify_block  # noqa: E402
from engine.verify.coins import uniforms_for_blocks  # noqa: E402
from engine.verify.multidraft import verify_kbv, verify_kseq, verify_rbv, verify_rrs  # noqa: E402
from engine.verify.onehot_tree import verify_onehot_tree  # noqa: E402
from engine.verify.spectr_gbv import verify_spectr_gbv_published  # noqa: E402

register_verifier("block", verify_block)
register_verifier("rrs", verify_rrs, multi=True, uniforms=uniforms_for_blocks)
register_verifier("kseq", verify_kseq, multi=True, uniforms=uniforms_for_blocks)
register_verifier("spectr-gbv-published", verify_spectr_gbv_published, multi=True, uniforms=uniforms_for_blocks)
register_verifier("rbv", verify_rbv, multi=True, uniforms=uniforms_for_blocks)
register_verifier("kbv", verify_kbv, multi=True, uniforms=uniforms_for_blocks)
# Lossless only for trees whose branches are deterministic (engine.drafters.phrase); refuses others.
register_verifier("onehot-tree", verify_onehot_tree, multi=True, uniforms=uniforms_for_blocks)
# Lossless rules, for tests and the audit: the published SpecTr-GBV code is deliberately absent.
LOSSLESS = {"token", "block", "rrs", "kseq", "rbv", "kbv"}


__all__ = ["LOSSLESS", "MULTI_DRAFT", "VERIFIERS", "VerifyResult", "register_verifier", "uniforms_needed", "verify_token"]
