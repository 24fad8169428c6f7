"""The benchmark command end to end on a 2-prompt smoke subset (tiny local models)."""

import json

from engine.__main__ import main


def test_bench_smoke(model_dirs, tmp_path, capsys):
    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n'
                       '{"question_id": 2, "category": "writing", "turns": ["w4 w5"]}\n')
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    rc = main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
               "--max-new-tokens", "12", "--configs",
               "ar;fixed:2;heuristic;confidence:0.5,trim=1;hf:constant:2;hf:confidence:0.4;oracle",
               "--temperatures", "0,0.7", "--dtype", "fp32", "--out", str(out), "--markdown", str(md)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert not res["greedy_mismatches"]
    overall = {(r["temperature"], r["config"]): r for r in res["rows"] if r["task"] == "overall"}
    assert overall[(0.0, "ar")]["speedup_vs_ar"] == 1.0
    assert overall[(0.0, "ar")]["mean_emitted_per_call_incl_bonus"] == 1.0
    assert overall[(0.0, "fixed:2")]["mean_emitted_per_call_incl_bonus"] > 1.0
    assert {c for _, c in overall} == {"ar", "fixed:2", "heuristic", "confidence:0.5,trim=1", "hf:constant:2",
                                       "hf:confidence:0.4", "oracle"}
    assert (0.7, "oracle") not in overall  # the hindsight oracle is greedy-only: skipped, not faked
    # The oracle drafts exactly what the target keeps: every drafted token accepted. (None would mean it
    # drafted nothing at all, which is not what an oracle of a noisy copy does.)
    assert overall[(0.0, "oracle")]["draft_acceptance_rate"] == 1.0
    assert overall[(0.0, "oracle")]["target_calls"] <= overall[(0.0, "fixed:2")]["target_calls"]
    assert res["costs"]["c"] > 0 and len(res["runs"]) == 2 * (2 * 6 + 1)
    text = md.read_text()
    assert "| overall | fixed:2 |" in text and "Cost ratio c" in text and "command:" in text
    assert "speedup vs AR" in capsys.readouterr().out


def test_bench_refuses_greedy_only_trim_before_running(model_dirs, tmp_path, capsys):
    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n')
    out = tmp_path / "bench.json"
    rc = main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
               "--max-new-tokens", "4", "--configs", "ar;pacer:b=2,trim=1", "--temperatures", "0,0.7",
               "--dtype", "fp32", "--out", str(out)])
    assert rc == 2 and not out.exists()  # 2: the CLI's exit code for refused input (main's one-line error)
    err = capsys.readouterr().err.strip().splitlines()[-1]  # the last line: weight-loading bars come first
    assert err.startswith("error: 'pacer:b=2,trim=1' drops drafts by value, exact for greedy decoding only"), err


def test_bench_writes_traces_and_overhead(model_dirs, tmp_path):
    """--trace-dir: one trace per configuration, each a complete run that loads; our greedy traces
    reproduce AR; HF rows are recorded step by step; non-model time is a share of wall time."""
    from engine.bench.bench import trace_name
    from engine.trace.format import load_trace

    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n'
                       '{"question_id": 2, "category": "writing", "turns": ["w4 w5"]}\n')
    out, tdir = tmp_path / "bench.json", tmp_path / "traces"
    configs = ["ar", "fixed:2", "oracle", "hf:heuristic:2", "hf:ar"]
    rc = main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
               "--max-new-tokens", "10", "--configs", ",".join(configs), "--temperatures", "0", "--dtype", "fp32",
               "--out", str(out), "--trace-dir", str(tdir)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["complete"] and "command" in res and "machine" in res
    outputs = {}
    for c in configs[:-1]:  # plain generate() leaves no per-step record
        tr = load_trace(tdir / trace_name(c, 0.0))
        assert tr.complete and len(tr.ends) == 2 and tr.header["command"].startswith("python -m engine")
        for rid, end in tr.ends.items():
            steps = [s for s in tr.steps if s["request_id"] == rid]
            assert sum(s["emitted"] for s in steps) == end["new_tokens"] == len(end["output_ids"])
        outputs[c] = [tr.ends[i]["output_ids"] for i in sorted(tr.ends)]
    assert outputs["fixed:2"] == outputs["ar"] == outputs["oracle"] == outputs["hf:heuristic:2"]
    assert not (tdir / trace_name("hf:ar", 0.0)).exists()
    rows = {r["config"]: r for r in res["rows"] if r["task"] == "overall"}
    assert rows["hf:ar"]["mean_emitted_per_call_incl_bonus"] == 1.0
    assert rows["hf:heuristic:2"]["draft_acceptance_rate"] is not None  # recorded: drafts and accepts are known
    for r in rows.values():
        assert 0.0 <= r["non_model_share"] < 1.0 and r["non_model_ms_per_call"] >= 0.0
    assert {"python", "torch", "transformers"} <= set(res["software"])  # the versions behind every figure


def test_bench_mixes_model_and_model_free_drafters_in_one_run(model_dirs, tmp_path):
    """`POLICY@DRAFTER` runs a model-free drafter beside the model draft, and `hf:lookup:N` is HF's
    prompt lookup on the same target: all interleaved in one run, greedy outputs all equal to AR."""
    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"  # repeated words so lookup finds matches
    prompts.write_text('{"question_id": 1, "category": "summarization", "turns": ["w1 w2 w3 w4 w1 w2 w3 w4 w1 w2"]}\n')
    out, tdir = tmp_path / "bench.json", tmp_path / "traces"
    rc = main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
               "--max-new-tokens", "16", "--configs", "ar;fixed:2;fixed:4@lookup:n=4,ngram=2;matchlen:1@suffix:n=8;"
               "hf:lookup:4", "--temperatures", "0", "--warmup", "0", "--dtype", "fp32", "--out", str(out),
               "--trace-dir", str(tdir)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["complete"] and res["greedy_mismatches"] == []
    runs = {r["config"]: r for r in res["runs"]}
    assert set(runs) == {"ar", "fixed:2", "fixed:4@lookup:n=4,ngram=2", "matchlen:1@suffix:n=8", "hf:lookup:4"}
    assert runs["fixed:4@lookup:n=4,ngram=2"]["draft_calls"] == runs["fixed:4@lookup:n=4,ngram=2"]["drafted"]
    assert runs["hf:lookup:4"]["new_tokens"] == runs["ar"]["new_tokens"]
    for r in runs.values():  # the prompt's prefill is timed inside the run (ours and HF's first forward)
        assert 0 < r["prefill_s"] < r["wall_s"], r["config"]
    rows = {x["config"]: x for x in res["rows"] if x["task"] == "overall"}
    assert rows["ar"]["decode_speedup_vs_ar"] == 1.0 and rows["fixed:2"]["decode_speedup_vs_ar"] > 0
    # each drafter's trace names its own draft: the model-free configs are not labelled with the model
    from engine.trace.format import load_trace

    lk = load_trace(tdir / "fixed-4-lookup-n-4-ngram-2-t0.jsonl")
    assert "lookup" in str(lk.header["draft"]) and not (tdir / "hf-lookup-4-t0.jsonl").exists()
    assert "lookup" not in str(load_trace(tdir / "fixed-2-t0.jsonl").header["draft"])


def test_bench_tasks_filter(model_dirs, tmp_path, capsys):
    """--tasks keeps only those Spec-Bench tasks (MT-bench labels fold into mt_bench); a task with no
    prompt is refused before any timing, in one line."""
    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n'
                       '{"question_id": 2, "category": "writing", "turns": ["w4 w5"]}\n'
                       '{"question_id": 3, "category": "rag", "turns": ["w6 w7"]}\n')
    out = tmp_path / "bench.json"
    base = ["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-task", "1",
            "--max-new-tokens", "3", "--configs", "ar,fixed:2", "--temperatures", "0", "--dtype", "fp32",
            "--warmup", "0", "--out", str(out)]
    assert main(base + ["--tasks", "rag,mt_bench"]) == 0
    res = json.loads(out.read_text())
    assert {r["task"] for r in res["rows"]} == {"rag", "mt_bench", "overall"}
    out.unlink()
    assert main(base + ["--tasks", "rag,sumarization"]) == 2 and not out.exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "error: --tasks: no prompts of task(s) sumarization in p.jsonl"
