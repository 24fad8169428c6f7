"""SGLang meta_info records → traces (engine.interop.sglang): SGLang's accept length C / V kept exactly,
the histogram when a build returns one, and one-line errors on hostile records."""

import json

import pytest

from engine.interop import formats, sglang
from engine.trace.format import TraceError


def rec(C=48, V=21, **meta):
    return {"text": "y", "question_id": 82, "meta_info": {"prompt_tokens": 40, "completion_tokens": C,
                                                          "spec_verify_ct": V, "finish_reason": {"type": "length"},
                                                          "e2e_latency": 2.9, **meta}}


def test_accept_length_is_sglangs_exactly():
    data = (json.dumps(rec()) + "\n").encode()
    assert formats.detect(data) == "sglang"
    t = formats.loads_peer(data, "sg.jsonl")
    s = t.summary
    assert s["target_calls"] == 21 and s["new_tokens"] == 48
    assert s["mean_emitted_per_call_incl_bonus"] == pytest.approx(48 / 21, abs=1e-12)
    assert s["draft_acceptance_rate"] is None and t.ends[0]["finished"] == "max_new_tokens"
    assert sum(x["t_verify_ms"] for x in t.steps) == pytest.approx(2900.0)


def test_histogram_replaces_the_even_split():
    t = formats.loads_peer(json.dumps(rec(C=10, V=4, spec_accept_histogram=[0, 1, 1, 1, 1])).encode(), "h.json")
    assert sorted(s["emitted"] for s in t.steps) == [1, 2, 3, 4]  # index = accept length
    assert "accepted_per_step" not in t.header["imported"]["lacks"]


@pytest.mark.parametrize("r, field", [
    (rec(C=5, V=21), "completion_tokens"),  # fewer tokens than verify passes
    (rec(V=-1), "spec_verify_ct"),
    (rec(V=10 ** 20), "spec_verify_ct"),  # huge
    (rec(spec_accept_length=3.0), "spec_accept_length"),  # disagrees with C / V
    (rec(C=10, V=4, spec_accept_histogram=[0, 1, 1]), "spec_accept_histogram"),  # wrong step count
    ({"meta_info": {"completion_tokens": 4}}, "spec_verify_ct"),  # missing key
    ({"choices": []}, "meta_info"),  # another engine's record
    (rec(finish_reason={"type": "bogus"}), "finish_reason"),
])
def test_hostile_records(r, field):
    data = (json.dumps(rec()) + "\n" + json.dumps(r) + "\n").encode()
    with pytest.raises(TraceError) as e:
        sglang.sglang_records(data, "sg.jsonl")
    assert field in str(e.value) and "\n" not in str(e.value) and "line 2" in str(e.value), str(e.value)
    with pytest.raises(TraceError, match="invalid JSON"):
        sglang.sglang_records(data[:-9], "sg.jsonl")  # truncated
