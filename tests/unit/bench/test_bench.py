"""The benchmark command end to end on a 2-prompt smoke subset (tiny local models)."""


class Tok:
    """A tokenizer of 'w1 w2 …' prompts: word wN is token N."""

    chat_template = None

    def __call__(self, text):
        return {"input_ids": [int(w[1:]) for w in text.split()]}

    def decode(self, ids):
        return " ".join(f"w{i}" for i in ids)


def test_bench_counts_dropped_drafts(pair):
    from engine.bench.runner import run_ours
    from engine.decode import DecodeConfig

    target, draft = pair
    r = run_ours("confidence:0.99,trim=1", target, draft, [3, 17, 5, 9], DecodeConfig(max_new_tokens=12), ())
    assert r.dropped > 0 and r.draft_calls == r.drafted + r.dropped  # every dropped draft was a forward


def test_bench_counts_the_drafts_prompt_prefill_and_ar_none(pair):
    """A drafting run's draft caches the prompt (all but the token it extends with logits) once; an AR run and
    a window that never drafts make the draft cache nothing: what the modelled speedup prices as catch-up, and the
    time it took."""
    from engine.bench.runner import run_ours
    from engine.decode import DecodeConfig

    target, draft = pair
    prompt = list(range(3, 3 + 20))  # > the drafter's one-forward catch-up (8): it goes through prefill
    cfg = DecodeConfig(max_new_tokens=6)
    fixed = run_ours("fixed:2", target, draft, prompt, cfg, ())
    ar = run_ours("ar", target, draft, prompt, cfg, ())
    assert fixed.draft_prefill_tokens == len(prompt) - 1 and ar.draft_prefill_tokens == 0
    assert 0 < fixed.draft_prefill_s < fixed.wall_s and ar.draft_prefill_s == 0.0  # and timed, inside the run


def test_interrupted_bench_leaves_interrupted_traces(pair, tmp_path):
    """A run stopped after its first prompt: the checkpoint holds that prompt, the traces no footer."""
    from engine.bench.bench import BenchConfig, run_bench, trace_name
    from engine.trace.format import load_trace

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3"]}\n'
                       '{"question_id": 2, "category": "writing", "turns": ["w4 w5"]}\n')
    target, draft = pair
    saved = []

    def checkpoint(r):
        saved.append(r)
        raise KeyboardInterrupt

    cfg = BenchConfig(configs=("ar", "fixed:2"), temperatures=(0.0,), max_new_tokens=6, warmup=0)
    try:
        run_bench(target, draft, Tok(), prompts, cfg, progress=False, trace_dir=tmp_path / "t", checkpoint=checkpoint)
    except KeyboardInterrupt:
        pass
    assert len(saved) == 1 and len(saved[0]["runs"]) == 2 and not saved[0]["complete"]
    tr = load_trace(tmp_path / "t" / trace_name("fixed:2", 0.0))
    assert not tr.complete and len(tr.ends) == 1


def test_bench_refuses_a_model_draft_after_at():
    import pytest

    from engine.bench.bench import split_config

    assert split_config("fixed:4@lookup:n=4") == ("fixed:4", "lookup:n=4")
    assert split_config("heuristic") == ("heuristic", None)
    for bad in ("fixed:4@smollm2-135m", "ar@lookup", "oracle@suffix", "hf:ar@lookup"):
        with pytest.raises(ValueError, match="model-free"):
            split_config(bad)


def test_a_spec_comma_taken_as_separator_is_refused_with_the_fix():
    import pytest

    from engine.cli.checks import split_specs

    assert split_specs("ar,fixed:2,heuristic") == ["ar", "fixed:2", "heuristic"]
    assert split_specs("ar;confidence:0.5,trim=1") == ["ar", "confidence:0.5,trim=1"]
    with pytest.raises(ValueError, match="separate specs with ';'"):
        split_specs("ar,confidence:0.5,trim=1")


def test_model_time_reaches_inside_drafters(pair):
    """A phrase drafter's draft-model forwards are model time: the bench's non-model share must not
    count them as drafter overhead (it once did, reading ~40 % overhead that was the draft model)."""
    from engine.bench.runner import _hf_modules
    from engine.drafters.phrase import PhraseDrafter

    _, draft = pair
    direct = _hf_modules(draft)
    assert direct and draft.model in direct
    assert _hf_modules(PhraseDrafter(draft, n=2)) == direct
    assert _hf_modules(object()) == []


def test_the_cost_probe_keeps_the_lower_of_two_rounds(monkeypatch):
    """One disturbed round reads slow; the probe that primes the cost-aware window keeps the other round's reading
    for the draft and for each verify length."""
    import math

    from engine.bench import runner

    readings = iter([{1: 96.0}, {1: 110.0, 2: 130.0, 4: 150.0, 8: 170.0, 16: 240.0},
                     {1: 37.0}, {1: 112.0, 2: 125.0, 4: 160.0, 8: 165.0, 16: 230.0}])
    monkeypatch.setattr(runner, "forward_curve", lambda lm, ids, ks, reps: next(readings))
    monkeypatch.setattr(runner, "_forward_lm", lambda draft: draft)
    got = runner.measure_costs(object(), object(), [1, 2, 3])
    assert math.isnan(got["t_draft_prefill_ms"])  # a stand-in without a logits-free prefill
    assert got["t_draft_ms"] == 37.0
    assert got["t_target_ms"] == {1: 110.0, 2: 125.0, 4: 150.0, 8: 165.0, 16: 230.0}
    assert got["c"] == 37.0 / 110.0


def test_the_prefill_probe_times_prefill_per_token_on_an_empty_cache(monkeypatch, pair):
    """ms per token of the draft's logits-free prefill over PREFILL_PROBE tokens (the probe's prompt repeated),
    the median of its repeats; the cache is left empty."""
    from engine.bench import runner

    _, draft = pair
    clock = iter([0.0, 0.512, 10.0, 10.256, 20.0, 20.512])  # 2, 1 and 2 ms per token over 256 tokens
    monkeypatch.setattr(runner.time, "perf_counter", lambda: next(clock))
    before = draft.prefilled
    assert runner.prefill_ms_per_token(draft, [5, 6, 7], reps=3) == 2.0
    assert draft.prefilled - before == 3 * runner.PREFILL_PROBE and draft.length == 0


def test_run_bench_steps_refuse_and_compare_as_the_run_did(tmp_path):
    """run_bench's named steps: a weights path listed twice and a task without prompts are refused before any
    timing; greedy mismatches are named per configuration, prompt and (with several paths) path."""
    import pytest

    from engine.bench.bench import BenchConfig, RunResult, _encoded_prompts, _greedy_mismatches, _weights_paths

    class M:
        def __init__(self, name, weights):
            self.name, self.weights = name, weights

    t, d = M("t", "dense"), M("d", "dense")
    with pytest.raises(ValueError, match="lists the .* path twice"):
        _weights_paths(t, d, ((M("t", "dense"), M("d", "dense")),))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "w1 w2", "category": "writing"}\n')
    with pytest.raises(ValueError, match=r"no prompts of task\(s\) math_reasoning"):
        _encoded_prompts(prompts, BenchConfig(configs=("ar",), tasks=("writing", "math_reasoning")), None)

    def run(conf, out, weights="dense"):
        r = RunResult.__new__(RunResult)
        r.config, r.output, r.question_id, r.temperature, r.weights = conf, out, 7, 0.0, weights
        return r

    results = [run("ar", [1, 2]), run("fixed:2", [1, 2]), run("fixed:4", [1, 3]), run("hf:ar", [9])]
    assert _greedy_mismatches(results, 7, ["dense"]) == ["fixed:4 q7"]
    results += [run("ar", [1], "int8"), run("fixed:4", [2], "int8")]
    assert _greedy_mismatches(results, 7, ["dense", "int8"]) == ["fixed:4 q7 [dense]", "fixed:4 q7 [int8]"]


def test_a_context_window_config_runs_the_benchs_own_draft_through_it(pair):
    """`fixed:2@ctx:4,sink=1` is the run's draft model reading 5 prompt tokens: split and checked like any
    config, built on the path's own draft model, and its runs cache 5 prompt tokens where `fixed:2` caches all."""
    from engine.bench.bench import BenchConfig, _own_drafters, config_specs, split_config
    from engine.drafters.autoregressive import AutoregressiveDrafter, DraftContext

    assert split_config("fixed:2@ctx:4,sink=1") == ("fixed:2", "ctx:4,sink=1")
    cfg = BenchConfig(configs=("ar", "fixed:2", "fixed:2@ctx:4,sink=1"), temperatures=(0.0,), max_new_tokens=6,
                      warmup=0)
    specs = dict(config_specs(cfg))
    assert specs["fixed:2@ctx:4,sink=1"].draft == "model" and specs["fixed:2@ctx:4,sink=1"].draft_context == "ctx:4,sink=1"
    assert specs["fixed:2"].draft_context == ""
    target, draft = pair
    own = _own_drafters(cfg, {"dense": (target, draft)})
    dr = own[("dense", "fixed:2@ctx:4,sink=1")]
    assert isinstance(dr, AutoregressiveDrafter) and dr.lm is draft and dr.context == DraftContext(4, 1)
    from engine.bench.runner import run_config

    prompt = list(range(3, 23))
    full = run_config("fixed:2", target, draft, prompt, 0.0, 0, (), 6)
    windowed = run_config("fixed:2@ctx:4,sink=1", target, dr, prompt, 0.0, 0, (), 6)
    assert full.output == windowed.output  # greedy: exact either way
    assert full.draft_prefill_tokens >= len(prompt) - 1 and windowed.draft_prefill_tokens <= 5


def test_a_context_window_config_in_a_whole_bench_run(pair, tmp_path):
    """run_bench with `fixed:2@ctx:2,sink=1` beside `fixed:2`: greedy-exact, its cost book primed with the path's
    probe (no probe of its own), and a valid trace whose header names the window."""
    from engine.bench.bench import BenchConfig, run_bench, trace_name
    from engine.trace.format import load_trace

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"question_id": 1, "category": "qa", "turns": ["w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11"]}\n')
    target, draft = pair
    cfg = BenchConfig(configs=("ar", "fixed:2", "costaware@ctx:2,sink=1"), temperatures=(0.0,), max_new_tokens=8,
                      warmup=0)
    out = run_bench(target, draft, Tok(), prompts, cfg, progress=False, trace_dir=tmp_path / "t")
    assert out["complete"] and out["greedy_mismatches"] == [] and "by_drafter" not in out["costs"]
    runs = {r["config"]: r for r in out["runs"]}
    assert runs["fixed:2"]["draft_prefill_tokens"] >= 10 and runs["costaware@ctx:2,sink=1"]["draft_prefill_tokens"] <= 3
    tr = load_trace(tmp_path / "t" / trace_name("costaware@ctx:2,sink=1", 0.0))
    assert tr.complete and tr.header["draft"]["context"] == {"window": 2, "sink": 1}
    assert "context" not in load_trace(tmp_path / "t" / trace_name("fixed:2", 0.0)).header["draft"]


def test_model_time_includes_the_direct_decoder_step():
    """An LM whose forwards take the one-call decoder's direct step (engine.core.lm.HFModel.lean_step) times that
    step as model time: it is one of the hooked modules."""
    from engine.bench.runner import _ForwardTimer, _hf_modules
    from engine.core.lm import HFModel
    from engine.kernels import dense_kernel
    from tests.unit.kernels.test_fast_decoder import use_dense_kernel
    from tests.unit.kernels.test_fused import _wide

    if dense_kernel.available() is not None:
        pytest.skip(f"dense kernel: {dense_kernel.available()}")
    model = _wide("llama")
    use_dense_kernel(model)
    lm = HFModel(model)
    assert lm.lean_step in _hf_modules(lm)
    timer = _ForwardTimer(lm.lean_step)
    lm.prefill(list(range(1, 41)))
    lm.extend([5])
    timer.close()
    assert timer.s > 0 and timer.first_s == timer.s  # one step, timed once
