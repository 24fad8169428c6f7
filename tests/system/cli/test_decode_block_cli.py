"""DFlash-style block drafter: block mask (no leakage), training/inference agreement, target features,
greedy exactness of block-drafter decoding through the engine's decode loop."""

import pytest
from tests.conftest import REPO, tiny_llama


@pytest.fixture(scope="module")
def target():
    return tiny_llama(3, layers=2, hidden=32)


COMMITTED = REPO / "models" / "block-drafter-tiny"


@pytest.mark.skipif(not (COMMITTED / "drafter" / "model.safetensors").is_file(), reason="no committed drafter")
def test_cli_decode_with_block_drafter(tmp_path):
    """`python -m engine decode --draft block:PATH` writes the same output ids as the autoregressive run."""
    import json

    from engine.__main__ import main
    from engine.trace.format import load_trace

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": p}) for p in ("Write a short story about a robot who",
                                                                        "The weather today is")) + "\n")
    outs = {}
    for name, extra in (("ar", []), ("block", ["--draft", f"block:{COMMITTED}", "--policy", "fixed:15"])):
        out = tmp_path / f"{name}.jsonl"
        assert main(["decode", "--target", str(COMMITTED), *extra, "--prompts", str(prompts), "--dtype", "fp32",
                     "--device", "cpu", "--max-new-tokens", "40", "--out", str(out)]) == 0
        outs[name] = load_trace(out)
    ar, blk = outs["ar"], outs["block"]
    assert len(ar.ends) == 2 and sorted(blk.ends) == sorted(ar.ends)
    assert all(blk.ends[i]["output_ids"] == ar.ends[i]["output_ids"] and ar.ends[i]["output_ids"] for i in ar.ends)
    assert blk.header["draft"]["name"] == "block-drafter" and len(blk.steps) < len(ar.steps)
