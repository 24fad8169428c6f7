"""AIPerf per-request records (engine.interop.aiperf): the fixture written to AIPerf's documented schema
imports exactly, its figures come back as AIPerf names them, and hostile variants are refused in one line
or imported with every count equal to what the file states (never accepted and wrong)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.interop import aiperf, formats
from engine.interop.diagnose import acceptance_lengths, diagnose, format_diagnosis
from engine.interop.peer import PeerError
from tests.peer_mutations import json_mutants

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "peers" / "aiperf-vllm-k3.jsonl"
DATA = FIX.read_bytes()
RECS = [json.loads(x) for x in DATA.decode().splitlines()]
KEPT = [r for r in RECS if r["metadata"]["benchmark_phase"] == "profiling" and r["error"] is None]


def by_request(t) -> list[list[dict]]:
    out: dict[int, list[dict]] = {}
    for s in t.steps:
        out.setdefault(s["request_id"], []).append(s)
    return [out[r] for r in sorted(out)]


def assert_faithful(t, recs: list[dict]) -> None:
    """The oracle: every verify step, accepted and drafted count of each kept record, and its stated mean."""
    kept = [r for r in recs if r["metadata"].get("benchmark_phase", "profiling") == "profiling"
            and not r["metadata"].get("was_cancelled") and r.get("error") is None]
    reqs = by_request(t)
    assert len(reqs) == len(kept)
    for steps, r in zip(reqs, kept):
        a = r.get("spec_decode_acceptance")
        spec = [s for s in steps if s["window"] != 0]
        if a is None:
            assert not spec
            continue
        assert len(spec) == a["num_spec_steps"]
        assert sum(s["accepted"] for s in spec) == a["num_accepted_draft_tokens"]
        if all(s["window"] is not None for s in spec):
            assert sum(s["window"] for s in spec) == a["num_draft_tokens"]
        if a.get("per_step_accepted") is not None:
            assert [s["accepted"] for s in spec] == a["per_step_accepted"]
        if a.get("completion_tokens") is not None:
            assert sum(s["emitted"] for s in steps) == a["completion_tokens"]


def test_detected_and_imported_exactly():
    assert formats.detect(DATA) == "aiperf"
    t = formats.loads_peer(DATA, FIX.name)
    assert_faithful(t, RECS)
    imp = t.header["imported"]
    assert "1 warmup record left out" in imp["notes"] and "1 error record left out" in imp["notes"]
    assert t.header["created"].startswith("2025-12-05")  # the first request's start, not the import's date
    cut = by_request(t)[2]  # the record vLLM cut at the budget: its last step emitted fewer than accepted + 1
    assert cut[-1]["finished"] == "eos" and cut[-1]["emitted"] < cut[-1]["accepted"] + 1


def test_acceptance_length_both_ways_as_aiperf_names_them():
    t = formats.loads_peer(DATA, FIX.name)
    al = acceptance_lengths(t)
    stated = [r["spec_decode_acceptance"]["mean_acceptance_length"] for r in KEPT]
    A = sum(r["spec_decode_acceptance"]["num_accepted_draft_tokens"] for r in KEPT)
    n = sum(r["spec_decode_acceptance"]["num_spec_steps"] for r in KEPT)
    assert al["per_request_mean"] == pytest.approx(sum(stated) / len(stated))  # AIPerf's "Acceptance Length" avg
    assert al["token_weighted"] == pytest.approx(1 + A / n)  # "Token-Weighted Acceptance Length"
    text = format_diagnosis(diagnose(t, 0.3), FIX.name)
    assert "Token-Weighted Acceptance Length" in text and "Acceptance Length (per-request mean)" in text


def test_a_run_without_speculation_is_an_autoregressive_import():
    recs = [dict(r) for r in KEPT]
    for r in recs:
        r.pop("spec_decode_acceptance")
    t = formats.loads_peer("".join(json.dumps(r) + "\n" for r in recs).encode(), "ar.jsonl")
    assert t.header["draft"] is None and all(s["window"] == 0 for s in t.steps)
    assert [sum(s["emitted"] for s in st) for st in by_request(t)] == \
        [r["metrics"]["output_sequence_length"]["value"] for r in recs]


def test_variable_length_drafting_keeps_windows_unknown():
    r = json.loads(json.dumps(KEPT[3]))  # the summary-only record
    r["spec_decode_acceptance"]["num_spec_tokens"] = None
    t = formats.loads_peer(json.dumps(r).encode(), "v.jsonl")
    assert any(s["window"] is None for s in t.steps) and "window" in t.header["imported"]["lacks"]
    assert t.summary["draft_acceptance_rate"] is None


@pytest.mark.parametrize("path, value, field", [
    (("spec_decode_acceptance", "acceptance_histogram"), {"1": 1, "x": 2}, "acceptance_histogram.x"),
    (("spec_decode_acceptance", "acceptance_histogram"), [1, 2], "acceptance_histogram"),
    (("spec_decode_acceptance", "mean_acceptance_length"), 9.0, "mean_acceptance_length"),
    (("spec_decode_acceptance", "num_spec_tokens"), 2, "acceptance_histogram"),
    (("metrics", "request_latency"), {"value": 1.0, "unit": "ms"}, "request_latency"),
    (("metrics", "time_to_first_token"), {"value": 1.0, "unit": "fortnights"}, "time_to_first_token.unit"),
    (("metadata", "benchmark_phase"), "cooldown", "benchmark_phase"),
])
def test_bad_values_are_refused_naming_the_record_and_field(path, value, field):
    r = json.loads(json.dumps(KEPT[0]))
    r[path[0]][path[1]] = value
    with pytest.raises(PeerError, match=rf"^a\.jsonl: line 1: field '[\w.]*{field.replace('.', '[.]')}'"):
        formats.loads_peer(json.dumps(r).encode(), "a.jsonl")


def test_no_mutant_is_accepted_and_wrong():
    seen = {"refused": 0, "imported": 0}
    for label, name, data in json_mutants(FIX.name, DATA):
        if "10^6" in label:
            continue
        try:
            t = formats.loads_peer(data, name, "aiperf")
        except PeerError as e:
            assert "\n" not in str(e) and str(e).startswith(name), (label, e)
            seen["refused"] += 1
            continue
        recs = json.loads(data.decode("utf-8-sig")) if name.endswith(".json") else \
            [json.loads(x) for x in data.decode("utf-8-sig").splitlines() if x.strip()]
        assert_faithful(t, recs)
        seen["imported"] += 1
    assert seen["refused"] > 50 and seen["imported"] > 5, seen


def test_is_record_claims_only_aiperf_records():
    assert aiperf.is_record(KEPT[0])
    assert not aiperf.is_record({"metadata": {}, "metrics": {"speculative_decoding": {}}, "choices": []})
