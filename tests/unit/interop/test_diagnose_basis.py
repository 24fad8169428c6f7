"""What a diagnosis rests on (engine.interop.diagnose): c given, from the trace, from the lab's measured
costs of the same pair, or absent (then no window, never a silent default); extrapolated windows;
per-position figures only from per-step counts; acceptance length token-weighted and per request."""

import json

import pytest

from engine.interop import diagnose, formats, llamacpp, vllm
from engine.interop.peer import to_trace
from tests.peer_mutations import FIX


def trace_of(path, reader=vllm.vllm_records):
    return to_trace(reader(path.read_bytes(), path.name), path.name)


def rec(acc, K, target_header=None):
    m = {"num_spec_tokens": K, "acceptance_histogram": [acc.count(j) for j in range(K + 1)],
         "num_spec_steps": len(acc), "num_accepted_draft_tokens": sum(acc), "num_draft_tokens": K * len(acc),
         "mean_acceptance_length": 1 + sum(acc) / len(acc), "draft_acceptance_rate": sum(acc) / (K * len(acc)),
         "per_step_accepted": acc, "per_step_drafted": [K] * len(acc)}
    lines = [target_header] if target_header else []
    lines.append({"request_id": "0", "token_ids": list(range(1 + sum(acc) + len(acc))), "finish_reason": "stop",
                  "spec_decode_metrics": m})
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    return to_trace(vllm.vllm_records(data, "v.jsonl"), "v.jsonl")


def test_no_c_means_no_window_and_says_what_to_give():
    t = rec([2, 2, 1, 2, 0], 2)  # an unknown pair, no draft timings
    d = diagnose.diagnose(t)
    assert d["c"] is None and d["recommended_window"] is None and d["bound"] is None
    assert "give c" in d["c_source"] and "--c" in diagnose.format_diagnosis(d, "v")
    d = diagnose.diagnose(t, 0.2)
    assert d["c"] == 0.2 and d["recommended_window"] >= 1 and "at c = 0.2" in diagnose.format_diagnosis(d, "v")


def test_the_lab_measured_costs_of_the_same_pair_price_an_imported_run(tmp_path):
    t = trace_of(FIX / "vllm-draft-k4.jsonl")
    pair = (t.header["target"]["name"], t.header["draft"]["name"])
    assert diagnose.pair_cost_ratio(*pair, results=tmp_path) is None  # nothing measured there
    c, how = diagnose.pair_cost_ratio(*pair)  # the committed costs result of the Qwen pair
    assert 0.1 < c < 0.6 and "measured for this pair" in how
    d = diagnose.diagnose(t)
    assert d["c"] == c and d["c_source"] == how
    assert diagnose.pair_cost_ratio("other-target", pair[1]) is None  # other model names: not this pair's cost


def test_a_window_past_the_run_is_marked_an_extrapolation():
    t = rec([2, 2, 2, 2, 1, 2, 2, 2], 2)  # high acceptance at K = 2: a cheap draft wants more than 2
    d = diagnose.diagnose(t, 0.01)
    assert d["recommended_window"] > 2 and d["extrapolated"] and "an extrapolation" in diagnose.format_diagnosis(d, "v")
    assert not diagnose.diagnose(t, 0.9)["extrapolated"]


def test_totals_only_files_have_no_per_position_figures():
    t = trace_of(FIX / "llamacpp-speculative-simple-k4.log", llamacpp.llamacpp_records)
    m = diagnose.peer_metrics(t)["pooled"]
    assert m["num_accepted_tokens_per_pos"] is None and m["acceptance_histogram"] is None
    assert "totals only" in m["per_position_basis"]
    assert "per position: none" in diagnose.format_diagnosis(diagnose.diagnose(t, 0.3), "l")
    exact = diagnose.peer_metrics(trace_of(FIX / "vllm-draft-k4.jsonl"))["pooled"]
    assert exact["num_accepted_tokens_per_pos"] and exact["per_position_basis"] == "per-step accepted counts"


@pytest.mark.parametrize("name", ["vllm-draft-k4.jsonl", "vllm-ngram-k4.jsonl"])
def test_acceptance_length_two_ways_and_prefill_never_a_drafting_step(name):
    path = FIX / name
    raw = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    A = sum(r["spec_decode_metrics"]["num_accepted_draft_tokens"] for r in raw)
    n = sum(r["spec_decode_metrics"]["num_spec_steps"] for r in raw)
    per = [r["spec_decode_metrics"]["mean_acceptance_length"] for r in raw]
    for detailed in (True, False):  # summary records: windows unknown per step, the prefill still excluded
        recs = [dict(r, spec_decode_metrics={k: v for k, v in r["spec_decode_metrics"].items()
                                             if detailed or not k.startswith("per_step")}) for r in raw]
        if not detailed:  # one token fewer drafted than steps × K: windows unknown per step (the case that
            for r in recs:  # once counted the prefill and undrafted steps as drafting steps)
                m = r["spec_decode_metrics"]
                if m["num_draft_tokens"] - 1 >= max(m["num_spec_steps"], m["num_accepted_draft_tokens"], 1):
                    m["num_draft_tokens"] -= 1
                    m["draft_acceptance_rate"] = m["num_accepted_draft_tokens"] / m["num_draft_tokens"]
        t = formats.loads_peer("".join(json.dumps(x) + "\n" for x in recs).encode(), path.name)
        al = diagnose.acceptance_lengths(t)
        if not detailed:
            assert "window" in t.header["imported"]["lacks"]
        assert al["token_weighted"] == pytest.approx(1 + A / n)
        assert al["per_request_mean"] == pytest.approx(sum(per) / len(per))
        assert diagnose.peer_metrics(t)["pooled"]["mean_acceptance_length"] == pytest.approx(1 + A / n)
