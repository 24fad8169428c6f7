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

from tests.conftest import REF_CATS as CATS, REF_N_NEW as N_NEW, REF_PROMPTS as PROMPTS, synthetic


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
