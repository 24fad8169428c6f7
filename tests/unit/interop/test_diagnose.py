"""Diagnosis of a run (engine.interop.diagnose): the engines' figures recomputed from a trace, the
censored geometric fit of α, the window the cost model recommends and the accepted-length bound."""

import json

import pytest

from engine.interop import bounds, diagnose
from engine.interop.peer import PeerRequest, PeerStep, peer_records, to_trace
from engine.offline.costmodel import expected_emitted, iid_theory


def trace(steps, lacks=()):
    r = PeerRequest([PeerStep(0, 0, 1)] + [PeerStep(w, a, a + 1) for w, a in steps])
    recs = peer_records("vllm", [r], engine={"name": "vllm"}, target="t", draft="d", spec="x", lacks=list(lacks),
                        timing="", notes=[], source="x.jsonl")
    return to_trace(recs, "x.jsonl")


def test_censored_geometric_fit_and_per_position():
    t = trace([(4, 4), (4, 1), (4, 0), (2, 2)])
    a, how = diagnose.fit_alpha(t)
    # successes 4+1+0+2 = 7; failures: the two steps that stopped short of their window
    assert a == pytest.approx(7 / 9) and "censoring" in how
    m = diagnose.peer_metrics(t)["pooled"]
    assert m["num_spec_steps"] == 4 and m["num_accepted_tokens_per_pos"] == [3, 2, 1, 1]
    assert m["per_position_conditional"][:2] == [pytest.approx(3 / 4), pytest.approx(2 / 3)]
    assert m["mean_acceptance_length"] == pytest.approx(1 + 7 / 4) and m["draft_acceptance_rate"] == pytest.approx(7 / 14)


def test_recommended_window_and_bound_follow_the_cost_model():
    t = trace([(4, 4), (4, 1), (4, 0), (4, 3), (4, 2)])
    d = diagnose.diagnose(t, c=0.2)
    th = iid_theory(d["alpha"], 0.2)
    assert d["recommended_window"] == int(th.loc[th["speedup"].idxmax(), "gamma"])
    assert d["bound"] == bounds.renewal_bound([4, 1, 0, 3, 2], 0.2)
    assert "bound" in diagnose.format_diagnosis(d, "x") and d["c_source"] == "given"


def test_totals_only_use_the_moment_fit():
    t = trace([(4, 2), (4, 2)], lacks=["accepted_per_step"])
    a, how = diagnose.fit_alpha(t)
    assert expected_emitted(a, 4) - 1 == pytest.approx(2.0, abs=1e-9) and "moment" in how
    assert diagnose.diagnose(t)["bound"] is None


def test_own_trace_cost_ratio_from_timings(tmp_path):
    from engine.trace.format import loads_trace
    from engine.trace.loadbench import synthetic_records

    t = loads_trace("".join(json.dumps(r) + "\n" for r in synthetic_records(40, 10)).encode(), "s.jsonl")
    c = diagnose.trace_cost_ratio(t)
    assert c is not None and c > 0 and diagnose.diagnose(t)["c"] == pytest.approx(c)
