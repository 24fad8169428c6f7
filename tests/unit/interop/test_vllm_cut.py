"""vLLM outputs cut inside their last step (engine.interop.vllm): vLLM counts a step's accepted drafts
before it cuts the output at the token budget or a stop, so 1 + Σ(accepted + 1) may exceed the output.
Such a record is a finished request and must import — from the committed real runs with and without
their finish reasons, and for any (per-step accepted, budget) pair."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.interop import vllm
from engine.interop.diagnose import peer_metrics
from engine.interop.peer import to_trace
from engine.trace.format import TraceError

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
RUNS = sorted(FIX.glob("vllm-draft-*.jsonl"))


def load(data: bytes, name="v.jsonl"):
    return to_trace(vllm.vllm_records(data, name), name)


def real(path: Path) -> tuple[dict, list[dict]]:
    lines = path.read_text().splitlines()
    return json.loads(lines[0]), [json.loads(x) for x in lines[1:]]


def emitted_by_drafts(rec: dict) -> int:
    return 1 + sum(a + 1 for a in rec["spec_decode_metrics"]["per_step_accepted"])


def test_the_real_runs_have_cut_records():
    # the premise of this file: the committed vLLM runs hold outputs shorter than their steps emitted
    for path in RUNS:
        _, recs = real(path)
        assert any(emitted_by_drafts(r) > len(r["token_ids"]) for r in recs), path.name


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
@pytest.mark.parametrize("reason", ["as recorded", "dropped", "null"])
def test_real_cut_records_import_exactly_whatever_the_finish_reason(path, reason):
    head, recs = real(path)
    for r in recs:
        if reason == "dropped":
            r.pop("finish_reason")
        elif reason == "null":
            r["finish_reason"] = None
    for with_header in (True, False):
        body = ([head] if with_header else []) + recs
        t = load("".join(json.dumps(x) + "\n" for x in body).encode(), path.name)
        for rid, r in enumerate(recs):
            steps = [s for s in t.steps if s["request_id"] == rid]
            # the held-out check of issue 48: per-step accepted equal to the file's per_step_accepted
            assert [s["accepted"] for s in steps[1:]] == r["spec_decode_metrics"]["per_step_accepted"]
            assert sum(s["emitted"] for s in steps) == len(r["token_ids"])
            assert t.ends[rid]["output_ids"] == r["token_ids"]
            if emitted_by_drafts(r) > len(r["token_ids"]):
                assert steps[-1]["emitted"] < steps[-1]["accepted"] + 1
                want = {"length": "max_new_tokens", "stop": "eos"}[r["finish_reason"]] if reason == "as recorded" \
                    else ("max_new_tokens" if with_header and len(r["token_ids"]) == head["max_tokens"] else "eos")
                assert steps[-1]["finished"] == want == t.ends[rid]["finished"], (rid, reason, with_header)
        stated = {k: [r["spec_decode_metrics"][k] for r in recs] for k in ("num_accepted_draft_tokens",
                                                                           "num_spec_steps")}
        per = peer_metrics(t)["requests"]
        assert [per[i]["num_accepted_draft_tokens"] for i in range(len(recs))] == stated["num_accepted_draft_tokens"]
        assert [per[i]["num_spec_steps"] for i in range(len(recs))] == stated["num_spec_steps"]


def test_a_cut_without_a_reason_is_named_in_the_notes():
    rec = {"request_id": "0", "prompt_token_ids": [1, 2], "token_ids": [9, 8, 7, 6, 5, 4],
           "spec_decode_metrics": {"mean_acceptance_length": 3.0, "draft_acceptance_rate": 1.0,
                                   "acceptance_histogram": [0, 0, 2], "num_spec_steps": 2,
                                   "num_accepted_draft_tokens": 4, "num_draft_tokens": 4, "num_spec_tokens": 2,
                                   "per_step_accepted": [2, 2], "per_step_drafted": [2, 2]}}
    t = load((json.dumps(rec) + "\n").encode())  # 1 + 3 + 3 = 7 emitted by the steps, 6 kept
    assert [s["emitted"] for s in t.steps] == [1, 3, 2]
    assert t.steps[-1]["finished"] == "eos"
    assert any("no finish reason" in n for n in t.header["imported"]["notes"])


# ------------------------------------------------------------------ property: any cut imports


def metrics(acc: list[int], drafted: list[int], K: int, detailed: bool) -> dict:
    hist = [acc.count(j) for j in range(K + 1)]
    n, A, D = len(acc), sum(acc), sum(drafted)
    d = {"mean_acceptance_length": 1.0 + A / n if n else 1.0, "draft_acceptance_rate": A / D if D else 0.0,
         "acceptance_histogram": hist, "num_spec_steps": n, "num_accepted_draft_tokens": A, "num_draft_tokens": D,
         "num_spec_tokens": K}
    if detailed:
        d.update(per_step_accepted=list(acc), per_step_drafted=list(drafted))
    return d


@st.composite
def runs(draw):
    """One request as vLLM reports it: per-step (accepted, drafted) and an output cut at a budget that
    falls inside the last step (or past it, with undrafted steps after), plus its finish reason."""
    K = draw(st.integers(1, 6))
    n = draw(st.integers(0, 12))
    drafted = draw(st.lists(st.integers(1, K), min_size=n, max_size=n))
    acc = [draw(st.integers(0, w)) for w in drafted]
    full = 1 + sum(a + 1 for a in acc)
    lo = full - (acc[-1] if acc else 0)  # the budget must reach the last step: vLLM runs no step past it
    budget = draw(st.integers(lo, full + 5))
    n_out = min(budget, full) if draw(st.booleans()) else budget  # extra undrafted steps only without a cut
    reason = draw(st.sampled_from(["length", "stop", None, "abort", "drop"]))
    detailed = draw(st.booleans())
    return K, acc, drafted, n_out, budget, reason, detailed


@settings(max_examples=300, deadline=None)
@given(runs(), st.booleans())
def test_any_cut_of_any_run_passes_the_validator(run, with_header):
    K, acc, drafted, n_out, budget, reason, detailed = run
    if n_out == 0:
        return
    rec = {"request_id": "r", "prompt_token_ids": [3, 4], "token_ids": list(range(10, 10 + n_out)),
           "finish_reason": reason, "spec_decode_metrics": metrics(acc, drafted, K, detailed and bool(acc))}
    if reason == "drop":
        rec.pop("finish_reason")
    head = {"type": "speclab.peer_header", "max_tokens": budget}
    data = "".join(json.dumps(x) + "\n" for x in ([head] if with_header else []) + [rec]).encode()
    try:
        t = load(data)  # the importer's records through the loader's own rules
    except TraceError as e:
        raise AssertionError(f"refused a record vLLM could write: {e}") from None
    assert sum(s["emitted"] for s in t.steps) == n_out
    got = [s["accepted"] for s in t.steps[1:1 + len(acc)]]
    assert (got if detailed else sorted(got)) == (acc if detailed else sorted(acc))  # summary: no order
    assert sum(s["accepted"] for s in t.steps) == sum(acc)
    last = t.steps[-1]
    if last["emitted"] < last["accepted"] + 1:
        assert last["finished"] in ("eos", "max_new_tokens")
