"""The hindsight oracle window run for real (engine.policies.oracle): exact, never wastes a draft, fewest calls."""


def test_decode_cli_with_the_oracle(model_dirs, tmp_path):
    from engine.__main__ import main
    from engine.trace.format import load_trace

    t, d, prompts = model_dirs
    ar, orc = tmp_path / "ar.jsonl", tmp_path / "oracle.jsonl"
    common = ["--target", str(t), "--prompts", str(prompts), "--max-new-tokens", "16", "--dtype", "fp32"]
    assert main(["decode", *common, "--out", str(ar)]) == 0
    assert main(["decode", *common, "--draft", str(d), "--policy", "oracle", "--out", str(orc)]) == 0
    a, o = load_trace(ar), load_trace(orc)
    assert o.header["policy"]["name"] == "oracle"
    assert [e["output_ids"] for e in o.ends.values()] == [e["output_ids"] for e in a.ends.values()]
    assert all(s["accepted"] == len(s["draft_tokens"]) for s in o.steps)
    assert main(["decode", *common, "--draft", str(d), "--policy", "oracle", "--temperature", "0.7",
                 "--out", str(tmp_path / "x.jsonl")]) != 0  # greedy only, refused before any decoding
