"""Phrase drafter (engine.drafters.phrase) and its `onehot-tree` verifier: exact pool proposals on
hand-made sequences, the per-step fields, the window-policy gates (fixed, matchlen, PACER's stop rule
on the drafter's scores), greedy exactness on the tiny pair (one chain and k-candidate trees in one
target forward), exact enumeration of the tree verifier, and χ² losslessness of the real loop."""
import pytest


# ---------------------------------------------------------------- CLI (decode and bench hooks)


@pytest.mark.parametrize("extra,verifier", [("n=2,ngram=1", "token"), ("n=2,k=2,ngram=1", "onehot-tree")])
def test_decode_cli_with_the_phrase_drafter(model_dirs, tmp_path, extra, verifier):
    from engine.__main__ import main
    from engine.trace.format import load_trace

    t, d, prompts = model_dirs
    out = tmp_path / "phrase.jsonl"
    assert main(["decode", "--target", str(t), "--draft", f"phrase:model={d},{extra}", "--policy", "fixed:6",
                 "--verifier", verifier, "--prompts", str(prompts), "--max-new-tokens", "16", "--dtype", "fp32",
                 "--out", str(out)]) == 0
    tr = load_trace(out)
    assert tr.complete and "phrase:n=2" in tr.header["draft"]["name"]
    assert all({"model_tokens", "phrase_tokens", "source"} <= set(s["policy_fields"]["drafter"]) for s in tr.steps)
    # k > 1 with a verifier that assumes i.i.d. drafts is refused before decoding
    assert main(["decode", "--target", str(t), "--draft", f"phrase:model={d},k=2", "--policy", "fixed:3",
                 "--prompts", str(prompts), "--out", str(tmp_path / "no.jsonl")]) == 2


def test_bench_cli_with_the_phrase_drafter(model_dirs, tmp_path):
    import json

    from engine.__main__ import main

    t, d, prompts = model_dirs
    out = tmp_path / "bench.json"
    assert main(["bench", "--target", str(t), "--draft", f"phrase:model={d},n=2,ngram=1", "--prompts", str(prompts),
                 "--per-category", "1", "--max-new-tokens", "10", "--configs", "ar;fixed:4;matchlen:1,offset=2",
                 "--temperatures", "0,0.7", "--warmup", "0", "--dtype", "fp32", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["complete"] and res["greedy_mismatches"] == []
