"""Hostile variants of every peer format (tests/peer_mutations.py) through detection and import: each is
either refused with one line naming the file (and, for a record's fault, the record and field) or
imported as a trace the loader accepts — never a traceback, never a half-written file. The cases
that used to be accepted and wrong, or to crash, are pinned one by one below."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.interop import formats, llamacpp, prometheus
from engine.interop.peer import MAX_STEPS, Budget, PeerError
from engine.trace.format import TraceError
from tests.peer_mutations import FIX, SGLANG, all_mutants

MUTANTS = [m for m in all_mutants() if "10^6" not in m[0]]  # the 10^6-entry arrays: one test below


def outcome(name: str, data: bytes) -> str:
    fmt = formats.detect(data)
    if fmt is None:
        return "not a report"
    try:
        t = formats.loads_peer(data, name, fmt)
    except TraceError as e:
        msg = str(e)
        assert "\n" not in msg and msg.startswith(Path(name).name), msg
        return "refused"
    assert t.complete and t.steps
    return "imported"


def test_every_mutant_is_refused_in_one_line_or_imported_valid():
    seen = {"refused": 0, "imported": 0, "not a report": 0}
    for label, name, data in MUTANTS:
        try:
            seen[outcome(name, data)] += 1
        except AssertionError:
            raise
        except Exception as e:  # a traceback where a one-line refusal belongs
            raise AssertionError(f"{name} ({label}): {type(e).__name__}: {e}") from None
    assert len(MUTANTS) > 1500 and seen["refused"] > 1000, seen


def only(prefix: str, name: str | None = None):
    return [(lab, n, d) for lab, n, d in MUTANTS if lab.startswith(prefix) and (name is None or n == name)]


@pytest.mark.parametrize("prefix", ["duplicated whole", "two scrapes concatenated", "line 3 repeated",
                                    "line 18 repeated", "truncated at", "position label '²'",
                                    "position label '٣'", "labels"])
def test_scrapes_that_were_accepted_and_wrong_are_refused(prefix):
    cases = only(prefix, "vllm-draft-k4.prom")
    assert cases
    for label, name, data in cases:
        assert outcome(name, data) == "refused", label


def test_a_series_seen_twice_is_never_summed():
    data = (FIX / "vllm-draft-k4.prom").read_bytes()
    with pytest.raises(PeerError, match="same series as line"):
        prometheus.counters(data + data, "k4.prom")


@pytest.mark.parametrize("rate", [-1, 2.5, 1e308, "7", True])
def test_sglang_rate_out_of_range_or_mistyped(rate):
    rec = json.loads(SGLANG.decode().splitlines()[0])
    rec["meta_info"]["spec_accept_rate"] = rate
    with pytest.raises(PeerError, match=r"line 1: field 'meta_info.spec_accept_rate'"):
        formats.loads_peer(json.dumps(rec).encode(), "sg.jsonl")


@pytest.mark.parametrize("name, mutate", [
    ("sg.jsonl", lambda: json.loads(SGLANG.decode().splitlines()[0]) | {"question_id": 1e30}),
    ("ll.jsonl", lambda: {"question_id": 1e30, "timings": {"predicted_n": 4, "draft_n": 2, "draft_n_accepted": 1}}),
    ("ll.jsonl", lambda: {"category": ["x"], "timings": {"predicted_n": 4}}),
])
def test_ids_and_labels_of_another_type_are_refused_not_dropped(name, mutate):
    with pytest.raises(PeerError, match=r"line 1: field '(question_id|category)'"):
        formats.loads_peer(json.dumps(mutate()).encode(), name)


def vllm_summary(D: int) -> bytes:
    m = {"mean_acceptance_length": 2.0, "draft_acceptance_rate": 2 / D, "acceptance_histogram": [0, 2, 0],
         "num_spec_steps": 2, "num_accepted_draft_tokens": 2, "num_draft_tokens": D, "num_spec_tokens": 2}
    return json.dumps({"request_id": "0", "token_ids": [1, 2, 3, 4, 5], "spec_decode_metrics": m}).encode()


def test_a_vllm_summary_drafting_more_than_steps_times_k_is_refused():
    assert formats.loads_peer(vllm_summary(3), "v.jsonl").steps  # 3 drafted over 2 steps of ≤ 2: fine
    with pytest.raises(PeerError, match="num_draft_tokens"):
        formats.loads_peer(vllm_summary(5), "v.jsonl")  # 5 > 2 steps × K = 2


@pytest.mark.parametrize("raw, what", [("1e400", "finite"), ('"\\ud800"', "surrogate"),
                                       ("[" * 5000 + "]" * 5000, "nested"), ("[" * 70 + "]" * 70, "nested")])
def test_json_values_that_used_to_crash(raw, what):
    rec = '{"timings": {"predicted_n": 4, "draft_n": 2, "draft_n_accepted": 1}, "content": @}'.replace("@", raw)
    with pytest.raises(PeerError, match=what) as e:
        llamacpp.llamacpp_records(rec.encode(), "ll.jsonl")
    assert str(e.value).startswith("ll.jsonl: line 1")


def test_a_claim_past_the_step_limit_is_refused_before_a_step_is_built(monkeypatch):
    def never(*a, **k):
        raise AssertionError("steps built before the step limit was checked")

    monkeypatch.setattr(llamacpp, "_split", never)
    with pytest.raises(PeerError, match="limit of"):
        formats.loads_peer(b'{"timings":{"predicted_n":16777216}}', "big.jsonl")  # the 70-byte file of issue 48
    served = {"choices": [{"text": "x"}], "usage": {"completion_tokens": 16777216},
              "metrics": {"speculative_decoding": {"num_spec_tokens": 2, "acceptance_histogram": [1, 0, 0],
                                                   "num_spec_steps": 1, "num_accepted_draft_tokens": 0,
                                                   "num_draft_tokens": 2, "mean_acceptance_length": 1.0,
                                                   "draft_acceptance_rate": 0.0}}}
    with pytest.raises(PeerError, match="limit of"):
        formats.loads_peer(json.dumps(served).encode(), "big.json")
    sg = {"meta_info": {"completion_tokens": 16777216, "spec_verify_ct": 0}}
    with pytest.raises(PeerError, match="limit of"):
        formats.loads_peer(json.dumps(sg).encode(), "big.jsonl")


def test_the_budget_counts_across_requests():
    left = Budget(10)
    left.take(6, "f: line 1", "n")
    with pytest.raises(PeerError, match=r"^f: line 2: field 'n': 6 steps would take the import past its limit of 10"):
        left.take(6, "f: line 2", "n")
    assert MAX_STEPS == Budget().left


@pytest.mark.slow  # ~15 s of building million-entry files; the full suite runs it
def test_million_entry_arrays_are_refused_on_their_length():
    cases = [m for m in all_mutants() if "10^6" in m[0] and m[1].startswith("vllm-draft")]
    assert cases
    for label, name, data in cases:
        assert outcome(name, data) in ("refused", "imported"), label


@pytest.mark.parametrize("label", ["blank line after the first record", "first record over 1 MiB", "JSON list",
                                   "BOM", "CRLF"])
def test_detection_takes_what_the_importers_take(label):
    for lab, name, data in only(label):
        if name.endswith((".prom", ".log")):
            continue
        assert formats.detect(data) is not None, (name, lab)
        assert outcome(name, data) == "imported", (name, lab)


def test_a_refused_import_leaves_the_existing_output_whole(tmp_path):
    out = tmp_path / "t.jsonl"
    src = tmp_path / "in.prom"
    good = (FIX / "vllm-draft-k4.prom").read_bytes()
    src.write_bytes(good)
    formats.import_peer("vllm-prom", src, out)
    before = out.read_bytes()
    for label, name, data in only("", "vllm-draft-k4.prom")[:40]:
        src.write_bytes(data)
        try:
            formats.import_peer("vllm-prom", src, out)
        except TraceError:
            assert out.read_bytes() == before, label
        else:
            before = out.read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name not in ("t.jsonl", "in.prom")]  # no temp files left
