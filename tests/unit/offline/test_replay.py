"""Window analysis: reference runs, the exact simulator (checked against real decode runs), the cost
model and closed forms (checked against the project notes' tables), the tables and the CLI."""
import math
import pytest
import torch

from engine.offline import analysis as an
from engine.offline.analysis import CostModel, load_reference, oracle_ratio_table, simulate_policy, window_table
from engine.decode import DecodeConfig, decode
from engine.core.lm import HFModel
from engine.policies.base import parse_policy
from engine.hindsight import accept_runs
from engine.offline.reference import ReferenceConfig, build_reference
from engine.trace.reference_file import Reference
from engine.offline.replay import _expected, parse_spec, simulate_steps, walk_reference
from tests.conftest import noisy_copy

from tests.conftest import REF_CATS as CATS, REF_N_NEW as N_NEW, REF_PROMPTS as PROMPTS, synthetic
# Thresholds sit inside the scaled draft's signal range (q median ≈ 0.65, entropy median ≈ 1.1 nats),
# so every adaptive policy really stops at different places than fixed γ does.
POLICIES = ["fixed:1", "fixed:3", "fixed:9", "heuristic", "heuristic:2,max=8", "confidence:0.6",
            "confidence:0.6,trim=1", "cumulative:0.5", "cumulative:0.9", "entropy:1.0", "entropy:0.5,max=6"]


# ------------------------------------------------------------------ simulator fidelity


@pytest.mark.parametrize("spec", POLICIES)
def test_simulation_equals_real_decode(ref, models, spec):
    """The simulator replays the very policy classes engine.decode uses: per-step windows and
    accepted counts, hence target calls, must match a real greedy decode exactly."""
    target, draft = models
    cost = CostModel.flat(0.1)
    stops = set()
    for rid, req in enumerate(ref.requests):
        real = list(decode(target, draft, req["prompt_ids"], parse_policy(spec), DecodeConfig(max_new_tokens=N_NEW)))
        sim = simulate_steps(ref, spec, cost, rid)
        assert [(s.window, s.accepted, s.emitted) for s in real] == list(zip(sim.window, sim.accepted, sim.emitted))
        assert [s.stop_reason for s in real] == list(sim.stop_reason.replace("oracle", "cap"))
        stops |= {s.stop_reason for s in real}
    if spec.startswith(("confidence", "cumulative", "entropy")):
        assert "policy" in stops and "cap" in stops, "thresholds must make the policy stop sometimes, not always"
    row = simulate_policy(ref, spec, cost)
    assert (row["value"] == "exact").all()


def test_dynamic_programme_equals_walk_on_greedy(ref):
    cost = CostModel.flat(0.07)
    for spec in ("fixed:1", "fixed:5", "fixed:16", "oracle:a", "oracle:b", "oracle:a,max=4"):
        pol = parse_spec(spec)
        for req in ref.requests:
            steps = walk_reference(req, pol, ref.max_new_tokens, cost)
            dp = _expected(req, pol, ref.max_new_tokens, cost)
            assert dp["target_calls"] == pytest.approx(len(steps))
            assert dp["drafted"] == pytest.approx(sum(s["window"] for s in steps))
            assert dp["sim_time"] == pytest.approx(sum(s["cost"] for s in steps))


def test_oracle_definitions():
    # match pattern → A = [2,1,0, 0, 3,2,1,0]; oracle steps start at 0, 3, 4
    r = synthetic([[1, 1, 0, 0, 1, 1, 1, 0]], budget=100)
    cost = CostModel.flat(0.1)
    a = simulate_steps(r, "oracle:a", cost)
    assert list(a.pos) == [0, 3, 4] and list(a.window) == [2, 0, 3] and list(a.emitted) == [3, 1, 4]
    assert list(a.window) == list(a.accepted)  # (a): nothing wasted, every call emits A + 1
    b = simulate_steps(r, "oracle:b", cost)
    assert list(b.window) == [3, 1, 4] and list(b.accepted) == [2, 0, 3]  # (b): one wasted per call
    assert a["cost"].sum() == pytest.approx(3 + 0.1 * 5) and b["cost"].sum() == pytest.approx(3 + 0.1 * 8)
    capped = simulate_steps(r, "oracle:a,max=1", cost)
    assert capped["window"].max() == 1 and capped["emitted"].sum() == 8


def test_oracle_beats_every_fixed_window(ref):
    ot = oracle_ratio_table(ref, costs=(0.02, 0.05, 0.1, 0.2), policies=("heuristic",))
    assert (ot["ratio_a"] >= 1.0 - 1e-12).all() and (ot["ratio_a"] >= ot["ratio_b"] - 1e-12).all()
    assert (ot[ot["task"] == "all"]["ratio_a"] > 1.05).all()
    wt = window_table(ref, 0.05, policies=())
    allr = wt[wt["task"] == "all"].set_index("policy")
    assert allr.loc["oracle:a", "wasted_draft"] == 0
    assert allr.loc["oracle:a", "target_calls"] <= allr[allr["kind"] == "fixed"]["target_calls"].min()
    assert (allr["mean_emitted_per_call_incl_bonus"] * allr["target_calls"]).round(6).eq(len(PROMPTS) * N_NEW).all()


def test_oracle_is_never_beaten_in_target_calls(ref):
    """No simulated policy (fixed or adaptive) needs fewer target calls than the exact oracle."""
    wt = window_table(ref, 0.05, policies=("heuristic", "confidence:0.4", "cumulative", "entropy",
                                            "confidence:0.9", "heuristic:1,max=8"))
    for _, rows in wt.groupby("task"):
        rows = rows.set_index("policy")
        assert (rows["target_calls"] >= rows.loc["oracle:a", "target_calls"]).all(), rows["target_calls"]
        assert len(rows) > 17  # 16 fixed windows, the oracles and the adaptive policies all simulated


def _with_tails(ref: Reference, n_tail: int) -> Reference:
    """`ref` with a free-running tail of `n_tail` tokens at every mismatch and max_window n_tail + 1."""
    for req in ref.requests:
        req["tails_by_pos"] = {j: {"pos": j, "tokens": [3] * n_tail, "q_top": [0.9] * n_tail,
                                   "entropy": [0.1] * n_tail}
                               for j, a in enumerate(req["accept_run"]) if a == 0}
    ref.header["max_window"] = n_tail + 1
    return ref


def test_adaptive_replay_of_a_run_reaching_the_end_of_an_eos_output():
    """The last step's accepted run reaches the end of an output shorter than the budget (EOS): no
    mismatch is recorded there, so past it the policy sees no signal — the replay must not look one up."""
    ref = _with_tails(synthetic([[0, 1, 1, 1]], budget=16), 7)
    steps = simulate_steps(ref, "confidence:0.4,max=8", CostModel.flat(0.1), 0)
    assert steps["emitted"].sum() == 4 and steps["pos"].tolist()[-1] == 1


def test_a_window_longer_than_the_recorded_tails_is_refused_or_capped():
    ref = _with_tails(synthetic([[0, 1, 0, 1, 1, 0, 0, 1] * 3]), 7)  # max_window 8
    with pytest.raises(ValueError, match=r"--max-window 16|max=8"):
        simulate_steps(ref, "confidence:0.4", CostModel.flat(0.1), 0)  # drafts up to 16
    assert an.fit_to_references("confidence:0.4", [ref]) == "confidence:0.4,max=8"
    assert an.fit_to_references("heuristic", [ref]) == "heuristic:max=8"
    assert an.fit_to_references("fixed:12", [ref]) == "fixed:12"  # fixed windows need no tails
    wt = an.window_table(ref, CostModel.flat(0.1), gammas=[1, 2], policies=["confidence:0.4"], by_task=False)
    assert wt["policy"].str.contains("max=8").any()


def test_cost_optimal_oracle_is_the_cheapest_schedule():
    """oracle:c = exhaustive search over every window schedule on small outputs (brute force over
    all sequences of windows), never slower than oracle (a) or any fixed window, and equal to (a)
    when a wide verify costs nothing extra (flat verify, c = 0)."""
    import itertools

    from engine.offline.replay import cost_optimal_windows

    def brute(runs, cost):
        n, best = len(runs), math.inf

        def go(j, total):
            nonlocal best
            if j >= n:
                best = min(best, total)
                return
            for w in range(min(runs[j], n - j - 1) + 1):
                go(j + w + 1, total + cost.step(w))
        go(0, 0.0)
        return best

    steep = CostModel(c=0.3, verify=(1.0, 2.0, 2.4, 2.8, 3.2, 3.6, 4.0, 4.4), label="steep")
    for bits in itertools.product([0, 1], repeat=8):
        ref = synthetic([list(bits)])
        runs = ref.requests[0]["accept_run"]
        for cost in (steep, CostModel.flat(0.2)):
            sim = simulate_policy(ref, "oracle:c", cost)["sim_time"].iloc[0]
            assert sim == pytest.approx(brute(runs, cost)), (bits, cost.label)
            assert sim <= simulate_policy(ref, "oracle:a", cost)["sim_time"].iloc[0] + 1e-9
            for g in (1, 2, 4):
                assert sim <= simulate_policy(ref, f"fixed:{g}", cost)["sim_time"].iloc[0] + 1e-9
        assert cost_optimal_windows(runs, 8, CostModel.flat(0.0)) == runs[:8] or \
            simulate_policy(ref, "oracle:c", CostModel.flat(0.0))["sim_time"].iloc[0] == \
            pytest.approx(simulate_policy(ref, "oracle:a", CostModel.flat(0.0))["sim_time"].iloc[0])
    assert cost_optimal_windows([3, 2, 1, 0], 4, CostModel.flat(0.5)) == [3, 2, 1, 0]  # docstring example, w = 3 first
    with pytest.raises(ValueError, match="greedy"):
        _expected({"beta": [0.5] * 4, "draft_argmax": [1] * 4, "output_ids": [1] * 4}, parse_spec("oracle:c"), 4,
                  CostModel.flat(0.1))


def test_a_replay_prices_costaware_with_its_cost_model_not_the_wall_clock(monkeypatch):
    """The cost-aware window times its own calls in a real run; a replay makes none, so `walk` hands it the
    replay's CostModel (CostAware.price_with). The answer must follow the cost model — never drafting where a
    draft token costs two target forwards, drafting long where it is nearly free — and not the clock."""
    import itertools
    import time

    ref = load_reference("traces/ref-qwen-greedy.jsonl")
    cheap, dear = CostModel.flat(0.01), CostModel(c=2.0, verify=(1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 3.8, 4.0, 4.2))

    def run(cost):
        df = simulate_policy(ref, "costaware:max=7", cost)
        return df["drafted"].sum(), df["target_calls"].sum(), df["ar_time"].sum() / df["sim_time"].sum()

    base = run(cheap)
    ticks = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) * 3.7)  # a clock that says every call is slow
    assert run(cheap) == base
    assert base[0] / base[1] > 2 and base[2] > 1.5  # long windows where drafting is nearly free
    drafted, calls, speedup = run(dear)
    assert drafted == 0 and speedup == pytest.approx(1.0)  # a plain AR run where no window can pay
