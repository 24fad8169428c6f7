"""The peers driver (engine.bench.peers): rounds, interleaving, one row schema, the target check."""

import pytest

from engine.bench.peers import (PeerPrompt, PeerRun, aggregate, check_run, format_table, rounds, run_peers,
                                target_check)

PROMPTS = [PeerPrompt(q, "qa", f"p{q}", (1, 2, q)) for q in (10, 20, 30)]


class Fake:
    """An engine whose AR emits 1 token per 0.1 s and `spec:K` accepts every draft (K + 1 per call)."""

    def __init__(self, name, configs, one_at_a_time=False, speed=1.0):
        self.name, self.configs, self.weights, self.speed = name, tuple(configs), "w", speed
        self.one_at_a_time = one_at_a_time
        self.log, self.active, self.stopped = [], None, False

    def start(self):
        self.log.append("start")
        return {"version": "0"}

    def activate(self, config):
        self.active = config
        self.log.append(f"activate {config}")

    def run(self, config, prompt, n):
        if self.one_at_a_time:
            assert config == self.active, "ran a config that is not up"
        self.log.append((config, prompt.question_id, n))
        if config == "ar":
            return PeerRun(self.name, config, prompt.question_id, prompt.task, n, 0.1 * n / self.speed, output=[7] * n)
        k = int(config.split(":")[1])
        steps = n // (k + 1)
        return PeerRun(self.name, config, prompt.question_id, prompt.task, n, 0.1 * steps / self.speed, steps,
                       k * steps, k * steps, [steps] * k, output=[7] * n)

    def stop(self):
        self.stopped = True


def test_rounds_one_per_config_of_an_engine_that_holds_one_at_a_time():
    a, v = Fake("a", ["ar", "spec:2"]), Fake("v", ["ar", "spec:2", "spec:4"], one_at_a_time=True)
    plan = rounds([a, v])
    assert [[(e.name, c) for e, c in r] for r in plan] == [
        [("a", "ar"), ("a", "spec:2"), ("v", "ar")], [("a", "ar"), ("a", "spec:2"), ("v", "spec:2")],
        [("a", "ar"), ("a", "spec:2"), ("v", "spec:4")]]
    assert len(rounds([a])) == 1


def test_run_interleaves_rotates_and_aggregates_each_engine_over_its_own_ar():
    a, v = Fake("a", ["ar", "spec:2"]), Fake("v", ["ar", "spec:3"], one_at_a_time=True, speed=0.5)
    said = []
    res = run_peers([a, v], PROMPTS, 12, warmup_tokens=4, say=said.append)
    assert a.stopped and v.stopped and res["complete"]
    # a: warm-up once (round 1), then every prompt in both rounds; the order rotates by one per prompt
    timed = [x for x in a.log if isinstance(x, tuple) and x[2] == 12]
    assert len(timed) == 2 * 2 * 3 and ("ar", 10, 4) in a.log and ("spec:2", 10, 4) in a.log
    assert v.log.count("activate ar") == 1 and v.log.count("activate spec:3") == 1
    assert ("spec:3", 10, 4) in v.log  # a config started in a later round is warmed up too
    first = [x for x in a.log if isinstance(x, tuple) and x[2] == 12][:4]
    assert [x[0] for x in first] == ["ar", "spec:2", "spec:2", "ar"]  # q10: a-ar first; q20: rotated
    rows = {(r["engine"], r["config"]): r for r in res["rows"]}
    assert rows[("a", "ar")]["prompts"] == 6 and rows[("v", "spec:3")]["prompts"] == 3
    assert rows[("a", "ar")]["tokens_per_s"] == pytest.approx(10.0)
    assert rows[("v", "ar")]["tokens_per_s"] == pytest.approx(5.0)
    assert rows[("a", "spec:2")]["speedup_vs_own_ar"] == pytest.approx(3.0)
    assert rows[("v", "spec:3")]["speedup_vs_own_ar"] == pytest.approx(4.0)  # over v's AR, not a's
    assert rows[("v", "spec:3")]["mean_acceptance_length"] == pytest.approx(4.0)
    assert rows[("v", "spec:3")]["per_position_acceptance"] == [1.0, 1.0, 1.0]
    assert rows[("a", "spec:2")]["draft_acceptance_rate"] == 1.0 and rows[("a", "ar")]["mean_acceptance_length"] is None
    assert rows[("a", "spec:2")]["same_output_as_ar"] == "6/6"
    assert res["config"]["rounds"][1] == ["a ar", "a spec:2", "v spec:3"]
    assert {r["reported"]["round"] for r in res["runs"]} == {1, 2}
    t = target_check(res["rows"], "a", "v")
    assert t["ours"] == "a spec:2" and t["ratio"] == pytest.approx(30.0 / 20.0)
    table = format_table(res["rows"])
    assert "| a | w | `spec:2` | 30.00 | 3.00× | 3.000 | 1.000 | 1.00 1.00 | 6/6 |" in table


def test_engines_are_stopped_when_a_run_fails_and_bad_setups_are_refused():
    class Broken(Fake):
        def run(self, config, prompt, n):
            raise RuntimeError("engine died")

    a, b = Fake("a", ["ar"]), Broken("b", ["ar"])
    with pytest.raises(RuntimeError, match="engine died"):
        run_peers([a, b], PROMPTS, 8, say=lambda s: None)
    assert a.stopped and b.stopped
    with pytest.raises(ValueError, match="lack 'ar'"):
        run_peers([Fake("a", ["spec:2"])], PROMPTS, 8, say=lambda s: None)
    with pytest.raises(ValueError, match="names must differ"):
        run_peers([Fake("a", ["ar"]), Fake("a", ["ar"])], PROMPTS, 8, say=lambda s: None)
    with pytest.raises(ValueError, match="no prompts"):
        run_peers([a], [], 8)


@pytest.mark.parametrize("run, msg", [
    (PeerRun("e", "ar", 1, "qa", 0, 1.0), "0 tokens"),
    (PeerRun("e", "d:2", 1, "qa", 5, 1.0, 1, 2, 3), "3 accepted of 2 drafted"),
    (PeerRun("e", "d:2", 1, "qa", 5, 1.0, 0, 2, 1), "over 0 verify steps"),
    (PeerRun("e", "d:2", 1, "qa", 5, 1.0, 1, 2, 2, [1, 0]), "do not add up to 2"),
])
def test_impossible_counts_are_one_line(run, msg):
    with pytest.raises(ValueError, match=msg):
        check_run(run)


def test_per_position_is_none_when_any_prompt_lacks_it():
    runs = [PeerRun("e", "ar", 1, "qa", 4, 1.0), PeerRun("e", "d:2", 1, "qa", 4, 1.0, 2, 4, 2, [2, 0]),
            PeerRun("e", "d:2", 2, "qa", 4, 1.0, 2, 4, 2, None)]
    row = aggregate(runs)[1]
    assert row["per_position_acceptance"] is None and row["mean_acceptance_length"] == pytest.approx(2.0)
    assert row["same_output_as_ar"] is None  # no outputs to compare


def test_ar_ratio_of_two_engines():
    from engine.bench.peers import ar_ratio

    rows = [{"engine": "speclab-quantized", "config": "ar", "tokens_per_s": 6.0},
            {"engine": "llama.cpp", "config": "ar", "tokens_per_s": 20.0},
            {"engine": "llama.cpp", "config": "draft:2", "tokens_per_s": 12.0}]
    r = ar_ratio(rows, "speclab-quantized", "llama.cpp")
    assert r["ratio"] == 0.3 and r["peer"] == "llama.cpp ar"
    assert ar_ratio(rows, "speclab", "llama.cpp") is None


def test_log_entry_has_setup_table_target_check_and_drift():
    from engine.bench.peers import log_entry

    res = run_peers([Fake("speclab", ["ar", "fixed:2"]), Fake("vllm", ["ar", "draft:2"], True, 0.5)], PROMPTS, 12,
                    say=lambda s: None)
    res |= {"command": "python -m engine peers --max-new-tokens 12", "machine": "AMD EPYC, 2 cores",
            "lscpu": {"Model name": "AMD EPYC", "CPU(s)": "2", "Flags": "fpu avx2 avx512f avx512_bf16"},
            "target_check": {"vllm": target_check(res["rows"])}}
    text = log_entry(res)
    assert text.startswith(f"# {res['created'][:10]} — ") and "python -m engine peers --max-new-tokens 12" in text
    assert "flags include avx2 avx512f avx512_bf16." in text and format_table(res["rows"]) in text
    assert "speclab fixed:2 30.00 tokens/s ÷ vllm draft:2 15.00 = **2.00×**" in text
    assert "speclab 10.00 / 10.00; vllm 5.00" in text  # speclab's AR ran in both rounds, vLLM's in the first
