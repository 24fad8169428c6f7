"""engine.policies.pair_costs: the cost-aware window's cost model (T(k) from timings, catch-up) and the
per-pair book that shares it across requests."""

import pytest

from engine.policies.calibration import PAIR_MIN
from engine.policies.pair_costs import CATCHUP_MIN, PairBooks, StepCosts

BOOKS = PairBooks()  # these tests' pair books (a run's are engine.run.BOOKS)


def shared_costs(target, draft, c, v):
    return BOOKS.of(target, draft).costs(c, v)


def shared_stats(target, draft, temperature):
    return BOOKS.of(target, draft).stats_at(temperature)


def nearest_stats(target, draft, temperature):
    return BOOKS.of(target, draft).nearest(temperature)


def prime_costs(target, draft, probe):
    BOOKS.of(target, draft).prime(probe)


class Model:
    """A stand-in for a loaded model: hashable and weakly referenceable, as the engine's are."""


def test_shared_costs_are_per_pair_and_primed_from_a_probe():
    t, d1, d2 = Model(), Model(), Model()
    prime_costs(t, d1, {"t_draft_ms": 30.0, "t_target_ms": {"1": 70.0, "2": 100.0, "4": 150.0}})
    a = shared_costs(t, d1, 0.3, 0.05)
    assert a is shared_costs(t, d1, 0.9, 0.9) and a is not shared_costs(t, d2, 0.3, 0.05)
    tv, total, td, _ = a.table(3)
    assert tv[0] == 70.0 and tv[1] == 100.0 and tv[3] == 150.0 and td == 30.0 and total[1] == 130.0
    prime_costs(t, d2, {"t_draft_ms": float("nan"), "t_target_ms": {"1": 70.0}})  # model-free: nothing to prime
    assert not shared_costs(t, d2, 0.3, 0.05).measured


def test_the_worked_example_and_the_catchup_price():
    c = StepCosts(0.3, 0.05)
    c.prime(30.0, {"1": 70.0, "2": 100.0})
    tv, total, td, ta = c.table(1)
    assert total == [70.0, 130.0] and td == 30.0 and ta == 0.0
    assert c.catchup_ms(CATCHUP_MIN - 1, td) == 0.0  # a steady-state first forward
    assert c.catchup_ms(100, td) == pytest.approx(100 * 0.1 * 30.0)  # the prior: a tenth of a draft step
    c.add_draft(True, 30.0 + 100 * 2.0, unseen=100)  # a measured catch-up: 2 ms per unseen token
    assert c.catchup_ms(100, td) == pytest.approx(200.0) and list(c.d1) == []


def test_a_probe_with_a_prefill_timing_prices_catchups_from_the_start():
    """The bench's probe times the draft's prefill per token: a request's first catch-up (its prompt) is priced
    at that, not at the prior's tenth of a draft step."""
    t, d = Model(), Model()
    prime_costs(t, d, {"t_draft_ms": 30.0, "t_target_ms": {"1": 70.0}, "t_draft_prefill_ms": 2.5})
    c = shared_costs(t, d, 0.3, 0.05)
    assert c.catchup_ms(700, c.table(1)[2]) == pytest.approx(700 * 2.5)


def test_no_catchup_is_priced_before_any_draft_is_timed():
    c = StepCosts(0.3, 0.05)
    c.add_verify(0, 100.0)
    assert c.measured and c.catchup_ms(3000, c.table(1)[2]) == 0.0


def test_stats_are_per_temperature_and_nothing_is_shared_for_an_unhashable_stand_in():
    t, d = Model(), Model()
    assert shared_stats(t, d, 0.0) is shared_stats(t, d, 0.0) is not shared_stats(t, d, 0.7)
    unhashable = []
    assert shared_costs(unhashable, d, 0.3, 0.05) is not shared_costs(unhashable, d, 0.3, 0.05)


def test_nearest_stats_is_the_closest_other_temperature_with_enough_labels():
    t, d = Model(), Model()
    assert nearest_stats(t, d, 0.7) is None
    greedy, hot, few = shared_stats(t, d, 0.0), shared_stats(t, d, 1.0), shared_stats(t, d, 0.6)
    for s, n in ((greedy, PAIR_MIN), (hot, PAIR_MIN), (few, PAIR_MIN - 1)):
        for _ in range(n):
            s.add(3, True)
    assert nearest_stats(t, d, 0.7) is hot  # 0.6 is nearer but has too few labels
    assert nearest_stats(t, d, 0.2) is greedy and nearest_stats(t, d, 0.0) is hot  # never its own
    assert nearest_stats(Model(), d, 0.7) is None


def test_a_disturbed_stretch_does_not_price_a_window_out_for_good():
    """Noise only adds time, and it can hit one window size more than the others (the sizes chosen while the
    machine was busy): with half of k = 2's samples slowed by 40 ms its price stays near the undisturbed 136 ms,
    where a median would read it 20 ms dearer and keep the policy from ever choosing k = 2 again."""
    c = StepCosts(0.3, 0.05)
    for i in range(16):
        c.add_verify(0, 111.0 + i % 3)
        c.add_verify(1, 125.0 + i % 3)
        c.add_verify(2, 136.0 + i % 3 + (40.0 if i % 2 else 0.0))
    tv = c.table(2)[0]
    assert tv[2] < 140.0 and tv[1] < 128.0
