"""engine/results.py on small synthetic result files: each writer's shape read, legacy metric names
mapped, the best configuration kept per method, the headline, the README splice."""

import json

import pytest

from engine import results as rs
from engine.metrics import ACCEPTANCE_RATE, EMITTED_PER_CALL

MACHINE = "AMD EPYC, 2 cores, no GPU; flags: avx2 avx512f avx512_bf16"
TASKS = ["writing", "translation", "summarization", "qa", "math_reasoning", "rag"]


def bench_row(config, t, speedup, emitted=2.0, acc=0.5, task="overall", legacy=False):
    names = ("emitted_per_call_incl_bonus", "acceptance_rate") if legacy else (EMITTED_PER_CALL, ACCEPTANCE_RATE)
    return {"temperature": t, "task": task, "config": config, "prompts": 6, "speedup_vs_ar": speedup,
            names[0]: emitted, names[1]: acc}


def write(d, name, obj):
    (d / name).write_text(json.dumps(obj))


@pytest.fixture
def rdir(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    rows = [bench_row(c, t, s) for c, t, s in [("ar", 0.0, 1.0), ("fixed:2", 0.0, 1.10), ("fixed:4", 0.0, 1.25),
                                               ("fixed:4", 0.7, 0.90), ("oracle", 0.0, 1.6), ("heuristic", 0.7, 1.3),
                                               ("fixed:10@lookup:n=10", 0.0, 1.4), ("hf:lookup:10", 0.0, 1.05),
                                               ("ar", 0.7, 1.0)]]
    rows += [bench_row("fixed:4", 0.0, 9.9, task=t) for t in TASKS]  # per-task rows: not the tables'
    write(d, "bench-a.json", {"target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b", "dtype": "bfloat16",
                              "machine": MACHINE, "config": {"max_new_tokens": 64}, "rows": rows,
                              "experiment": "experiments/a.toml"})
    write(d, "bench-old.json", {"target": "smollm2-135m", "draft": "smollm2-draft", "dtype": "float32",
                                "config": {"max_new_tokens": 32},
                                "rows": [bench_row("ar", 0.0, 1.0, 1.0, None, legacy=True),
                                         bench_row("pacer", 0.0, 0.8, 1.5, 0.3, legacy=True),
                                         bench_row("pacer", 0.0, 0.8, 1.5, 0.3, task="qa", legacy=True)]})
    write(d, "multibench-b.json", {"target": "qwen2.5-coder-1.5b", "dtype": "bfloat16", "machine": MACHINE,
                                   "config": {"max_new_tokens": 64},
                                   "prompts": [{"category": c} for c in TASKS],
                                   "rows": [{"temperature": 0.7, "config": "rbv:4:4", "method": "rbv", "k": 4,
                                             "L": 4, "prompts": 6, "block_efficiency": 3.5, "speedup": 1.2}]})
    write(d, "multibench-paired.json", {"kind": "paired", "target": "qwen2.5-coder-1.5b", "dtype": "bfloat16",
                                        "machine": "Intel(R) Xeon(R) Processor, 2 cores; flags: avx2 avx512_bf16 amx_bf16",
                                        "config": {"max_new_tokens": 64}, "prompts": [{"category": "rag"}],
                                        "rows": [{"sr_model": 5.0}],
                                        "real_rows": [{"temperature": 0.7, "config": "rbv:4:2", "method": "rbv",
                                                       "k": 4, "L": 2, "prompts": 12, "be": 2.5, "sr": 1.6}]})
    write(d, "pacer-sweep-x.json", {"costs": {}})
    write(d, "multibench-modes.json", {"target": "smollm2-135m", "rows": [], "modes": []})
    return d


def test_machine_summary():
    assert rs.machine_summary(MACHINE) == "AMD EPYC, avx512_bf16"
    assert rs.machine_summary("Intel(R) Xeon(R) Processor, 2 cores; flags: avx2 avx512_bf16 amx_bf16") == \
        "Intel Xeon, avx512_bf16 + AMX"
    assert rs.machine_summary("AMD EPYC, 2 cores; flags: avx2") == "AMD EPYC, AVX2 only"
    assert rs.machine_summary(None) == "machine not recorded"


@pytest.mark.parametrize("config, draft, method", [
    ("ar", "m", "AR"), ("fixed:4", "m", "fixed γ (best)"), ("pacer:b=1", "m", "PACER"), ("pacer-nope", "m",
     "PACER ablation (nope)"), ("fixed:10@lookup:n=10", "m", "prompt lookup"), ("matchlen:1@suffix:n=16", "m", "suffix"),
    ("fixed:4", "m+phrase:n=2", "phrase"), ("fixed:10", "lookup:n=10", "prompt lookup"), ("hf:lookup:10", "m",
     "HF prompt lookup"), ("hf:heuristic:5", "m", "HF assisted"), ("hf:ar", "m", "HF generate (no draft)"),
    ("oracle", "m", "oracle (hindsight)"), ("fixed:3@eagle:qwen2.5-coder-1.5b", "m", "EAGLE-style head"),
    ("fixed:3@ctx:192", "m", "fixed γ (best), draft context window"),
    ("costaware@ctx:252,sink=4", "m", "costaware, draft context window")])
def test_bench_method(config, draft, method):
    assert rs.bench_method(config, draft) == method


def test_each_shape_is_read_and_the_rest_listed_with_a_reason(rdir):
    runs, skipped = rs.read_all(rdir)
    assert [r.file for r in runs] == ["results/bench-a.json", "results/bench-old.json", "results/multibench-b.json",
                                      "results/multibench-paired.json"]
    assert skipped == {"results/multibench-modes.json": "no speedup rows (a draft-mode comparison)",
                       "results/pacer-sweep-x.json": rs.UNTABULATED["pacer-sweep"]}
    a, old, mb, paired = runs
    assert a.regime == "bf16 · AMD EPYC, avx512_bf16 · all tasks" and a.tokens == 64 and a.prompts == 6
    assert all(r.speedup < 9 for r in a.rows)  # the overall rows only
    (pacer,) = [r for r in old.rows if r.config == "pacer"]
    assert (pacer.emitted, pacer.acceptance) == (1.5, 0.3)  # legacy names mapped
    assert old.regime == "fp32 · machine not recorded · qa"
    assert mb.rows[0].method == "multi-draft RBV" and mb.rows[0].emitted == 3.5
    assert paired.rows[0].decode_only and paired.rows[0].speedup == 1.6 and paired.prompts == 12


def test_best_configuration_per_method_and_same_run_temperatures(rdir):
    runs, _ = rs.read_all(rdir)
    best = rs.best_per_method(rs.entries(runs[:1]))
    by = {e.method: e for e in best}
    assert by["fixed γ (best)"].config == "fixed:4"  # 1.25 beats fixed:2's 1.10
    assert by["fixed γ (best)"].warm.speedup == 0.90  # its own T = 0.7 row, not another config's
    assert by["heuristic"].greedy is None and by["heuristic"].warm.speedup == 1.3
    assert best[0].method == "oracle (hindsight)" and best[-1].method == "AR"
    line = rs.entry_line(by["fixed γ (best)"])
    assert line.startswith("| fixed γ (best) | `fixed:4` | 1.25× | 0.90× | 2.00 · 2.00 | 50 % · 50 % | 6 × 64 |")
    assert "[bench-a.json](results/bench-a.json) · [a](../experiments/a.toml)" in line


def test_headline_skips_baselines_hindsight_and_unrecorded_machines(rdir):
    runs, _ = rs.read_all(rdir)
    head = [(lab, e.method, e.config) for lab, e in rs.headline(runs)]
    assert head == [("greedy", "prompt lookup", "fixed:10@lookup:n=10"), ("T = 0.7", "heuristic", "heuristic"),
                    ("T = 0.7", "multi-draft RBV", "rbv:4:2")]
    assert [lab for lab, _ in rs.headline(runs, all_tasks_only=True)] == ["greedy", "T = 0.7"]
    assert "1.60×†" in rs.headline_line(*rs.headline(runs)[2])


def test_page_lists_every_table_the_runs_and_the_untabulated(rdir):
    runs, skipped = rs.read_all(rdir)
    page = rs.render_page(runs, skipped)
    assert page.count("\n## ") == 1 + 3 + 1 + 1  # headline, three regimes with a table, every run, not tabulated
    assert "## SmolLM2-135M ← smollm2-draft · fp32 · machine not recorded · qa" in page
    assert "- [pacer-sweep-x.json](results/pacer-sweep-x.json): offline replay" in page
    assert page == rs.render_page(runs, skipped)  # deterministic


def test_readme_splice_and_missing_markers(tmp_path, rdir):
    runs, _ = rs.read_all(rdir)
    block = rs.render_readme_block(runs)
    text = f"intro\n{rs.BEGIN}\nold\n{rs.END}\nrest\n"
    out = rs.splice(text, block)
    assert out.startswith("intro\n" + rs.BEGIN) and out.endswith(rs.END + "\nrest\n") and "old" not in out
    assert "(docs/results/bench-a.json)" in out and "(experiments/a.toml)" in out
    with pytest.raises(ValueError, match="README.md: no results block"):
        rs.splice("no markers", block)


def test_rendered_files_and_stale(tmp_path, rdir):
    page, readme = tmp_path / "results.md", tmp_path / "README.md"
    readme.write_text(f"x\n{rs.BEGIN}\n{rs.END}\n")
    files = rs.rendered_files(rdir, page, readme)
    assert rs.stale_files(files) == [page, readme]
    for p, t in files.items():
        p.write_text(t)
    assert rs.stale_files(rs.rendered_files(rdir, page, readme)) == []
    page.write_text(page.read_text().replace("1.25×", "1.26×"))
    assert rs.stale_files(rs.rendered_files(rdir, page, readme)) == [page]


def test_a_bench_on_two_weights_paths_is_two_regimes(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    rows = [{**bench_row(c, 0.0, s), "weights": w} for w, c, s in [
        ("dense", "ar", 1.0), ("dense", "fixed:2", 1.4), ("quantized", "ar", 1.0), ("quantized", "fixed:2", 0.9)]]
    rows += [{**bench_row("fixed:2", 0.0, 9.9, task=t), "weights": "quantized"} for t in TASKS]
    write(d, "bench-q.json", {"target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b", "dtype": "bfloat16",
                              "machine": MACHINE, "config": {"max_new_tokens": 64}, "rows": rows,
                              "weights": ["dense", "quantized"], "experiment": "experiments/q.toml"})
    runs, _ = rs.read_all(d)
    assert [r.regime for r in runs] == ["bf16 · AMD EPYC, avx512_bf16 · all tasks",
                                        "bf16 · quantized weights · AMD EPYC, avx512_bf16 · all tasks"]
    assert {r.config: r.speedup for r in runs[1].rows} == {"ar": 1.0, "fixed:2": 0.9}


def test_a_quantized_run_on_the_amx_tiles_is_its_own_regime(tmp_path):
    """A run that asked for the AMX int8 tiles (its recorded command starts with SPECLAB_QTILES=1) is labelled so:
    the headline must not credit the default quantized path with a kernel the user has to ask for."""
    d = tmp_path / "results"
    d.mkdir()
    rows = [{**bench_row(c, 0.0, s), "weights": "quantized"} for c, s in [("ar", 1.0), ("fixed:2", 1.2)]]
    base = {"target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b", "dtype": "bfloat16", "machine": MACHINE,
            "config": {"max_new_tokens": 64}, "rows": rows, "weights": ["quantized"]}
    write(d, "bench-a.json", {**base, "command": "python -m engine bench --weights quantized"})
    write(d, "bench-b.json", {**base, "command": "SPECLAB_QTILES=1 python -m engine bench --weights quantized"})
    # a switch turned off for a comparison (the panel product: the routes before it) is its own regime too
    write(d, "bench-c.json", {**base, "command": "SPECLAB_QPANEL=0 python -m engine bench --weights quantized"})
    runs, _ = rs.read_all(d)
    assert sorted(r.regime for r in runs) == sorted([
        "bf16 · quantized weights · AMD EPYC, avx512_bf16 · all tasks",
        "bf16 · quantized weights on AMX int8 tiles (SPECLAB_QTILES=1) · AMD EPYC, avx512_bf16 · all tasks",
        "bf16 · quantized weights · kernels SPECLAB_QPANEL=0 · AMD EPYC, avx512_bf16 · all tasks"])
    # the README's headline keeps the opt-in kernel's regime, not the comparison arm's (docs/results.md has both)
    readme = {e.run.regime for _, e in rs.headline(runs, all_tasks_only=True)}
    assert any("SPECLAB_QTILES=1" in r for r in readme) and not any("QPANEL" in r for r in readme)
    assert any("QPANEL" in e.run.regime for _, e in rs.headline(runs))


def test_the_headline_says_plain_ar_where_nothing_beats_it(tmp_path, rdir):
    """The headline sentence names the best lossless method per pair and regime in words, and "plain AR"
    where no method beats 1.00×; the README carries it (inserted above the results block if it had none)."""
    runs, _ = rs.read_all(rdir)
    lines = rs.headline_sentences(runs)
    assert lines and all(line.startswith("- **") and line.endswith(".") for line in lines)
    best = rs.headline(runs)
    assert any(e.method in " ".join(lines) for _, e in best)
    slow = rs.Entry(best[0][1].run, "fixed:2", "fixed γ (best)",
                    rs.Row("fixed:2", "fixed γ (best)", 0.0, 0.996, None, None), None)
    assert rs._best_words(slow, warm=False).startswith("plain AR")
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{rs.BEGIN}\n{rs.END}\n")
    text = rs.rendered_files(rdir, tmp_path / "results.md", readme)[readme]
    assert text.index(rs.HEAD_BEGIN) < text.index(rs.BEGIN) and rs.render_headline(runs) in text
