"""The Qwen2.5-Coder pair itself (optional: `make models`). Skipped, saying why, when it is absent."""

import pytest

from engine.models.provision import installed

pytestmark = [pytest.mark.realpair,
              pytest.mark.skipif(not (installed("qwen2.5-coder-1.5b") and installed("qwen2.5-coder-0.5b")),
                                 reason="Qwen2.5-Coder pair not installed (run `make models`)")]


def test_qwen_pair_greedy_matches_autoregressive_in_fp32():
    from engine.decode import DecodeConfig, decode
    from engine.models.load import check_pair, eos_token_ids, load_model
    from engine.policies.base import parse_policy
    from engine.trace.prompts import encode

    target = load_model("qwen2.5-coder-1.5b", "fp32", "cpu", role="target")
    draft = load_model("qwen2.5-coder-0.5b", "fp32", "cpu", role="draft", target=target)
    check_pair(target.lm, draft.lm, target.tokenizer, draft.tokenizer)
    assert draft.lm.vocab_subset is not None  # the default draft uses the reduced head
    ids = encode(target.tokenizer, "Write a Python function that returns the n-th Fibonacci number.")
    cfg = DecodeConfig(max_new_tokens=16)
    eos = eos_token_ids(target)
    ar = [t for r in decode(target.lm, None, ids, None, cfg, eos_ids=eos) for t in r.emitted_tokens]
    recs = list(decode(target.lm, draft.lm, ids, parse_policy("fixed:3"), cfg, eos_ids=eos))
    assert [t for r in recs for t in r.emitted_tokens] == ar
    assert sum(r.accepted for r in recs) > 0  # a realistic pair: drafts do get accepted
    assert len(ar) == 16
