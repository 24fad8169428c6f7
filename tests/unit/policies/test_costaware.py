"""The cost-aware window (engine.policies.costaware) on synthetic costs and acceptances, driven the way
engine.decode drives a policy (propose → keep_drafting per token → drop_on_stop → update) with a fake
clock, so the in-run cost model sees exactly the costs the test sets; plus exactness through the real
decode loop (χ² against the enumerated target) and bad input."""

from __future__ import annotations

import random

import pytest

from engine.offline.replay import SimVerify
from engine.policies.base import DraftInfo, RequestContext, parse_policy
from engine.policies.costaware import NONE, CostAware, bin_of
from tests.conftest import chi_square_of_loop

from engine.policies.pair_costs import PairBooks

BOOKS = PairBooks()  # these tests' pair books (a run's are engine.run.BOOKS), handed in as RequestContext.book


def shared_costs(target, draft, c, v):
    return BOOKS.of(target, draft).costs(c, v)


def shared_stats(target, draft, temperature):
    return BOOKS.of(target, draft).stats_at(temperature)


class Model:
    """A stand-in for a loaded model: hashable and weakly referenceable, as the engine's are."""


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def drive(pol: CostAware, clock: Clock, steps: int, t_draft_ms: float, t_verify_ms, accept, conf=lambda i: 0.99,
          rng=None, gated=True, copy=False):
    """Run `steps` synthetic steps; returns the verified windows. accept(i, q) = P(draft i accepted | the
    ones before were); a draft costs t_draft_ms, a verify of k drafts t_verify_ms(k) (milliseconds)."""
    rng = rng or random.Random(0)
    windows = []
    for _ in range(steps):
        cap = pol.propose()
        drafted, dropped, qs = 0, 0, []
        if gated:
            while drafted < cap:
                clock.t += t_draft_ms / 1e3
                drafted += 1
                q = conf(drafted)
                qs.append(q)
                info = (DraftInfo(drafted, 0, 1.0, 0.0, None, 1.0, match_len=3) if copy
                        else DraftInfo(drafted, 0, q, 0.0, None, q))
                if not pol.keep_drafting(info):
                    dropped = 0 if copy else pol.drop_on_stop()
                    break
        else:
            drafted = cap
            qs = [conf(i + 1) for i in range(cap)]
            clock.t += cap * t_draft_ms / 1e3
        window = drafted - dropped
        clock.t += t_verify_ms(window) / 1e3
        acc = 0
        while acc < window and rng.random() < accept(acc + 1, qs[acc]):
            acc += 1
        pol.update(SimVerify(acc, acc + 1, acc == window), window)
        pol.step_fields()
        windows.append(window)
    return windows


def test_falls_back_to_autoregressive_when_drafting_costs_too_much():
    """c = 0.5 and 30 % acceptance: no window beats AR, so nearly every step is K = 0 (re-probes aside)."""
    clock = Clock()
    pol = CostAware(clock=clock)
    w = drive(pol, clock, 200, 50.0, lambda k: 100.0 * (1 + 0.1 * k), lambda i, q: 0.3, conf=lambda i: 0.5)
    assert sum(x == 0 for x in w[20:]) / len(w[20:]) > 0.9
    assert pol.step_fields() == {} and pol.costs.table(2)[1][0] == pytest.approx(100.0)


def test_drafts_long_when_acceptance_is_high_and_drafting_is_cheap():
    clock = Clock()
    pol = CostAware(clock=clock)
    w = drive(pol, clock, 60, 2.0, lambda k: 100.0 * (1 + 0.02 * k), lambda i, q: 0.95)
    assert sum(w[10:]) / len(w[10:]) >= 5


def test_confidence_decides_per_token():
    """A draft right when confident (q = 0.99) and wrong otherwise (q = 0.1): the policy learns to stop
    at low-confidence tokens — and drops them unverified when their verify costs more than they return."""
    clock = Clock()
    pol = CostAware(clock=clock)
    rng = random.Random(1)
    conf = lambda i: 0.99 if rng.random() < 0.6 else 0.1  # noqa: E731
    w = drive(pol, clock, 150, 5.0, lambda k: 100.0 * (1 + 0.3 * k), lambda i, q: 0.97 if q > 0.5 else 0.02,
              conf=conf, rng=random.Random(2))
    assert 0 < sum(w[30:]) / len(w[30:]) < 4
    low = pol.cal.cond(1, bin_of(DraftInfo(1, 0, 0.1, 0.0, None, 0.1)))
    high = pol.cal.cond(1, bin_of(DraftInfo(1, 0, 0.99, 0.0, None, 0.99)))
    assert low < 0.2 < 0.8 < high


def test_reprobes_and_switches_back():
    """Acceptance 0 for 60 steps (AR wins), then 0.95: the periodic k = 1 probes see it and drafting resumes."""
    clock = Clock()
    pol = CostAware(clock=clock, probe=4)
    phase = {"p": 0.0}
    w = drive(pol, clock, 60, 10.0, lambda k: 100.0 * (1 + 0.05 * k), lambda i, q: phase["p"])
    assert w[20:].count(0) >= 30 and 1 in w[20:]  # mostly AR, with probes of k = 1
    phase["p"] = 0.95
    w2 = drive(pol, clock, 120, 10.0, lambda k: 100.0 * (1 + 0.05 * k), lambda i, q: phase["p"])
    assert sum(w2[-30:]) / 30 >= 2


def test_probe_interval_backs_off():
    clock = Clock()
    pol = CostAware(clock=clock, probe=2)
    drive(pol, clock, 5, 20.0, lambda k: 100.0 * (1 + 0.1 * k), lambda i, q: 0.0, conf=lambda i: 0.3)
    decisions = []
    for _ in range(40):
        pol.propose()
        decisions.append(pol._fields["decision"])
        clock.t += 0.1
        pol.update(SimVerify(0, 1, False), 0)
        pol.step_fields()
    probes = [i for i, d in enumerate(decisions) if d == "probe"]
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert len(probes) >= 2 and gaps == sorted(gaps) and gaps[-1] > gaps[0]


def test_a_drafter_that_never_asks_gets_a_planned_cap():
    """The block drafter never consults keep(): after one such step the cap is the fixed-k plan."""
    clock = Clock()
    pol = CostAware(clock=clock)
    w = drive(pol, clock, 40, 1.0, lambda k: 100.0 * (1 + 0.1 * k), lambda i, q: 0.8, gated=False)
    assert not pol.gated and 1 <= w[-1] < pol.max_window


def test_model_free_drafts_use_per_position_acceptance_and_are_never_dropped():
    clock = Clock()
    pol = CostAware(clock=clock)
    w = drive(pol, clock, 80, 0.01, lambda k: 100.0 * (1 + 0.01 * k), lambda i, q: 0.9, copy=True)
    assert pol.cal.n[0][NONE] > 0 and sum(sum(r[:NONE]) for r in pol.cal.n) == 0
    assert pol.cal.cond(1, NONE) > 0.8 and sum(w[-20:]) / 20 >= 3


def test_step_fields_record_the_decision_and_utilities():
    clock = Clock()
    pol = CostAware(clock=clock, max_window=4)
    pol.propose()
    clock.t += 0.01
    pol.keep_drafting(DraftInfo(1, 0, 0.9, 0.1, None, 0.9))
    clock.t += 0.1
    pol.update(SimVerify(1, 2, True), 1)
    f = pol.step_fields()
    assert f["decision"] in ("draft", "ar", "probe") and len(f["u"]) == 5 and f["u_unit"] == "tok/t1"
    assert {"k_plan", "lambda", "value", "s", "stop"} <= set(f)


def test_spec_round_trips_and_registers():
    pol = parse_policy("costaware:6,c=0.2,v=0.1,probe=4,measure=0")
    assert pol.spec == "costaware:max=6,c=0.2,v=0.1,probe=4,measure=0"
    assert parse_policy(pol.spec).spec == pol.spec


@pytest.mark.parametrize("spec, msg", [("costaware:c=0", "c must be a positive"), ("costaware:c=-1", "positive"),
                                       ("costaware:v=-0.5", "v must be"), ("costaware:probe=0", "probe"),
                                       ("costaware:max=65", "max window"), ("costaware:measure=2", "measure"),
                                       ("costaware:ref=/no/such.jsonl", "ref=")])
def test_bad_input_is_one_line(spec, msg):
    with pytest.raises(ValueError, match=msg) as e:
        parse_policy(spec)
    assert "\n" not in str(e.value)


def test_prior_from_a_reference_run():
    pol = parse_policy("costaware:ref=traces/ref-qwen-greedy.jsonl")
    assert pol.prior_n > 2 and 0 < pol.c0 < 5 and pol.v0 >= 0
    top = bin_of(DraftInfo(1, 0, 0.99, 0.0, None, 0.99))
    assert pol.prior[top] > pol.prior[0]


def decode_steps(pol):
    from engine.core.lm import TableLM
    from engine.core.sampling import SamplingConfig
    from engine.decode import DecodeConfig, decode

    return [s for seed in range(20) for s in decode(TableLM(3, seed=11), TableLM(3, seed=12), [0], pol, DecodeConfig(
        max_new_tokens=3, sampling=SamplingConfig(temperature=1.0, seed=seed)))]


def _exact_policy():
    # deterministic prices (measure=0), a steep verify: low-confidence drafts are dropped, so the test
    # exercises the drop as well as the stop
    return CostAware(max_window=3, c=0.05, v=0.4, measure=0)


@pytest.mark.slow
def test_chi_square_of_the_real_loop():
    """T = 1 through engine.decode: the stops and drops read only m_i = max q_i (fixed before x_i is
    drawn) and past verify outcomes, so the sampled continuations follow the target exactly."""
    from engine.core.lm import TableLM

    pol = _exact_policy()
    pval, tv = chi_square_of_loop("token", TableLM(3, seed=12), 6_000, policy=pol)
    assert pval > 1e-4, (pval, tv)
    first = decode_steps(pol)
    assert {"drop", "value"} <= {s.policy_fields.get("stop") for s in first}  # both rules were exercised


def test_deciding_on_the_sampled_tokens_own_q_is_caught(monkeypatch):
    """The same rule fed q(x_i) of the sampled token instead of max_x q(x) drops drafts by value: the χ²
    statistic sees the bias, so the pass above is evidence."""
    from engine.core.lm import TableLM
    from engine.policies import costaware

    real = costaware.bin_of
    monkeypatch.setattr(costaware, "bin_of", lambda info: real(DraftInfo(
        info.index, info.token, info.q_token, info.entropy, None, None, info.match_len)))
    pval, tv = chi_square_of_loop("token", TableLM(3, seed=12), 3_000, policy=_exact_policy())
    assert pval < 1e-4, (pval, tv)


def test_greedy_output_is_the_autoregressive_one(pair):
    from engine.decode import DecodeConfig, decode

    target, draft = pair
    ar = [t for s in decode(target, None, [3, 17, 5], None, DecodeConfig(max_new_tokens=30)) for t in s.emitted_tokens]
    for spec in ("costaware", "costaware:c=0.01,v=0,measure=0", "costaware:c=0.01,v=1,measure=0"):
        steps = list(decode(target, draft, [3, 17, 5], parse_policy(spec), DecodeConfig(max_new_tokens=30)))
        assert [t for s in steps for t in s.emitted_tokens] == ar
        assert all("decision" in s.policy_fields for s in steps)


def test_replays_over_a_reference_run_near_the_best_fixed_window():
    """The offline replay drives the same methods (engine.offline.replay.walk, drafts past an EOS never
    shown to keep()); priced by the reference's own timings it stays within 3 % of the best fixed K."""
    from engine.offline.analysis import CostModel, load_reference, simulate_policy

    ref = load_reference("traces/ref-qwen-greedy.jsonl")
    cm = CostModel.from_timings(ref.header["timings"])

    def speed(spec):
        df = simulate_policy(ref, spec, cm)
        return df["ar_time"].sum() / df["sim_time"].sum()

    best = max(speed(f"fixed:{k}") for k in range(1, 9))
    assert speed("costaware:measure=0") >= 0.97 * max(best, 1.0)


def test_no_probe_where_even_a_perfect_draft_cannot_beat_autoregressive():
    """The quantized path's shape: a draft at c = 0.55 and a verify of k drafts costing 1 + 0.5·k forwards.
    Even with every draft accepted no window beats AR (ceiling G < 1.02), so once the costs are measured
    the policy never probes again; with a flat verify (G ≫ 1) it keeps probing."""

    def decisions(verify_growth):
        clock = Clock()
        pol = CostAware(clock=clock, probe=2)
        drive(pol, clock, 120, 55.0, lambda k: 100.0 * (1 + verify_growth * k), lambda i, q: 0.0, conf=lambda i: 0.3)
        return pol, drive(pol, clock, 200, 55.0, lambda k: 100.0 * (1 + verify_growth * k), lambda i, q: 0.0,
                          conf=lambda i: 0.3)

    pol, w = decisions(0.5)
    assert sum(w) == 0 and pol.step_fields() == {}
    pol.propose()
    assert pol._fields["ceiling"] < 1.02 and pol._fields["decision"] == "ar"
    assert sum(decisions(0.02)[1]) > 0


def test_catchup_over_a_long_context_is_priced_before_a_probe():
    """A drafter that must first run over a 3,000-token prompt (its prefill is lazy) at 5 ms a token pays
    15 s — more than a quarter of what perfect drafting could save over 40 tokens — so no probe runs; with
    a 40-token prompt the periodic probes run as before. The catch-up rate is the one measured in the
    pair's shared costs, which a new request's policy reads."""


    def windows(prompt_len, draft_reads=None):  # each on a pair of its own: no pooled state between them
        target, draft = Model(), Model()
        costs = shared_costs(target, draft, 0.3, 0.05)
        costs.prime(40.0, {1: 100.0, 2: 101.0, 4: 103.0, 8: 110.0, 16: 120.0})
        costs.tp.extend([5.0] * 4)  # 5 ms per catch-up token, as measured by an earlier request
        clock = Clock()
        ctx = RequestContext(book=BOOKS.of(target, draft), prompt_ids=[1] * prompt_len, max_new_tokens=40, target=target,
                             draft=draft, temperature=0.0, draft_prompt_len=draft_reads)
        pol = CostAware(clock=clock, probe=2).for_request(ctx)
        pol.reset()  # as the decode loop does at the request's start
        assert pol.costs is costs
        return drive(pol, clock, 40, 40.0, lambda k: 100.0 * (1 + 0.01 * k), lambda i, q: 0.0, conf=lambda i: 0.3)

    # a draft that reads only 40 of the 3,000 tokens (a context window) is priced for those 40
    assert 1 in windows(3000, draft_reads=40)
    assert sum(windows(3000)) == 0
    assert 1 in windows(40)


def test_a_pairs_next_request_starts_from_its_pooled_acceptance():
    """Drafts at confidence 0.5 that the target always accepts: the identity prior (0.7·m = 0.35) says AR at
    a request's first step; once one request of the pair has labelled them, the next request at the same
    temperature starts by drafting, and so does the first one at another temperature (the nearest temperature's
    pooled rates, at half the weight); a different pair still starts from the prior."""

    target, draft = Model(), Model()

    def first_decision(temperature, steps_before=0):
        clock = Clock()
        ctx = RequestContext(book=BOOKS.of(target, draft), prompt_ids=[1] * 3, max_new_tokens=64, target=target, draft=draft,
                              temperature=temperature)
        pol = CostAware(clock=clock, probe=2, c=0.4, v=0.1).for_request(ctx)
        pol.reset()  # as the decode loop does at the request's start
        if steps_before:
            drive(pol, clock, steps_before, 40.0, lambda k: 100.0 * (1 + 0.1 * k), lambda i, q: 1.0,
                  conf=lambda i: 0.5)
            return None
        pol.propose()
        return pol._fields["decision"]

    assert first_decision(0.0) == "ar" and first_decision(0.7) == "ar"
    first_decision(0.0, steps_before=40)  # one whole request of the pair at T = 0
    assert first_decision(0.0) == "draft" and first_decision(0.7) == "draft"
    target, draft = Model(), Model()  # another pair: nothing pooled
    assert first_decision(0.7) == "ar"


def test_an_untimed_drafter_is_probed_whatever_its_context():
    """No draft timed yet (a model-free drafter, unprimed): its catch-up is not priced from the prior guess
    of t_d, so a 3,000-token prompt does not stop the probe that measures it (cheap copy drafts)."""

    target, draft = Model(), Model()
    clock = Clock()
    ctx = RequestContext(book=BOOKS.of(target, draft), prompt_ids=[1] * 3000, max_new_tokens=64, target=target, draft=draft, temperature=0.0)
    pol = CostAware(clock=clock, probe=2).for_request(ctx)
    pol.reset()  # as the decode loop does at the request's start
    for _ in range(3):  # the first steps find no match: nothing drafted, only AR verifies timed
        pol.propose()
        clock.t += 0.1
        pol.update(SimVerify(0, 1, False), 0)
        pol.step_fields()
    w = drive(pol, clock, 30, 0.05, lambda k: 100.0 * (1 + 0.01 * k), lambda i, q: 0.9, copy=True)
    assert sum(w[:4]) > 0 and sum(w[-10:]) / 10 >= 3  # probed at once, then drafting long copies


def test_a_pair_whose_drafts_are_rarely_accepted_stops_paying_for_probes():
    """A draft at c = 0.3 whose tokens the target accepts 10 % of the time: a 1-token draft beats AR only if
    a > T(1)/T(0) − 1 ≈ 0.35. On a fresh pair the periodic probes run (nothing pooled yet); once earlier
    requests of the pair have labelled more than PAIR_MIN drafts at 10 %, the chance that a probe could pay is
    ~0, and the next request of that pair at that temperature never probes. A pair at 90 % keeps drafting."""

    def run(target, draft, accept_p, steps=150):
        clock = Clock()
        ctx = RequestContext(book=BOOKS.of(target, draft), prompt_ids=[1] * 3, max_new_tokens=400, target=target, draft=draft, temperature=0.7)
        pol = CostAware(clock=clock, probe=2).for_request(ctx)
        pol.reset()  # as the decode loop does at the request's start
        decisions = []
        rng = random.Random(1)
        for _ in range(steps):
            w = drive(pol, clock, 1, 30.0, lambda k: 100.0 * (1 + 0.05 * k), lambda i, q: accept_p,
                      conf=lambda i: 0.3, rng=rng)
            decisions.append((w[0], None))
        return decisions

    low_t, low_d = Model(), Model()
    first = run(low_t, low_d, 0.1)
    assert sum(1 for w, _ in first if w) >= 3  # a fresh pair: probes and early drafts
    run(low_t, low_d, 0.1)  # the pair now has more than PAIR_MIN labelled drafts, nearly all rejected
    assert sum(w for w, _ in run(low_t, low_d, 0.1)) == 0  # declined for its pooled acceptance
    high_t, high_d = Model(), Model()
    run(high_t, high_d, 0.9)
    assert sum(w for w, _ in run(high_t, high_d, 0.9)) > 100


def test_success_chance_of_pooled_acceptance():
    from engine.policies.calibration import PairStats

    stats = PairStats()
    assert stats.success_chance(0.3) is None  # nothing pooled yet
    for i in range(100):
        stats.add(0, i < 13)
    assert stats.success_chance(0.35) < 1e-6 and stats.success_chance(0.05) > 0.99
    few = PairStats()
    for i in range(10):
        few.add(0, i < 4)
    assert 0.5 < few.success_chance(0.35) < 0.8


def test_a_long_prompt_is_not_prefilled_for_answers_the_pair_keeps_short():
    """The draft's catch-up over a 300-token prompt (5 ms a token: 1.5 s) is paid back over 96 tokens of
    well-accepted drafts, but not over the 12 tokens a pair's answers have run to (rag: 700-token contexts,
    12-token answers, 0.81× AR when priced against max_new_tokens). After four short answers the next long
    prompt starts autoregressive; after four long ones it starts by drafting. Before LEN_MIN answers nothing
    changes (`PairStats.remaining` is None)."""


    def pair_after(answer_len):
        target, draft = Model(), Model()
        costs = shared_costs(target, draft, 0.3, 0.05)
        costs.prime(40.0, {1: 100.0, 2: 101.0, 4: 103.0, 8: 110.0, 16: 120.0})
        costs.tp.extend([5.0] * 4)
        for _ in range(4):  # earlier requests of the pair, short prompts (no catch-up), answers of answer_len
            clock = Clock()
            ctx = RequestContext(book=BOOKS.of(target, draft), prompt_ids=[1] * 3, max_new_tokens=answer_len, target=target, draft=draft,
                                  temperature=0.0)
            pol = CostAware(clock=clock, probe=2).for_request(ctx)
            pol.reset()
            while pol._emitted < answer_len:
                drive(pol, clock, 1, 40.0, lambda k: 100.0 * (1 + 0.01 * k), lambda i, q: 1.0)
        stats = shared_stats(target, draft, 0.0)
        assert sorted(stats.lengths.values())[0] >= answer_len
        clock = Clock()
        ctx = RequestContext(book=BOOKS.of(target, draft), prompt_ids=[1] * 300, max_new_tokens=96, target=target, draft=draft, temperature=0.0)
        pol = CostAware(clock=clock, probe=2).for_request(ctx)
        pol.reset()
        pol.propose()
        return pol._fields["decision"]

    assert pair_after(96) == "draft"
    assert pair_after(12) == "catch-up"

