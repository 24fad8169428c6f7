"""The confidence ceiling: hindsight rates, the option value against brute force over every stopping rule,
the rules' replays against fixed windows and the replay's own confidence policy, and the table."""
import itertools

import pytest

from engine.offline.analysis import CostModel, cost_for, window_table
from engine.offline.confidence_ceiling import (AR, BayesRule, SurvivalRule, _speed, auc, confidence_ceiling,
                                               hindsight_rates, option_value, signal_table)
from engine.policies.base import DraftInfo
from engine.policies.calibration import N_BINS, bin_of
from engine.policies.simple import Fixed
from tests.conftest import synthetic


def _info(i, q):
    return DraftInfo(i, 0, q, 0.0)


def test_hindsight_rates_count_teacher_forced_matches():
    r = synthetic([[1, 0, 1, 1], [0, 1]])
    qs = [[0.95, 0.95, 0.5, 0.5], [0.5, 0.1]]
    for req, q in zip(r.requests, qs):
        req["q_top"] = q
    rate, pi, n = hindsight_rates([r])
    hi, mid_, lo = bin_of(_info(1, 0.95)), bin_of(_info(1, 0.5)), bin_of(_info(1, 0.1))
    assert n[hi] == 2 and rate[hi] == 0.5  # one match of two at q = 0.95
    assert n[mid_] == 3 and rate[mid_] == pytest.approx(2 / 3)
    assert n[lo] == 1 and rate[lo] == 1.0
    assert sum(pi) == pytest.approx(1.0) and pi[hi] == pytest.approx(2 / 6)


def test_hindsight_rates_refuse_sampling_references():
    r = synthetic([[1, 0]])
    r.header["mode"] = "sampling"
    with pytest.raises(ValueError, match="greedy references"):
        hindsight_rates([r])


def _brute(s1, lam, rate, pi, cost, top):
    """max(0, best value over every deterministic stopping rule) from one kept draft with survival s1: each rule
    maps the bins seen so far to continue / stop / drop; its value is enumerated over every bin sequence."""
    bins = [b for b, p in enumerate(pi) if p > 0]
    nodes = [seq for d in range(1, top) for seq in itertools.product(bins, repeat=d)]  # after drafts 2..top

    def value(rule, seq, s, i):  # drafting draft i + 1 after `seq` (i kept drafts)
        v = -lam * cost.c
        for b in bins:
            s2, nxt = s * rate[b], seq + (b,)
            act = rule.get(nxt, "stop") if i + 1 < top else rule.get(nxt, "stop").replace("go", "stop")
            if act == "drop":
                continue
            keep = s2 - lam * (cost.v(i + 1) - cost.v(i))
            v += pi[b] * (keep + (value(rule, nxt, s2, i + 1) if act == "go" else 0.0))
        return v

    best = 0.0
    choices = [("go", "stop", "drop") if len(seq) < top - 1 else ("stop", "drop") for seq in nodes]
    for acts in itertools.product(*choices):
        best = max(best, value(dict(zip(nodes, acts)), (), s1, 1))
    return best


@pytest.mark.parametrize("lam,s1,verify", [(1.2, 0.9, (1.0, 1.05, 1.15, 1.3)), (1.5, 0.7, (1.0, 1.05, 1.15, 1.3)),
                                           (2.0, 0.95, (1.0, 1.05, 1.15, 1.3)), (1.0, 0.4, (1.0, 1.05, 1.15, 1.3)),
                                           (1.3, 0.95, (1.0, 1.1, 1.5, 2.0))])  # steep: dropping a draft pays
def test_option_value_is_the_best_stopping_rule(lam, s1, verify):
    rate = [0.0] * N_BINS
    pi = [0.0] * N_BINS
    rate[2], rate[6], pi[2], pi[6] = 0.2, 0.97, 0.4, 0.6
    cost = CostModel(c=0.15, verify=verify, target_ms=None, label="t")
    w = option_value(1, s1, lam, rate, pi, cost, top=3)
    assert w == pytest.approx(_brute(s1, lam, rate, pi, cost, top=3), abs=2e-3)  # s is memoised on a 1e-3 grid


def test_bayes_rule_drafts_to_the_cap_on_sure_drafts_and_drops_hopeless_ones():
    cost = CostModel.flat(0.1)
    sure = BayesRule([1.0] * N_BINS, [1.0 / N_BINS] * N_BINS, 1.2, cost, max_window=5)
    sure.propose()
    assert all(sure.keep_drafting(_info(i, 0.99)) for i in range(1, 5))
    never = BayesRule([0.0] * N_BINS, [1.0 / N_BINS] * N_BINS, 1.2, CostModel(c=0.1, verify=(1.0, 1.2),
                                                                               target_ms=None, label="t"))
    never.propose()
    assert not never.keep_drafting(_info(1, 0.99)) and never.drop_on_stop() == 1


def test_survival_extremes_are_fixed_windows(ref):
    cost = lambda r: CostModel.flat(0.1)  # noqa: E731
    w = min(8, ref.max_window)
    assert _speed([ref], lambda: SurvivalRule([0.5] * N_BINS, 0.0, w), cost) == _speed([ref], lambda: Fixed(w), cost)
    assert _speed([ref], lambda: SurvivalRule([0.5] * N_BINS, 1.01, w), cost) == _speed([ref], lambda: Fixed(1), cost)


def test_ceiling_table_agrees_with_the_window_table(ref):
    price = lambda r: cost_for(r, 0.05)  # noqa: E731
    cc = confidence_ceiling([ref], price).set_index("task")
    w = int(cc.loc["all", "max_window"])
    wt = window_table(ref, 0.05, range(1, w + 1), [f"confidence:0.6,max={w}"])
    allr = wt[wt["task"] == "all"].set_index("policy")
    best_fixed = allr[allr["kind"] == "fixed"]["speedup"]
    assert cc.loc["all", "s_best_fixed"] == pytest.approx(best_fixed.max())
    assert cc.loc["all", "best_fixed"] == best_fixed.idxmax()
    # the ceiling tries HF's rule at 0.6 among others: never below it, never above the cost-optimal schedule
    assert cc.loc["all", "s_ceiling"] >= allr.loc[f"confidence:threshold=0.6,max={w}", "speedup"] - 1e-12
    assert (cc["s_oracle_c"] >= cc["s_ceiling"] - 1e-12).all() and (cc["s_task_rule"] >= cc["s_ceiling"] - 1e-12).all()
    assert set(cc.index) == set(wt["task"]) and (cc["s_ceiling"] >= 1.0).all()
    assert "hindsight" in cc.attrs["note"]


def test_ceiling_reads_ar_when_no_rule_beats_it():
    r = synthetic([[0] * 12, [0] * 10])  # nothing is ever accepted: every draft is a loss
    for req in r.requests:  # the drafts after each mismatch, confident and wrong
        req["tails_by_pos"] = {j: {"pos": j, "tokens": [2] * 16, "q_top": [0.9] * 16, "entropy": [0.1] * 16}
                               for j in range(len(req["output_ids"]))}
    cc = confidence_ceiling([r], lambda _: CostModel.flat(0.4)).set_index("task")
    assert cc.loc["all", "ceiling_rule"] == AR and cc.loc["all", "s_ceiling"] == 1.0


def test_auc_counts_ties_half_and_is_nan_without_both_classes():
    assert auc([1, 0, 1], [0.9, 0.5, 0.5]) == pytest.approx(0.75)  # the docstring's worked example
    assert auc([1, 1, 0, 0], [0.8, 0.7, 0.2, 0.1]) == 1.0 and auc([0, 0, 1, 1], [0.8, 0.7, 0.2, 0.1]) == 0.0
    assert auc([1, 0, 1, 0], [0.3] * 4) == 0.5
    assert auc([1, 1], [0.2, 0.4]) != auc([1, 1], [0.2, 0.4])  # NaN


def test_signal_table_ranks_what_a_window_could_read():
    r = synthetic([[1, 1, 0, 1, 0, 0]], tasks=["qa"])
    req = r.requests[0]
    req["q_top"] = [0.9, 0.8, 0.3, 0.7, 0.2, 0.1]  # confidence separates accepts from rejects perfectly
    req["entropy"] = [0.5, 0.1, 0.2, 0.3, 0.4, 0.6]  # entropy does not
    t = signal_table([r]).set_index(["task", "signal"])
    assert t.loc[("all", "confidence m"), "auc"] == 1.0 and t.loc[("qa", "confidence m"), "positions"] == 6
    assert t.loc[("all", "negated entropy −H"), "auc"] == pytest.approx(auc([1, 1, 0, 1, 0, 0],
                                                                             [-0.5, -0.1, -0.2, -0.3, -0.4, -0.6]))
    prev = [1, 1, 1, 0, 1, 0]  # the position before each one: accepted? (the first has none: 1)
    assert t.loc[("all", "previous accepted"), "auc"] == pytest.approx(auc([1, 1, 0, 1, 0, 0], prev))
