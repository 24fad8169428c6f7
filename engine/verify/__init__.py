"""Pure verifiers: (draft tokens, draft dists, target dists, uniforms) → VerifyResult.

No model calls and no global state, so `engine.audit` can enumerate the very functions that the
decode loop calls.
"""

from engine.verify.token import VerifyResult, verify_token

VERIFIERS = {"token": verify_token}

__all__ = ["VERIFIERS", "VerifyResult", "verify_token"]
