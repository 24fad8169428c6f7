"""Window analysis: reference runs, the exact simulator (checked against real decode runs), the cost
model and closed forms (checked against the project notes' tables), the tables and the CLI."""

import argparse
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from engine.offline import analysis as an
from engine.offline.analysis import (CostModel, iid_theory, load_reference, oracle_ratio_table, positions_frame,
                             simulate_policy, variability_table, window_table)
from engine.offline.costmodel import expected_emitted, leviathan_speedup, oracle_speedup
from engine.decode import DecodeConfig, decode
from engine.core.lm import HFModel
from engine.policies.base import parse_policy
from engine.offline.hindsight import accept_runs
from engine.offline.reference import ReferenceConfig, build_reference
from engine.offline.reference_file import Reference, ReferenceFormatError, loads_reference
from engine.core.sampling import SamplingConfig
from engine.offline.replay import _expected, parse_spec, simulate_steps, walk_reference
from tests.conftest import greedy_reference, noisy_copy

PROMPTS = [[1, 5, 9, 3], [7], [2, 2, 2, 2, 11, 40], [3, 8, 1, 60, 22], [9, 9, 1]]
CATS = ["writing", "summarization", "math_reasoning", "qa", "translation"]
N_NEW = 40
# Thresholds sit inside the scaled draft's signal range (q median ≈ 0.65, entropy median ≈ 1.1 nats),
# so every adaptive policy really stops at different places than fixed γ does.
POLICIES = ["fixed:1", "fixed:3", "fixed:9", "heuristic", "heuristic:2,max=8", "confidence:0.6",
            "confidence:0.6,trim=1", "cumulative:0.5", "cumulative:0.9", "entropy:1.0", "entropy:0.5,max=6"]


@pytest.fixture(scope="module")
def sharp_draft(tiny_target):
    """Noisy copy of the target (α ≈ 0.2–0.97 by prompt) with a sharpened head: same argmax,
    confidences spread over (0, 1) so confidence/entropy thresholds bite."""
    d = noisy_copy(tiny_target, 1, scale=0.3)
    with torch.no_grad():
        d.lm_head.weight.mul_(30.0)
    return d


@pytest.fixture(scope="module")
def models(tiny_target, sharp_draft):
    return HFModel(tiny_target, "tiny-target"), HFModel(sharp_draft, "tiny-draft")


@pytest.fixture(scope="module")
def ref_path(models, tmp_path_factory):
    target, draft = models
    path = tmp_path_factory.mktemp("ref") / "ref.jsonl"
    prompts = [{"prompt_ids": p, "category": c} for p, c in zip(PROMPTS, CATS)]
    cfg = ReferenceConfig(max_new_tokens=N_NEW, timing_repeats=2)
    build_reference(target, draft, prompts, cfg, path, progress=False)
    return path


@pytest.fixture(scope="module")
def ref(ref_path):
    return load_reference(ref_path)


def synthetic(matches: list[list[int]], budget: int | None = None, tasks=None) -> Reference:
    """A greedy Reference from match patterns (for fixed/oracle replay; no tails needed)."""
    reqs = []
    for i, m in enumerate(matches):
        n = len(m)
        reqs.append({"request_id": i, "task": (tasks or ["t"] * len(matches))[i], "category": "",
                     "output_ids": [1] * n, "draft_argmax": [1 if x else 2 for x in m], "accept_run": accept_runs(m),
                     "q_top": [0.5] * n, "q_target": [0.5] * n, "entropy": [1.0] * n, "tails_by_pos": {}})
    header = {"mode": "greedy", "max_new_tokens": budget or max(len(m) for m in matches), "max_window": 16,
              "timings": None}
    return Reference(header, reqs, True, "synthetic")


# ------------------------------------------------------------------ reference run


def test_accept_runs():
    assert accept_runs([1, 1, 0, 1, 0, 0, 1, 1, 1]) == [2, 1, 0, 1, 0, 0, 3, 2, 1]
    assert accept_runs([]) == []


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


# ------------------------------------------------------------------ simulator fidelity


@pytest.mark.parametrize("spec", POLICIES)
def test_simulation_equals_real_decode(ref, models, spec):
    """The simulator replays the very policy classes engine.decode uses: per-step windows and
    accepted counts, hence target calls, must match a real greedy decode exactly."""
    target, draft = models
    cost = CostModel.flat(0.1)
    stops = set()
    for rid, req in enumerate(ref.requests):
        real = list(decode(target, draft, req["prompt_ids"], parse_policy(spec), DecodeConfig(max_new_tokens=N_NEW)))
        sim = simulate_steps(ref, spec, cost, rid)
        assert [(s.window, s.accepted, s.emitted) for s in real] == list(zip(sim.window, sim.accepted, sim.emitted))
        assert [s.stop_reason for s in real] == list(sim.stop_reason.replace("oracle", "cap"))
        stops |= {s.stop_reason for s in real}
    if spec.startswith(("confidence", "cumulative", "entropy")):
        assert "policy" in stops and "cap" in stops, "thresholds must make the policy stop sometimes, not always"
    row = simulate_policy(ref, spec, cost)
    assert (row["value"] == "exact").all()


def test_dynamic_programme_equals_walk_on_greedy(ref):
    cost = CostModel.flat(0.07)
    for spec in ("fixed:1", "fixed:5", "fixed:16", "oracle:a", "oracle:b", "oracle:a,max=4"):
        pol = parse_spec(spec)
        for req in ref.requests:
            steps = walk_reference(req, pol, ref.max_new_tokens, cost)
            dp = _expected(req, pol, ref.max_new_tokens, cost)
            assert dp["target_calls"] == pytest.approx(len(steps))
            assert dp["drafted"] == pytest.approx(sum(s["window"] for s in steps))
            assert dp["sim_time"] == pytest.approx(sum(s["cost"] for s in steps))


def test_oracle_definitions():
    # match pattern → A = [2,1,0, 0, 3,2,1,0]; oracle steps start at 0, 3, 4
    r = synthetic([[1, 1, 0, 0, 1, 1, 1, 0]], budget=100)
    cost = CostModel.flat(0.1)
    a = simulate_steps(r, "oracle:a", cost)
    assert list(a.pos) == [0, 3, 4] and list(a.window) == [2, 0, 3] and list(a.emitted) == [3, 1, 4]
    assert list(a.window) == list(a.accepted)  # (a): nothing wasted, every call emits A + 1
    b = simulate_steps(r, "oracle:b", cost)
    assert list(b.window) == [3, 1, 4] and list(b.accepted) == [2, 0, 3]  # (b): one wasted per call
    assert a["cost"].sum() == pytest.approx(3 + 0.1 * 5) and b["cost"].sum() == pytest.approx(3 + 0.1 * 8)
    capped = simulate_steps(r, "oracle:a,max=1", cost)
    assert capped["window"].max() == 1 and capped["emitted"].sum() == 8


def test_oracle_beats_every_fixed_window(ref):
    ot = oracle_ratio_table(ref, costs=(0.02, 0.05, 0.1, 0.2), policies=("heuristic",))
    assert (ot["ratio_a"] >= 1.0 - 1e-12).all() and (ot["ratio_a"] >= ot["ratio_b"] - 1e-12).all()
    assert (ot[ot["task"] == "all"]["ratio_a"] > 1.05).all()
    wt = window_table(ref, 0.05, policies=())
    allr = wt[wt["task"] == "all"].set_index("policy")
    assert allr.loc["oracle:a", "wasted_draft"] == 0
    assert allr.loc["oracle:a", "target_calls"] <= allr[allr["kind"] == "fixed"]["target_calls"].min()
    assert (allr["mean_emitted_per_call_incl_bonus"] * allr["target_calls"]).round(6).eq(len(PROMPTS) * N_NEW).all()


def test_iid_simulation_matches_closed_form():
    """On a long i.i.d. Bernoulli(α) match pattern the exact replay converges to Leviathan's forms."""
    rng = np.random.default_rng(0)
    alpha, c = 0.8, 0.05
    r = synthetic([list((rng.random(40_000) < alpha).astype(int))])
    cost = CostModel.flat(c)
    for g in (2, 4, 8):
        s = simulate_policy(r, f"fixed:{g}", cost).iloc[0]
        assert s["mean_emitted_per_call_incl_bonus"] == pytest.approx(expected_emitted(alpha, g), rel=0.02)
        assert s["speedup"] == pytest.approx(leviathan_speedup(alpha, g, c), rel=0.02)
    for v in ("a", "b"):
        s = simulate_policy(r, f"oracle:{v}", cost).iloc[0]
        assert s["speedup"] == pytest.approx(oracle_speedup(alpha, c, v), rel=0.02)


# ------------------------------------------------------------------ closed forms and cost model


@pytest.mark.parametrize("alpha,c,fixed,gstar,orac,ra,rb", [
    (0.6, 0.05, 1.92, 4, 2.33, 1.21, 1.16), (0.7, 0.10, 1.98, 4, 2.70, 1.36, 1.26),
    (0.8, 0.05, 3.09, 8, 4.17, 1.35, 1.29), (0.8, 0.10, 2.47, 6, 3.57, 1.45, 1.35),
    (0.9, 0.05, 4.67, 13, 6.90, 1.48, 1.43), (0.9, 0.20, 2.37, 7, 3.57, 1.50, 1.40)])
def test_iid_theory_reproduces_notes_table(alpha, c, fixed, gstar, orac, ra, rb):
    t = iid_theory(alpha, c, range(1, 65)).iloc[0]
    assert int(t["best_gamma"]) == gstar
    assert round(t["s_best_fixed"], 2) == fixed and round(t["s_oracle_a"], 2) == orac
    assert round(t["ratio_a"], 2) == ra and round(t["ratio_b"], 2) == rb


def test_leviathan_worked_example_and_gamma_table():
    assert expected_emitted(0.8, 4) == pytest.approx(3.362, abs=5e-4)
    t = iid_theory(0.7, 0.2, range(1, 17))
    assert int(t["best_gamma"].iloc[0]) == 3 and round(t["speedup"].max(), 2) == 1.58
    assert list(t["gamma"]) == list(range(1, 17))


def test_cost_model():
    timings = {"target_ms_by_tokens": [10.0, 11.0, 12.0], "draft_ms_per_token": 1.0}
    m = CostModel.from_timings(timings)
    assert m.c == pytest.approx(0.1) and m.target_ms == 10.0
    assert m.step(0) == 1.0 and m.step(2) == pytest.approx(0.2 + 1.2)
    assert m.v(4) == pytest.approx(1.4)  # linear extrapolation past the measured range
    assert CostModel.from_timings(timings, flat_verify=True).v(5) == 1.0
    assert CostModel.from_timings(timings, c=0.3).c == 0.3
    assert CostModel.flat(0.05).step(4) == pytest.approx(1.2)
    noisy = CostModel.from_timings({"target_ms_by_tokens": [12.0, 10.0, 11.0, 14.0], "draft_ms_per_token": 1.1})
    assert list(noisy.verify) == pytest.approx([1.0, 1.0, 1.0, 14 / 11])  # PAV: t(1..3) pooled to 11 ms
    assert noisy.c == pytest.approx(0.1)
    raw = CostModel.from_timings({"target_ms_by_tokens": [12.0, 10.0], "draft_ms_per_token": 1.2}, monotone=False)
    assert raw.verify[1] == pytest.approx(10 / 12)
    with pytest.raises(ValueError, match="cost ratio"):
        CostModel(c=-1)
    with pytest.raises(ValueError, match="no timings"):
        CostModel.from_timings(None)
    with pytest.raises(AttributeError):
        CostModel.flat(0.1).c = 0.2  # frozen


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


def test_expected_values_match_leviathan_for_constant_beta():
    alpha, n = 0.7, 3000
    r = synthetic([[1] * n])
    r.header["mode"] = "sampling"
    r.requests[0]["beta"] = [alpha] * n
    for g in (1, 3, 7):
        s = simulate_policy(r, f"fixed:{g}", CostModel.flat(0.1)).iloc[0]
        assert s["mean_emitted_per_call_incl_bonus"] == pytest.approx(expected_emitted(alpha, g), rel=0.01)
    s = simulate_policy(r, "oracle:a", CostModel.flat(0.1)).iloc[0]
    assert s["speedup"] == pytest.approx(oracle_speedup(alpha, 0.1, "a"), rel=0.01)


# ------------------------------------------------------------------ tables


def test_tables_shape(ref):
    wt = window_table(ref, "measured", gammas=range(1, 9))
    assert {"all", "mt_bench", "qa"} <= set(wt["task"])
    assert set(wt[wt["task"] == "all"]["kind"]) == {"fixed", "oracle", "adaptive"}
    assert wt["sim_ms"].notna().all() and (wt["rel_best_fixed"] > 0).all()
    ot = oracle_ratio_table(ref, costs=("measured", 0.05))
    assert set(ot["cost"]) == {ot["cost"].iloc[0], "c=0.05 flat"} and len(ot) == 2 * 6
    assert any(col.startswith("pos:heuristic") for col in ot.columns)
    pp = an.policy_positions(ref, costs=(0.05,))
    # position 0 = best fixed, 1 = oracle: recompute one entry by hand
    row = pp.iloc[0]
    assert row["position"] == pytest.approx((row["speedup"] - row["s_best_fixed"]) / (row["s_oracle_a"] -
                                                                                     row["s_best_fixed"]))
    vt = variability_table(ref, 0.05)
    allr = vt[vt["task"] == "all"].iloc[0]
    assert allr["positions"] == len(PROMPTS) * N_NEW and allr["A_std"] > 0 and 0 <= allr["frac_differs"] <= 1
    assert allr["frac_differs"] == pytest.approx(allr["frac_shorter"] + allr["frac_longer"])


def test_variability_counts_per_step_best_window():
    # A at the oracle step starts (positions 0, 3, 4): [2, 0, 3]
    r = synthetic([[1, 1, 0, 0, 1, 1, 1, 0]], budget=100)
    vt = variability_table(r, 0.05, gammas=range(1, 5)).iloc[0]
    g = vt["best_fixed_gamma"]
    bw = np.array([2, 0, 3])
    assert vt["oracle_steps"] == 3 and vt["best_window_mean"] == pytest.approx(5 / 3)
    assert vt["frac_differs"] == pytest.approx(float((bw != g).mean()))


# ------------------------------------------------------------------ malformed reference files


def _lines(ref_path):
    return ref_path.read_bytes().split(b"\n")


def _corrupt(ref_path, line_no, edit):
    lines = _lines(ref_path)
    d = json.loads(lines[line_no - 1])
    edit(d)
    lines[line_no - 1] = json.dumps(d).encode()
    return b"\n".join(lines)


@pytest.mark.parametrize("line_no,edit,pattern", [
    (1, lambda d: d.update(schema="speclab.trace"), r"line 1: field 'schema'"),
    (1, lambda d: d.update(version=9), r"line 1: field 'version': unsupported version 9"),
    (1, lambda d: d.update(mode="beam"), r"line 1: field 'mode'"),
    (1, lambda d: d["timings"]["target_ms_by_tokens"].__setitem__(2, "fast"),
     r"line 1: field 'timings.target_ms_by_tokens\[2\]'"),
    (2, lambda d: d["accept_run"].__setitem__(0, d["accept_run"][0] + 1), r"line 2: field 'accept_run\[0\]'"),
    (2, lambda d: d["q_top"].__setitem__(3, 1.5), r"line 2: field 'q_top\[3\]': 1.5 outside"),
    (2, lambda d: d["entropy"].pop(), r"line 2: field 'entropy': has 39 entries, expected 40"),
    (3, lambda d: d["output_ids"].__setitem__(0, -4), r"line 3: field 'output_ids\[0\]': not a token id"),
    (3, lambda d: d.update(tails=d["tails"][1:]), r"line 3: field 'tails': no tail for mismatch position"),
    (3, lambda d: d.update(request_id=7), r"line 3: field 'request_id': expected 1, got 7"),
])
def test_malformed_reference_errors(ref_path, line_no, edit, pattern):
    with pytest.raises(ReferenceFormatError, match=pattern) as e:
        loads_reference(_corrupt(ref_path, line_no, edit), "ref.jsonl")
    assert "\n" not in str(e.value) and str(e.value).startswith("ref.jsonl: line")


def test_malformed_json_and_nan(ref_path):
    lines = _lines(ref_path)
    with pytest.raises(ReferenceFormatError, match=r"line 2: invalid JSON"):
        loads_reference(b"\n".join([lines[0], lines[1][:50]]), "ref.jsonl")
    with pytest.raises(ReferenceFormatError, match=r"line 2: invalid JSON"):
        loads_reference(b"\n".join([lines[0], lines[1].replace(b'"q_top": [', b'"q_top": [NaN, ', 1)]), "ref.jsonl")
    with pytest.raises(ReferenceFormatError, match="empty file"):
        loads_reference(b"", "ref.jsonl")
    r = loads_reference(b"\n".join(lines[:3]), "ref.jsonl")  # killed before the footer: loadable, flagged
    assert not r.complete and len(r.requests) == 2


# ------------------------------------------------------------------ decode traces and CLI


def test_trace_table_reports_censoring_and_cost(models, tmp_path):
    from engine.run import Request, run_requests
    from engine.trace.format import load_trace

    target, draft = models
    path = tmp_path / "t.jsonl"
    reqs = [Request(p, category=c) for p, c in zip(PROMPTS[:3], CATS)]
    run_requests(target, draft, parse_policy("fixed:4"), DecodeConfig(max_new_tokens=20), reqs, path, progress=False)
    tr = load_trace(path)
    tt = an.trace_table([tr])
    allr = tt[tt["task"] == "all"].iloc[0]
    assert allr["accepted_mean"] == pytest.approx(tr.summary["mean_accepted_per_call_excl_bonus"])
    assert allr["max_window"] == 4 and "censored at window 4" in allr["note"]
    assert 0 < allr["censored_frac"] < 1 and allr["c_measured"] > 0
    assert an.load_any(path)[0] == "trace"
    out = tmp_path / "out"
    assert _cli(["analyze", str(path), "--out", str(out)]) == 0
    assert "censored" in json.loads((out / "summary.json").read_text())["notes"][0]
    assert len(pd.read_csv(out / "trace_accepted.csv")) == len(tr.steps)


def _cli(argv):
    from engine.cli.analysis import add_parser

    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers(dest="cmd", required=True))
    a = ap.parse_args(argv)
    return a.func(a)


def test_cli_analyze_writes_tables(ref_path, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(["analyze", str(ref_path), "--costs", "measured,0.05,0.1@measured", "--gammas", "1-8",
                 "--policies", "heuristic;confidence:0.6", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1.4x table" in text and "every simulated number is exact" in text
    for name in ("window_table", "oracle_ratio", "policy_positions", "variability", "positions", "iid_theory"):
        assert (out / f"{name}.csv").is_file()
        assert json.loads((out / f"{name}.json").read_text())["rows"]
    ot = pd.read_csv(out / "oracle_ratio.csv")
    assert {"c=0.05 flat", "c=0.1 measured-verify"} <= set(ot["cost"])


def test_cli_reference_end_to_end(tiny_target, sharp_draft, tmp_path, capsys):
    from tokenizers import Tokenizer, models as tm, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(63)} | {"[UNK]": 63}
    tk = Tokenizer(tm.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    for name, m in (("t", tiny_target), ("d", sharp_draft)):
        m.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [" ".join(f"w{x}" for x in p)]})
                                 for i, (p, c) in enumerate(zip(PROMPTS, CATS))))
    ref_out = tmp_path / "r.jsonl"
    assert _cli(["reference", "--target", str(tmp_path / "t"), "--draft", str(tmp_path / "d"), "--prompts",
                 str(prompts), "--limit", "2", "--max-new-tokens", "12", "--dtype", "fp32", "--timing-repeats", "1",
                 "--out", str(ref_out)]) == 0
    r = load_reference(ref_out)
    assert len(r.requests) == 2 and r.requests[0]["prompt_ids"] == PROMPTS[0] and r.header["timings"]
    assert "python -m engine" in r.header["command"] and "wrote" in capsys.readouterr().out
    assert _cli(["analyze", str(ref_out), "--costs", "0.05"]) == 0


def test_oracle_is_never_beaten_in_target_calls(ref):
    """No simulated policy (fixed or adaptive) needs fewer target calls than the exact oracle."""
    wt = window_table(ref, 0.05, policies=("heuristic", "confidence:0.4", "cumulative", "entropy",
                                            "confidence:0.9", "heuristic:1,max=8"))
    for _, rows in wt.groupby("task"):
        rows = rows.set_index("policy")
        assert (rows["target_calls"] >= rows.loc["oracle:a", "target_calls"]).all(), rows["target_calls"]
        assert len(rows) > 17  # 16 fixed windows, the oracles and the adaptive policies all simulated


def test_required_alpha_inverts_the_speedup_formula():
    """Worked example (flat verify, c = 0, γ = 1): S = 1 + α, so S = 1.5 needs α = 0.5; an
    unreachable S gives None; a measured verify curve raises the bar."""
    from engine.offline.costmodel import CostModel, expected_emitted, required_alpha

    assert required_alpha(CostModel.flat(0.0), 1, 1.5) == pytest.approx(0.5, abs=1e-8)
    assert required_alpha(CostModel.flat(0.0), 1, 2.5) is None
    assert required_alpha(CostModel.flat(0.5), 2, 0.4) == 0.0  # α = 0 already gives 1/cost = 0.5
    measured = CostModel(c=0.15, verify=(1.0, 1.67, 2.03, 2.0, 1.86))
    for g in (1, 2, 3, 4):
        a_flat, a_meas = required_alpha(CostModel.flat(0.15), g, 1.0), required_alpha(measured, g, 1.0)
        assert a_meas > a_flat
        assert expected_emitted(a_meas, g) / measured.step(g) == pytest.approx(1.0, rel=1e-6)


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


def _with_tails(ref: Reference, n_tail: int) -> Reference:
    """`ref` with a free-running tail of `n_tail` tokens at every mismatch and max_window n_tail + 1."""
    for req in ref.requests:
        req["tails_by_pos"] = {j: {"pos": j, "tokens": [3] * n_tail, "q_top": [0.9] * n_tail,
                                   "entropy": [0.1] * n_tail}
                               for j, a in enumerate(req["accept_run"]) if a == 0}
    ref.header["max_window"] = n_tail + 1
    return ref


def test_adaptive_replay_of_a_run_reaching_the_end_of_an_eos_output():
    """The last step's accepted run reaches the end of an output shorter than the budget (EOS): no
    mismatch is recorded there, so past it the policy sees no signal — the replay must not look one up."""
    ref = _with_tails(synthetic([[0, 1, 1, 1]], budget=16), 7)
    steps = simulate_steps(ref, "confidence:0.4,max=8", CostModel.flat(0.1), 0)
    assert steps["emitted"].sum() == 4 and steps["pos"].tolist()[-1] == 1


def test_a_window_longer_than_the_recorded_tails_is_refused_or_capped():
    ref = _with_tails(synthetic([[0, 1, 0, 1, 1, 0, 0, 1] * 3]), 7)  # max_window 8
    with pytest.raises(ValueError, match=r"--max-window 16|max=8"):
        simulate_steps(ref, "confidence:0.4", CostModel.flat(0.1), 0)  # drafts up to 16
    assert an.fit_to_references("confidence:0.4", [ref]) == "confidence:0.4,max=8"
    assert an.fit_to_references("heuristic", [ref]) == "heuristic:max=8"
    assert an.fit_to_references("fixed:12", [ref]) == "fixed:12"  # fixed windows need no tails
    wt = an.window_table(ref, CostModel.flat(0.1), gammas=[1, 2], policies=["confidence:0.4"], by_task=False)
    assert wt["policy"].str.contains("max=8").any()


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


def test_in_run_cost_model_from_trace_steps():
    """The docstring's worked example, exactly, and the refusals."""
    w = [0, 0, 0, 2, 2, 4]
    td = [0, 0, 0, 70, 70, 110]  # a = 30, b = 20
    tv = [100, 90, 110, 150, 150, 250]
    cm = CostModel.from_steps(w, td, tv, max_window=6)
    assert cm.c == pytest.approx(0.2) and cm.target_ms == 100
    assert cm.v(0) == 1.0 and cm.v(2) == pytest.approx(1.8) and cm.step(2) == pytest.approx(2.2)
    assert cm.v(1) == pytest.approx((125 + 30) / 100)  # interpolated between γ = 0 and γ = 2
    assert cm.v(6) == pytest.approx((350 + 30) / 100)  # the last slope, 50 ms per window
    with pytest.raises(ValueError, match="autoregressive"):
        CostModel.from_steps([2, 4], [70, 110], [150, 250])
    with pytest.raises(ValueError, match="two window"):
        CostModel.from_steps([0, 2, 2], [0, 70, 70], [100, 150, 150])


def test_in_run_cost_replays_what_real_decoding_paid(models, ref, ref_path, tmp_path, capsys):
    """Decode traces of the reference's own pair calibrate the replay: the in-run cost model prices a
    fixed-γ replay at the wall time those very steps took (same outputs, same steps), and a trace of
    another pair is not used."""
    from engine.run import Request, run_requests

    target, draft = models
    reqs = [Request(p, "", c, i) for i, (p, c) in enumerate(zip(PROMPTS, CATS))]
    paths = {}
    for spec in ("ar", "fixed:2", "fixed:4"):
        paths[spec] = tmp_path / f"{spec.replace(':', '-')}.jsonl"
        run_requests(target, None if spec == "ar" else draft, None if spec == "ar" else parse_policy(spec),
                     DecodeConfig(max_new_tokens=N_NEW), reqs, paths[spec], progress=False)
    traces = [an.load_any(p)[1] for p in paths.values()]
    cm = an.in_run_cost(traces, ref)
    steps = [s for s in traces[1].steps]  # fixed:2: its replay must cost what its steps cost, ± the fit
    real = sum(s["t_draft_ms"] + s["t_verify_ms"] for s in steps) / cm.target_ms
    sim = simulate_policy(ref, "fixed:2", cm)["sim_time"].sum()
    assert sim == pytest.approx(real, rel=0.5)
    other = HFModel(noisy_copy(target.model, 7), "another-draft")
    run_requests(target, other, parse_policy("fixed:2"), DecodeConfig(max_new_tokens=4), reqs[:1],
                 tmp_path / "other.jsonl", progress=False)
    with pytest.raises(ValueError, match="no decode trace"):
        an.in_run_cost([an.load_any(tmp_path / "other.jsonl")[1]], ref)
    assert _cli(["analyze", str(ref_path), *map(str, paths.values()), "--costs", "in-run,0.1", "--cost", "in-run",
                 "--gammas", "1-4", "--policies", "heuristic"]) == 0
    assert "in-run cost model from the decode traces" in capsys.readouterr().out


def test_cost_optimal_oracle_is_the_cheapest_schedule():
    """oracle:c = exhaustive search over every window schedule on small outputs (brute force over
    all sequences of windows), never slower than oracle (a) or any fixed window, and equal to (a)
    when a wide verify costs nothing extra (flat verify, c = 0)."""
    import itertools

    from engine.offline.replay import cost_optimal_windows

    def brute(runs, cost):
        n, best = len(runs), math.inf

        def go(j, total):
            nonlocal best
            if j >= n:
                best = min(best, total)
                return
            for w in range(min(runs[j], n - j - 1) + 1):
                go(j + w + 1, total + cost.step(w))
        go(0, 0.0)
        return best

    steep = CostModel(c=0.3, verify=(1.0, 2.0, 2.4, 2.8, 3.2, 3.6, 4.0, 4.4), label="steep")
    for bits in itertools.product([0, 1], repeat=8):
        ref = synthetic([list(bits)])
        runs = ref.requests[0]["accept_run"]
        for cost in (steep, CostModel.flat(0.2)):
            sim = simulate_policy(ref, "oracle:c", cost)["sim_time"].iloc[0]
            assert sim == pytest.approx(brute(runs, cost)), (bits, cost.label)
            assert sim <= simulate_policy(ref, "oracle:a", cost)["sim_time"].iloc[0] + 1e-9
            for g in (1, 2, 4):
                assert sim <= simulate_policy(ref, f"fixed:{g}", cost)["sim_time"].iloc[0] + 1e-9
        assert cost_optimal_windows(runs, 8, CostModel.flat(0.0)) == runs[:8] or \
            simulate_policy(ref, "oracle:c", CostModel.flat(0.0))["sim_time"].iloc[0] == \
            pytest.approx(simulate_policy(ref, "oracle:a", CostModel.flat(0.0))["sim_time"].iloc[0])
    assert cost_optimal_windows([3, 2, 1, 0], 4, CostModel.flat(0.5)) == [3, 2, 1, 0]  # docstring example, w = 3 first
    with pytest.raises(ValueError, match="greedy"):
        _expected({"beta": [0.5] * 4, "draft_argmax": [1] * 4, "output_ids": [1] * 4}, parse_spec("oracle:c"), 4,
                  CostModel.flat(0.1))
