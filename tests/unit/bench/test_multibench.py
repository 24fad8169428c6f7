"""Multi-draft verifiers (RRS, K-SEQ, RBV, SpecTr-GBV as published): exact enumeration, notes regression
values, the optimal-acceptance bound, drafter/tree bookkeeping and χ² of the real decode loop."""


def test_multibench_rows_and_tables(pair):
    """The benchmark's run/aggregate/format path on the tiny pair (no tokenizer needed)."""
    from engine.bench.multibench import MultiBenchConfig, aggregate, run_one
    from engine.bench.multibench_report import format_tables

    target, draft = pair
    cfg = MultiBenchConfig(ks=(1, 2), ls=(3,), temps=(0.7,), max_new_tokens=10)
    assert cfg.configs() == ["token:1:3", "block:1:3", "rrs:2:3", "kseq:2:3", "spectr-gbv-published:1:3",
                             "spectr-gbv-published:2:3", "rbv:2:3", "kbv:2:3"]
    runs = [run_one(s, target, draft, [1, 5, 9, 3], 0.7, cfg, ()) for s in ["ar"] + cfg.configs()]
    rows = aggregate(runs)
    assert all(r["new_tokens"] == 10 for r in runs)
    assert next(r for r in rows if r["config"] == "ar")["mean_emitted_per_call_incl_bonus"] == 1.0
    text = format_tables({"rows": rows})
    assert "RBV (ours, lossless)" in text and "Paper-shaped summary" in text
    from engine.bench.multibench import measure_modes

    modes = measure_modes(target, draft, [1, 5, 9, 3], ks=(2,), ls=(3,), reps=1)
    assert {"draft_batch_ms", "draft_sequential_ms", "target_tree_ms", "target_batch_ms"} <= set(modes[1])
    assert "target batch-K" in format_tables({"rows": [], "modes": modes})
