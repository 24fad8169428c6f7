"""llama.cpp reports → traces (engine.interop.llamacpp): server `timings` and llama-speculative-simple
logs, whose totals give the target calls (N − A) exactly, and one-line errors on hostile reports."""

import json
from pathlib import Path

import pytest

from engine.interop import formats, llamacpp
from engine.interop.diagnose import diagnose, peer_metrics
from engine.interop.peer import PER_STEP, to_trace
from engine.trace.format import TraceError

LOG = """main: n_past = 89
encoded   40 tokens in    0.580 seconds, speed:   68.966 t/s
decoded   49 tokens in    3.561 seconds, speed:   13.760 t/s

n_draft   = 4
n_predict = 49
n_drafted = 60
n_accept  = 31
accept    = 51.667%

draft:
llama_perf_context_print:        eval time =     123.45 ms /    60 runs
"""


def response(N=48, D=52, A=29, **kw):
    return {"content": "x", "stop_type": "limit", "timings": {"prompt_n": 40, "prompt_ms": 610.2, "predicted_n": N,
                                                              "predicted_ms": 3480.5, "draft_n": D,
                                                              "draft_n_accepted": A, **kw}}


def test_server_responses_give_the_calls_and_totals_exactly():
    data = ("\n".join(json.dumps(response()) for _ in range(2)) + "\n").encode()
    assert formats.detect(data) == "llamacpp"
    t = formats.loads_peer(data, "server.jsonl")
    steps = [s for s in t.steps if s["request_id"] == 0]
    assert len(steps) == 48 - 29 and steps[0]["window"] == 0 and steps[0]["t_prefill_ms"] == 610.2
    assert sum(s["window"] for s in steps) == 52 and sum(s["accepted"] for s in steps) == 29
    assert sum(s["emitted"] for s in steps) == 48
    assert sum(s["t_verify_ms"] for s in steps) == pytest.approx(3480.5)
    assert t.ends[0]["finished"] == "max_new_tokens"
    assert peer_metrics(t)["pooled"]["draft_acceptance_rate"] == pytest.approx(29 / 52, abs=1e-12)
    assert PER_STEP in t.header["imported"]["lacks"]
    assert diagnose(t)["bound"] is None  # the per-step split is not data: no accepted-length bound


def test_speculative_simple_log():
    assert formats.detect(LOG.encode()) == "llamacpp"
    t = formats.loads_peer((LOG + "\n" + LOG).encode(), "spec.log")
    assert len(t.requests) == 2
    steps = [s for s in t.steps if s["request_id"] == 0]
    assert len(steps) == 49 - 31 and all(s["window"] > 0 for s in steps)  # every call verifies a draft
    assert sum(s["emitted"] for s in steps) == 49 and steps[0]["t_prefill_ms"] == pytest.approx(580.0)
    assert t.ends[0]["reported"]["accept_pct"] == 51.667


@pytest.mark.parametrize("rec, field", [
    (response(A=60), "draft_n_accepted"),  # accepted > drafted
    (response(A=48, D=60), "draft_n_accepted"),  # no call left
    (response(N=10 ** 12), "predicted_n"),  # huge
    (response(predicted_ms=float("nan")), "invalid JSON"),  # NaN written by a broken client
    ({"timings": {"predicted_n": 4, "draft_n": 3}}, "draft_n"),  # one draft count without the other
    ({"timings": {"draft_n": 3, "draft_n_accepted": 1}}, "predicted_n"),  # missing key
    ({**response(), "stop_type": "exploded"}, "stop_type"),
])
def test_hostile_server_responses(rec, field):
    data = (json.dumps(response()) + "\n" + json.dumps(rec, allow_nan=True) + "\n").encode()
    with pytest.raises(TraceError) as e:
        llamacpp.llamacpp_records(data, "s.jsonl")
    assert field in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("s.jsonl: line 2"), str(e.value)


def test_hostile_logs():
    for text, field in ((LOG.split("accept    =")[0], "accept"),  # cut before the last line
                        (LOG.replace("51.667", "70.000"), "accept"),  # the stated rate disagrees
                        (LOG.replace("n_accept  = 31", "n_accept  = 61"), "n_accept"),
                        (LOG.replace("n_drafted = 60", "n_drafted = 90"), "n_drafted"),  # > n_draft × calls
                        ("nothing here\n", "no run summary")):
        with pytest.raises(TraceError) as e:
            to_trace(llamacpp.llamacpp_records(text.encode(), "x.log"), "x.log")
        assert field in str(e.value) and "\n" not in str(e.value), str(e.value)


# ------------------------------------------------------------------ real runs (scripts/peers/run_llamacpp.py)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
SERVER = ["llamacpp-draft-k2.jsonl", "llamacpp-draft-k4.jsonl"]


def _fixture(name: str) -> Path:
    p = FIX / name
    if not p.is_file():
        pytest.skip(f"{p.name} not recorded (scripts/peers/run_llamacpp.py writes it)")
    return p


@pytest.mark.parametrize("name", SERVER)
def test_real_server_runs_import_exactly(name):
    """Per request: the mean acceptance length is llama.cpp's own (1 + accepted ÷ its verify steps, its
    /metrics counters over the request), the rate is draft_n_accepted ÷ draft_n, the accepted per
    position equal its counters, and the steps emit exactly the predicted tokens."""
    path = _fixture(name)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert recs[0]["type"] == "speclab.peer_header" and recs[0]["n_draft"] in (2, 4)
    t = formats.loads_peer(path.read_bytes(), path.name)
    m = peer_metrics(t)
    assert PER_STEP not in t.header["imported"]["lacks"] and "step order" in t.header["imported"]["lacks"]
    for i, r in enumerate(recs[1:]):
        c, tm, got = r["speclab_counters"], r["timings"], m["requests"][i]
        assert got["num_spec_steps"] == c["spec_decode_num_drafts_total"] > 0
        assert got["mean_acceptance_length"] == pytest.approx(
            1 + c["spec_decode_num_accepted_tokens_total"] / c["spec_decode_num_drafts_total"], abs=1e-9)
        assert got["draft_acceptance_rate"] == pytest.approx(tm["draft_n_accepted"] / tm["draft_n"], abs=1e-9)
        assert got["num_accepted_tokens_per_pos"] == c["accepted_per_pos"]
        assert sum(s["emitted"] for s in t.steps if s["request_id"] == i) == tm["predicted_n"] == len(r["tokens"])
        assert all(s["accepted"] <= s["window"] <= recs[0]["n_draft"] for s in t.steps if s["request_id"] == i)


def test_real_server_totals_alone_miscount_the_steps_where_an_output_ends_inside_one():
    """Why the counters are needed: without them the verify steps are taken as N − A − 1, which is off by
    one on the requests whose output ended inside a step (or where a call drafted nothing)."""
    path = _fixture("llamacpp-draft-k4.jsonl")
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    bare = "\n".join(json.dumps({k: v for k, v in r.items() if k != "speclab_counters"}) for r in recs)
    t = formats.loads_peer(bare.encode(), path.name)
    steps = [v["num_spec_steps"] for v in peer_metrics(t)["requests"].values()]
    real = [r["speclab_counters"]["spec_decode_num_drafts_total"] for r in recs[1:]]
    assert steps == [r["timings"]["predicted_n"] - r["timings"]["draft_n_accepted"] - 1 for r in recs[1:]]
    assert steps != real and all(abs(a - b) <= 1 for a, b in zip(steps, real))


def test_real_ar_run_and_speculative_simple_log():
    t = formats.loads_peer(_fixture("llamacpp-ar.jsonl").read_bytes(), "ar.jsonl")
    assert t.header["draft"] is None and all(s["window"] == 0 for s in t.steps)
    log = _fixture("llamacpp-speculative-simple-k4.log")
    t = formats.loads_peer(log.read_bytes(), log.name)
    for e in t.ends.values():
        rep, steps = e["reported"], [s for s in t.steps if s["request_id"] == e["request_id"]]
        assert sum(s["emitted"] for s in steps) == rep["n_predict"] and rep["n_draft"] == 4
        assert sum(s["accepted"] for s in steps) / sum(s["window"] for s in steps) == pytest.approx(
            rep["accept_pct"] / 100, abs=5e-6)


@pytest.mark.parametrize("counters, field", [
    ("nope", "speclab_counters"),
    ({"spec_decode_num_drafts_total": 3, "spec_decode_num_draft_tokens_total": 7,
      "spec_decode_num_accepted_tokens_total": 3, "accepted_per_pos": [2, 1]}, "num_draft_tokens_total"),
    ({"spec_decode_num_drafts_total": 3, "spec_decode_num_draft_tokens_total": 6,
      "spec_decode_num_accepted_tokens_total": 3, "accepted_per_pos": [1, 2]}, "accepted_per_pos"),
    ({"spec_decode_num_drafts_total": 3, "spec_decode_num_draft_tokens_total": 6,
      "spec_decode_num_accepted_tokens_total": 3}, "accepted_per_pos"),
    ({"spec_decode_num_drafts_total": 1.5, "spec_decode_num_draft_tokens_total": 6,
      "spec_decode_num_accepted_tokens_total": 3, "accepted_per_pos": [2, 1]}, "num_drafts_total"),
])
def test_hostile_counters(counters, field):
    rec = {**response(N=10, D=6, A=3), "speclab_counters": counters}
    with pytest.raises(TraceError) as e:
        llamacpp.llamacpp_records((json.dumps(rec) + "\n").encode(), "c.jsonl")
    assert field in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("c.jsonl: line 1"), str(e.value)
