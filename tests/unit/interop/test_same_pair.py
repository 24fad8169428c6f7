"""An imported run beside the lab's own runs of the same pair (engine.interop.same_pair), on the committed vLLM
and llama.cpp fixtures and the bundled Qwen traces: names are matched however the engine spells them, the
per-position rates and first rejections are recomputed from each run's own steps (overall and per task), and
a totals-only file shows its totals and says it has nothing per position."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from engine.interop import formats
from engine.interop.same_pair import (TOTALS_ONLY, beside_ours, format_beside, model_key, own_runs, pair_key,
                                      profile)
from engine.trace.format import load_trace
from engine.trace.prompts import task_of

REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures" / "peers"
TRACES = REPO / "traces"
QWEN = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")


def _peer(name: str):
    return formats.loads_peer((FIX / name).read_bytes(), name)


@pytest.mark.parametrize("name, key", [
    ("Qwen/Qwen2.5-Coder-1.5B", "qwen2.5-coder-1.5b"),
    ("Qwen/Qwen2.5-Coder-1.5B-Instruct", "qwen2.5-coder-1.5b"),
    ("/models/hf/qwen2.5-coder-1.5b/", "qwen2.5-coder-1.5b"),
    ("gguf/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf", "qwen2.5-coder-1.5b"),
    ("qwen2.5-coder-0.5b-instruct-q8_0.gguf", "qwen2.5-coder-0.5b"),
    ("C:\\models\\SmolLM2_135M_Instruct", "smollm2-135m"),
    ("meta-llama/Llama-3.1-8B-Instruct-AWQ", "llama-3.1-8b"),
    ("(llama.cpp model)", None), ("(not in the scrape)", None), ("", None), (None, None),
])
def test_model_names_are_normalised(name, key):
    assert model_key(name) == key


def test_sizes_and_families_stay_apart():
    assert model_key("Qwen/Qwen2.5-Coder-0.5B") != model_key("Qwen/Qwen2.5-Coder-1.5B")
    assert model_key("Qwen/Qwen2.5-1.5B") != model_key("Qwen/Qwen2.5-Coder-1.5B")
    assert model_key("lookup:n=10,ngram=2") == "lookup:n=10,ngram=2"  # a model-free draft is not a model


def test_own_runs_finds_the_bundled_traces_of_the_pair_and_nothing_else():
    ours = own_runs(QWEN, TRACES)
    assert {"qwen-fixed-2-t0.jsonl", "qwen-fixed-4-t0.jsonl"} <= set(ours)
    assert all(pair_key(t) == QWEN for t in ours.values())
    assert not any(n.startswith(("qwen-ar", "qwen-lookup", "qwen-suffix", "ref-", "smollm2")) for n in ours)
    assert own_runs(None, TRACES) == {}


def test_an_engine_spelling_the_names_its_own_way_still_finds_our_runs():
    t = _peer("vllm-draft-k2.jsonl")
    t.header["target"]["name"], t.header["draft"]["name"] = "Qwen/Qwen2.5-Coder-1.5B-Instruct", \
        "/srv/models/qwen2.5-coder-0.5b-instruct-q8_0.gguf"
    assert pair_key(t) == QWEN and own_runs(pair_key(t), TRACES)


def _rates(steps, k):
    n = len(steps)
    return [sum(1 for s in steps if s["accepted"] >= i) / n for i in range(1, k + 1)]


def test_vllm_run_beside_our_fixed_2_run_with_the_same_figures_as_the_steps():
    imp = _peer("vllm-draft-k2.jsonl")
    ours = {"qwen-fixed-2-t0.jsonl": load_trace(TRACES / "qwen-fixed-2-t0.jsonl")}
    b = beside_ours(imp, ours, "vllm-k2")
    assert b["why"] is None and b["pair"] == QWEN and [p["label"] for p in b["ours"]] == ["qwen-fixed-2-t0.jsonl"]
    for p, t in ((b["imported"], imp), (b["ours"][0], ours["qwen-fixed-2-t0.jsonl"])):
        spec = [s for s in t.steps if (s["window"] or 0) > 0]
        assert p["k"] == 2 and p["steps"] == len(spec)
        assert p["per_position"]["rates"] == pytest.approx(_rates(spec, 2))
        assert p["per_position"]["drops"][0] == pytest.approx(1 - p["per_position"]["rates"][0])
        fr = p["first_rejection"]["shares"]
        assert fr["1"] == pytest.approx(sum(1 for s in spec if s["accepted"] == 0) / len(spec))
        assert fr["all"] == pytest.approx(sum(1 for s in spec if s["accepted"] == s["window"]) / len(spec))
        # by task: each task's first rejections over that task's steps only
        cat = {rid: task_of(r["category"]) for rid, r in t.requests.items()}
        for task, row in p["by_task"].items():
            mine = [s for s in spec if cat[s["request_id"]] == task]
            assert row["steps"] == len(mine)
            assert row["first_rejection"].get("1", 0) == pytest.approx(
                sum(1 for s in mine if s["accepted"] == 0) / len(mine))
            assert row["per_position"]["rates"] == pytest.approx(_rates(mine, 2))
    assert set(b["imported"]["by_task"]) == set(b["ours"][0]["by_task"]) and "summarization" in b["imported"]["by_task"]
    text = "\n".join(format_beside(b))
    assert "beside the lab's own runs of qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b" in text
    assert "task 'summarization'" in text and "vllm-k2" in text and "qwen-fixed-2-t0.jsonl" in text


def test_oracle_and_other_pairs_are_left_out():
    imp = _peer("vllm-draft-k4.jsonl")
    ours = {n: load_trace(TRACES / n) for n in ("qwen-oracle-t0.jsonl", "qwen-fixed-4-t0.jsonl",
                                                "smollm2-fixed-4.jsonl", "qwen-ar-t0.jsonl")}
    b = beside_ours(imp, ours, "vllm-k4")
    assert [p["label"] for p in b["ours"]] == ["qwen-fixed-4-t0.jsonl"]
    assert [n for n, _ in b["skipped"]] == ["qwen-oracle-t0.jsonl"]
    assert "left out: qwen-oracle-t0.jsonl (hindsight oracle" in "\n".join(format_beside(b))


def test_llamacpp_windows_split_from_totals_give_positions_but_no_first_rejection():
    b = beside_ours(_peer("llamacpp-draft-k4.jsonl"), own_runs(QWEN, TRACES), "ll-k4")
    p = b["imported"]
    assert p["per_position"]["rates"] and p["first_rejection"]["shares"] is None
    assert "per-step windows not known" in p["first_rejection"]["why"]


def test_a_totals_only_file_shows_totals_and_says_so():
    t = _peer("llamacpp-speculative-simple-k4.log")  # per-request totals only; the log does not name the target
    assert beside_ours(t, own_runs(QWEN, TRACES))["why"].startswith("the file does not name both models")
    named = copy.deepcopy(t)
    named.header["target"] = {**(named.header.get("target") or {}), "name": "Qwen/Qwen2.5-Coder-1.5B-Instruct"}
    named.header["draft"] = {**(named.header.get("draft") or {}), "name": "gguf/qwen2.5-coder-0.5b.gguf"}
    b = beside_ours(named, own_runs(QWEN, TRACES), "ll.log")
    p = b["imported"]
    assert p["per_position"] is None and p["first_rejection"]["shares"] is None and p["why"] == TOTALS_ONLY
    spec = [s for s in named.steps if s["window"] != 0]
    assert p["mean_acceptance_length"] == pytest.approx(1 + sum(s["accepted"] for s in spec) / len(spec))
    text = "\n".join(format_beside(b))
    assert "per position: none (totals only)" in text and "the imported run: totals only" in text
    assert b["ours"] and all(o["per_position"] for o in b["ours"])  # ours still show theirs


def test_no_run_of_the_pair_no_comparison():
    b = beside_ours(_peer("vllm-draft-k2.jsonl"), {"smollm2-fixed-4.jsonl": load_trace(TRACES / "smollm2-fixed-4.jsonl")})
    assert b["imported"] is None and "no run of qwen2.5-coder-1.5b ← qwen2.5-coder-0.5b" in b["why"]
    assert format_beside(b) == [f"beside the lab's own runs: none — {b['why']}"]


def test_profile_of_a_run_with_variable_windows_stops_at_its_largest_window():
    t = load_trace(TRACES / "qwen-heuristic-t0.jsonl")
    p = profile(t, "h", "ours")
    spec = [s for s in t.steps if (s["window"] or 0) > 0]
    assert p["k"] == max(s["window"] for s in spec) and len(p["per_position"]["rates"]) == p["k"]
    assert p["per_position"]["rates"] == pytest.approx(_rates(spec, p["k"]))
    assert sum(p["first_rejection"]["shares"].values()) == pytest.approx(1.0)


def test_rejection_rows_fill_unseen_positions_with_zero_up_to_each_window():
    from engine.interop.same_pair import position_rows, rejection_rows

    ours = {n: load_trace(TRACES / n) for n in ("qwen-fixed-1-t0.jsonl", "qwen-heuristic-t0.jsonl")}
    b = beside_ours(_peer("llamacpp-draft-k4.jsonl"), ours, "ll")
    rows = {(r["task"], r["run"]): r for r in rejection_rows(b)}
    h = rows[("all", "qwen-heuristic-t0.jsonl")]
    k = b["ours"][1]["k"]
    assert [h[str(i)] for i in range(1, k + 1)] + [h["none"]] == pytest.approx(
        [b["ours"][1]["first_rejection"]["shares"].get(str(i), 0.0) for i in range(1, k + 1)]
        + [b["ours"][1]["first_rejection"]["shares"]["all"]])
    assert "2" not in rows[("all", "qwen-fixed-1-t0.jsonl")]  # past its window: no share, not 0
    assert "1" not in rows[("all", "ll")]  # llama.cpp: windows split from totals, first rejections unknown
    assert {r["run"] for r in position_rows(b)} == {"ll", *ours}
