"""Window analysis: reference runs, the exact simulator (checked against real decode runs), the cost
model and closed forms (checked against the project notes' tables), the tables and the CLI."""

import argparse
import json

import numpy as np
import pandas as pd
import pytest
import torch

from engine.offline import analysis as an
from engine.offline.analysis import load_reference, oracle_ratio_table, variability_table, window_table
from engine.decode import DecodeConfig
from engine.core.lm import HFModel
from engine.policies.base import parse_policy
from engine.hindsight import accept_runs
from engine.offline.reference import ReferenceConfig, build_reference
from engine.trace.reference_file import Reference
from tests.conftest import noisy_copy

PROMPTS = [[1, 5, 9, 3], [7], [2, 2, 2, 2, 11, 40], [3, 8, 1, 60, 22], [9, 9, 1]]
CATS = ["writing", "summarization", "math_reasoning", "qa", "translation"]
N_NEW = 40


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
