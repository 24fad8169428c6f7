"""Window analysis: reference runs, the exact simulator (checked against real decode runs), the cost
model and closed forms (checked against the project notes' tables), the tables and the CLI."""
import pytest
import torch
from engine.offline.analysis import CostModel, load_reference, positions_frame, simulate_policy, window_table
from engine.core.lm import HFModel
from engine.policies.base import parse_policy
from engine.hindsight import accept_runs
from engine.offline.reference import ReferenceConfig, build_reference
from engine.core.sampling import SamplingConfig
from tests.conftest import greedy_reference, noisy_copy

from tests.conftest import REF_CATS as CATS, REF_N_NEW as N_NEW, REF_PROMPTS as PROMPTS


def test_reference_records_target_greedy_output_and_runs(ref, tiny_target):
    assert ref.greedy and ref.complete and len(ref.requests) == len(PROMPTS)
    t = ref.header["timings"]
    assert len(t["target_ms_by_tokens"]) == 17 and t["draft_ms_per_token"] > 0
    fp = ref.header["fingerprints"]
    assert len(fp["draft"]) == 16 and fp["draft"] != fp["target"]
    for req, prompt in zip(ref.requests, PROMPTS):
        assert req["output_ids"] == greedy_reference(tiny_target, prompt, N_NEW)
        match = [int(a == b) for a, b in zip(req["draft_argmax"], req["output_ids"])]
        assert req["accept_run"] == accept_runs(match)
        assert set(req["tails_by_pos"]) == {j for j, m in enumerate(match) if not m}
    pf = positions_frame(ref)
    assert len(pf) == len(PROMPTS) * N_NEW and set(pf["task"]) == {"mt_bench", "summarization", "math_reasoning",
                                                                   "qa", "translation"}
    assert 0.2 < pf["match"].mean() < 0.9, "the pair should accept some drafts but not all"
    assert pf["q_top"].between(0, 1).all() and (pf["q_top"] >= pf["q_target"] - 1e-6).all()


# ------------------------------------------------------------------ sampling references


def test_sampling_reference_gives_expected_values(models, tmp_path):
    target, draft = models
    cfg = ReferenceConfig(max_new_tokens=24, sampling=SamplingConfig(temperature=1.0, seed=3), measure_timings=False)
    path = build_reference(target, draft, [{"prompt_ids": PROMPTS[0]}, {"prompt_ids": PROMPTS[3]}], cfg,
                           tmp_path / "s.jsonl", progress=False)
    r = load_reference(path)
    assert not r.greedy and all(0 <= b <= 1 for q in r.requests for b in q["beta"])
    s = simulate_policy(r, "fixed:3", CostModel.flat(0.1))
    assert (s["value"] == "expected").all() and (s["target_calls"] > 0).all()
    with pytest.raises(ValueError, match="greedy"):
        simulate_policy(r, "heuristic", CostModel.flat(0.1))
    wt = window_table(r, 0.1, gammas=(1, 2))
    assert set(wt["kind"]) == {"fixed", "oracle"} and "adaptive policies omitted" in wt.attrs["note"]


def test_reference_reuses_an_autoregressive_trace(models, ref, tmp_path):
    """--outputs-from: the target's greedy runs taken from an AR trace give the same A(j), tails and
    draft signals as a reference that decodes them itself; a sampled or speculative trace is refused."""
    from engine.decode import DecodeConfig
    from engine.offline.reference import ar_runs_from_trace
    from engine.run import Request, run_requests

    target, draft = models
    reqs = [Request(p, "", c, i) for i, (p, c) in enumerate(zip(PROMPTS, CATS))]
    ar = tmp_path / "ar.jsonl"
    run_requests(target, None, None, DecodeConfig(max_new_tokens=N_NEW), reqs, ar, progress=False)
    runs = ar_runs_from_trace(ar)
    prompts = [{"prompt_ids": p, "category": c, "question_id": i, "known": runs[i]}
               for i, (p, c) in enumerate(zip(PROMPTS, CATS))]
    path = build_reference(target, draft, prompts, ReferenceConfig(max_new_tokens=N_NEW, measure_timings=False),
                           tmp_path / "reused.jsonl", progress=False)
    reused = load_reference(path)
    for a, b in zip(ref.requests, reused.requests):
        for k in ("output_ids", "accept_run", "tails", "draft_argmax", "q_top", "finished"):
            assert a[k] == b[k], k
    assert reused.requests[0]["target_ms"] == runs[0]["target_ms"]
    fixed = tmp_path / "fixed.jsonl"
    run_requests(target, draft, parse_policy("fixed:2"), DecodeConfig(max_new_tokens=8), reqs[:1], fixed,
                 progress=False)
    with pytest.raises(ValueError, match="not a greedy autoregressive trace"):
        ar_runs_from_trace(fixed)


def test_reused_runs_must_cover_the_budget(models, tmp_path):
    """A recorded run shorter than max_new_tokens that did not end at EOS cannot stand in for the
    target's run (its A(j) would silently stop early); a longer one is cut and marked unfinished."""
    from engine.offline.reference import reference_request

    target, draft = models
    known = {"output_ids": [5, 6, 7], "finished": "max_new_tokens", "target_ms": 30.0, "target_step_ms": 10.0}
    with pytest.raises(ValueError, match="too short"):
        reference_request(target, draft, PROMPTS[0], ReferenceConfig(max_new_tokens=8, measure_timings=False),
                          known=known)
    rec = reference_request(target, draft, PROMPTS[0], ReferenceConfig(max_new_tokens=2, measure_timings=False),
                            known=dict(known, finished="eos"))
    assert rec["output_ids"] == [5, 6] and rec["finished"] == "max_new_tokens" and rec["target_ms"] == 20.0
