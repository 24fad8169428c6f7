"""vLLM per-request spec-decode metrics → traces (engine.interop.vllm): offline and served records, the
steps they become, exactness against what vLLM stated, and one-line errors on hostile records."""

import json

import pytest

from engine.interop import formats, vllm
from engine.interop.diagnose import peer_metrics
from engine.interop.peer import PeerError, to_trace
from engine.trace.format import TraceError


def metrics(acc, drafted, K, detailed=True):
    """vLLM's RequestSpecDecodeMetrics.to_dict(), re-implemented from its source."""
    hist = [acc.count(j) for j in range(K + 1)]
    n, A, D = len(acc), sum(acc), sum(drafted)
    d = {"mean_acceptance_length": 1.0 + A / n if n else 1.0, "draft_acceptance_rate": A / D if D else 0.0,
         "acceptance_histogram": hist, "num_spec_steps": n, "num_accepted_draft_tokens": A, "num_draft_tokens": D,
         "num_spec_tokens": K}
    if detailed and acc:
        d.update(per_step_accepted=list(acc), per_step_drafted=list(drafted))
    return d


def offline(acc, drafted, K, n_out, detailed=True, **kw):
    return {"request_id": "r", "prompt_token_ids": [5, 6, 7], "token_ids": list(range(100, 100 + n_out)),
            "finish_reason": "length", "spec_decode_metrics": metrics(acc, drafted, K, detailed), **kw}


def served(acc, drafted, K, n_out, ttft=120.0, gen=900.0):
    return {"id": "cmpl-1", "object": "text_completion", "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": n_out},
            "metrics": {"time_to_first_token_ms": ttft, "generation_time_ms": gen, "mean_itl_ms": gen / (n_out - 1),
                        "speculative_decoding": metrics(acc, drafted, K)}}


def lines(*recs) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in recs).encode()


def load(data: bytes, name="v.jsonl"):
    return to_trace(vllm.vllm_records(data, name), name)


def test_detailed_offline_record_becomes_prefill_plus_verify_steps():
    acc, dr = [2, 0, 1, 2], [2, 2, 2, 2]
    t = load(lines(offline(acc, dr, 2, n_out=1 + sum(a + 1 for a in acc))))
    assert [(s["window"], s["accepted"], s["emitted"]) for s in t.steps] == \
        [(0, 0, 1), (2, 2, 3), (2, 0, 1), (2, 1, 2), (2, 2, 3)]
    # the steps are in vLLM's order and cover the output: token ids go back into the steps
    assert t.ends[0]["output_ids"] == list(range(100, 110)) and t.steps[1]["emitted_tokens"] == [101, 102, 103]
    assert "emitted_tokens" not in t.header["imported"]["lacks"] and "draft_tokens" in t.header["imported"]["lacks"]
    assert t.steps[1]["context_len"] == 4  # 3 prompt tokens + the prefill's token
    m = peer_metrics(t)["requests"][0]
    stated = t.ends[0]["reported"]
    for k in ("mean_acceptance_length", "draft_acceptance_rate", "acceptance_histogram", "num_spec_steps"):
        assert m[k] == pytest.approx(stated[k], abs=1e-12)
    assert m["num_accepted_tokens_per_pos"] == [3, 2]


def test_output_cut_at_the_budget_and_undrafted_steps():
    acc, dr = [2, 2], [2, 2]
    t = load(lines(offline(acc, dr, 2, n_out=5)))  # 1 + 3 + 3 = 7 emitted, vLLM kept 5
    assert [s["emitted"] for s in t.steps] == [1, 3, 1] and t.steps[-1]["finished"] == "max_new_tokens"
    assert peer_metrics(t)["pooled"]["num_accepted_draft_tokens"] == 4  # accepted counts stay as vLLM counted them
    # ngram: steps without a match drafted nothing and are not in vLLM's per-step arrays
    t = load(lines(offline([1], [3], 3, n_out=6)))
    assert [s["window"] for s in t.steps] == [0, 3, 0, 0, 0] and sum(s["emitted"] for s in t.steps) == 6
    assert "emitted_tokens" in t.header["imported"]["lacks"]  # where they ran is unknown: no token placement
    assert any("appended" in n for n in t.header["imported"]["notes"])


def test_summary_record_uses_the_histogram():
    acc, dr = [2, 0, 1, 2], [2, 2, 2, 2]
    t = load(lines(offline(acc, dr, 2, n_out=10, detailed=False)))
    assert sorted(s["accepted"] for s in t.steps if s["window"]) == sorted(acc)
    assert "step order" in t.header["imported"]["lacks"]
    assert peer_metrics(t)["pooled"]["acceptance_histogram"] == [1, 1, 2]


def test_served_responses_as_a_json_list_with_times():
    acc, dr = [1, 3, 0], [3, 3, 3]
    data = json.dumps([served(acc, dr, 3, n_out=8), served(acc, dr, 3, n_out=8)]).encode()
    assert formats.detect(data) == "vllm"
    t = formats.loads_peer(data, "resp.json")
    assert len(t.requests) == 2 and t.steps[0]["t_prefill_ms"] == 120.0
    assert sum(s["t_verify_ms"] for s in t.steps if s["request_id"] == 0) == pytest.approx(900.0)
    assert t.ends[0]["finished"] == "eos" and t.ends[0]["wall_ms"] == pytest.approx(1020.0)
    assert t.summary["tokens_per_s"] == pytest.approx(16 / 2.04)


def test_autoregressive_offline_run():
    rec = {"request_id": "0", "prompt_token_ids": [1], "token_ids": [4, 5, 6], "spec_decode_metrics": None}
    t = load(lines(rec))
    assert [s["window"] for s in t.steps] == [0, 0, 0] and t.header["draft"] is None


def bad(rec_or_bytes, field, name="v.jsonl"):
    data = rec_or_bytes if isinstance(rec_or_bytes, bytes) else lines(offline([1, 1], [2, 2], 2, 5), rec_or_bytes)
    with pytest.raises(TraceError) as e:
        vllm.vllm_records(data, name)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(name) and field in msg, msg
    return msg


@pytest.mark.parametrize("edit, field", [
    (lambda m: m.pop("num_spec_steps"), "num_spec_steps"),  # missing key
    (lambda m: m.update(per_step_drafted=[2]), "per_step_drafted"),  # arrays of different lengths
    (lambda m: m.update(per_step_accepted=[3, 1], per_step_drafted=[2, 2]), "per_step_accepted[0]"),  # > drafted
    (lambda m: m.update(num_accepted_draft_tokens=9), "num_accepted_draft_tokens"),
    (lambda m: m.update(num_draft_tokens=1), "num_accepted_draft_tokens"),  # accepted > drafted
    (lambda m: m.update(mean_acceptance_length=2.5), "mean_acceptance_length"),  # disagrees with the counts
    (lambda m: m.update(num_spec_steps=10 ** 30), "num_spec_steps"),  # huge
    (lambda m: m.update(acceptance_histogram=[0, 2]), "acceptance_histogram"),
    (lambda m: m.update(num_spec_tokens=-1), "num_spec_tokens"),
    (lambda m: m.update(draft_acceptance_rate="0.5"), "draft_acceptance_rate"),
])
def test_hostile_metrics_name_the_record_and_field(edit, field):
    rec = offline([1, 1], [2, 2], 2, 5)
    edit(rec["spec_decode_metrics"])
    msg = bad(rec, field)
    assert "line 2" in msg


def test_hostile_files():
    bad(lines(offline([1, 1], [2, 2], 2, 5))[:-30], "invalid JSON")  # truncated
    bad(lines(offline([1, 1], [2, 2], 2, 5)).replace(b"0.5", b"NaN"), "NaN")
    bad(b"", "empty file")
    bad(b"\x00\x01binary", "binary")
    bad({"timings": {"predicted_n": 3}}, "spec_decode_metrics")  # another engine's record
    bad(offline([1, 1], [2, 2], 2, 5) | {"token_ids": [1, -4]}, "token_ids[1]")
    bad(offline([1, 1], [2, 2], 2, 2), "token_ids")  # fewer tokens than the steps can explain
    bad(offline([1], [3], 3, 3), "num_spec_tokens")  # two K in one file
    bad(offline([1, 1], [2, 2], 2, 5) | {"finish_reason": "exploded"}, "finish_reason")


def test_nothing_is_written_for_a_bad_file(tmp_path):
    src = tmp_path / "v.jsonl"
    src.write_bytes(lines(offline([1, 1], [2, 2], 2, 5))[:-10])
    with pytest.raises(PeerError):
        formats.import_peer("vllm", src, tmp_path / "t.jsonl")
    assert not (tmp_path / "t.jsonl").exists()
    src.write_bytes(lines(offline([1, 1], [2, 2], 2, 5)))
    with pytest.raises(PeerError, match="not sglang"):
        formats.import_peer("sglang", src, tmp_path / "t.jsonl")  # the wrong engine named
    t = formats.import_peer("vllm", src, tmp_path / "t.jsonl")
    assert (tmp_path / "t.jsonl").exists() and t.complete


# ------------------------------------------------------------------ real runs (tests/fixtures/peers)

FIX = __import__("pathlib").Path(__file__).resolve().parents[2] / "fixtures" / "peers"
RUNS = sorted(p for p in FIX.glob("vllm-*.jsonl"))


def test_the_fixtures_are_there():
    assert {p.name for p in RUNS} >= {"vllm-draft-k2.jsonl", "vllm-draft-k4.jsonl", "vllm-ngram-k4.jsonl"}


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_import_of_a_real_run_is_exact(path):
    head = json.loads(path.read_text().split("\n", 1)[0])
    assert head["vllm_version"] == "0.32.0" and head["temperature"] == 0.0  # pinned in the fixture's header
    t = load(path.read_bytes(), path.name)
    per = peer_metrics(t)["requests"]
    for rid, end in t.ends.items():
        stated = end["reported"]
        mine = per[rid]
        for k in ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens", "acceptance_histogram"):
            assert mine[k] == stated[k], (rid, k)
        for k in ("mean_acceptance_length", "draft_acceptance_rate"):
            assert mine[k] == pytest.approx(stated[k], rel=1e-9, abs=1e-12), (rid, k)
    raw = [json.loads(x) for x in path.read_text().splitlines()[1:]]
    assert [len(r["token_ids"]) for r in raw] == [sum(s["emitted"] for s in t.steps if s["request_id"] == i)
                                                  for i in range(len(raw))]


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_per_position_acceptance_equals_the_prometheus_counters_of_the_run(path):
    from engine.interop import prometheus

    after, before = path.with_suffix(".prom"), path.with_name(path.stem + ".before.prom")
    a, b = prometheus.counters(after.read_bytes(), after.name), prometheus.counters(before.read_bytes(), before.name)
    mine = peer_metrics(load(path.read_bytes(), path.name))["pooled"]
    # the scrapes bracket the run (the warm-up request is counted in both)
    assert [x - y for x, y in zip(a["P"], b["P"] + [0] * len(a["P"]))] == mine["num_accepted_tokens_per_pos"]
    assert (a["N"] - b["N"], a["D"] - b["D"], a["A"] - b["A"]) == (
        mine["num_spec_steps"], mine["num_draft_tokens"], mine["num_accepted_draft_tokens"])
