"""The benchmark command end to end on a 2-prompt smoke subset (tiny local models)."""

import json

from engine.__main__ import main
from engine.bench import aggregate, RunResult
from tests.test_cli import model_dirs  # noqa: F401  (fixture)


def test_bench_smoke(model_dirs, tmp_path, capsys):  # noqa: F811
    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n'
                       '{"question_id": 2, "category": "writing", "turns": ["w4 w5"]}\n')
    out, md = tmp_path / "bench.json", tmp_path / "bench.md"
    rc = main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-category", "1",
               "--max-new-tokens", "12", "--configs",
               "ar;fixed:2;heuristic;confidence:0.5,trim=1;hf:constant:2;hf:confidence:0.4;oracle",
               "--temperatures", "0,0.7", "--dtype", "fp32", "--out", str(out), "--markdown", str(md)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert not res["greedy_mismatches"]
    overall = {(r["temperature"], r["config"]): r for r in res["rows"] if r["task"] == "overall"}
    assert overall[(0.0, "ar")]["speedup_vs_ar"] == 1.0
    assert overall[(0.0, "ar")]["emitted_per_call_incl_bonus"] == 1.0
    assert overall[(0.0, "fixed:2")]["emitted_per_call_incl_bonus"] > 1.0
    assert {c for _, c in overall} == {"ar", "fixed:2", "heuristic", "confidence:0.5,trim=1", "hf:constant:2",
                                       "hf:confidence:0.4", "oracle"}
    assert (0.7, "oracle") not in overall  # the hindsight oracle is greedy-only: skipped, not faked
    assert overall[(0.0, "oracle")]["acceptance_rate"] in (None, 1.0)
    assert overall[(0.0, "oracle")]["target_calls"] <= overall[(0.0, "fixed:2")]["target_calls"]
    assert res["costs"]["c"] > 0 and len(res["runs"]) == 2 * (2 * 6 + 1)
    text = md.read_text()
    assert "| overall | fixed:2 |" in text and "Cost ratio c" in text and "command:" in text
    assert "speedup vs AR" in capsys.readouterr().out


def test_aggregate_ratio_of_means():
    rs = [RunResult("ar", 0.0, "qa", 1, 10, 1.0, 10), RunResult("ar", 0.0, "qa", 2, 10, 0.5, 10),
          RunResult("fixed:2", 0.0, "qa", 1, 10, 0.5, 4, 8, 6), RunResult("fixed:2", 0.0, "qa", 2, 10, 0.25, 5, 10, 5)]
    rows = {(r["task"], r["config"]): r for r in aggregate(rs)}
    f = rows[("overall", "fixed:2")]
    assert f["tokens_per_s"] == 30.0 and f["speedup_vs_ar"] == 2.0  # mean(20, 40) / mean(10, 20)
    assert f["emitted_per_call_incl_bonus"] == 20 / 9 and f["acceptance_rate"] == 11 / 18
    assert f["wasted_drafts"] == 18 - 11
    trim = aggregate(rs[:2] + [RunResult("confidence:0.5,trim=1", 0.0, "qa", 1, 10, 0.5, 8, 2, 1, dropped=6)])
    assert [r["wasted_drafts"] for r in trim if r["config"] != "ar"] == [1 + 6] * 2  # rejected + dropped


def test_bench_counts_dropped_drafts(pair):
    from engine.bench import run_ours
    from engine.decode import DecodeConfig

    target, draft = pair
    r = run_ours("confidence:0.99,trim=1", target, draft, [3, 17, 5, 9], DecodeConfig(max_new_tokens=12), ())
    assert r.dropped > 0 and r.draft_calls == r.drafted + r.dropped  # every dropped draft was a forward


def test_bench_refuses_greedy_only_trim_before_running(model_dirs, tmp_path, capsys):  # noqa: F811
    t, d, _ = model_dirs
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n')
    out = tmp_path / "bench.json"
    rc = main(["bench", "--target", str(t), "--draft", str(d), "--prompts", str(prompts), "--per-category", "1",
               "--max-new-tokens", "4", "--configs", "ar;pacer:b=2,trim=1", "--temperatures", "0,0.7",
               "--dtype", "fp32", "--out", str(out)])
    assert rc != 0 and not out.exists()
    assert "exact for greedy decoding only" in capsys.readouterr().err
