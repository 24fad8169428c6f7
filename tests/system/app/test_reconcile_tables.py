"""Rows for every speedup cell of the Windows and Sweeps tables (app.reconcile_tables) and the links a
column carries to them. Pure: hand-made frames, no Streamlit."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pandas as pd

from app import reconcile
from app import reconcile_tables as rt

PAIR = reconcile.pair_id("qwen2.5-coder-1.5b")


def window_frames():
    wt = pd.DataFrame({"task": ["all", "all", "all", "qa"], "policy": ["fixed:2", "fixed:3", "oracle:a", "oracle:a"],
                       "speedup": [0.76, 0.78, 0.954, 1.0326], "cost": ["in-run (7 traces)"] * 4})
    ot = pd.DataFrame({"task": ["all", "all"], "cost": ["in-run (7 traces)", "c=0.1 flat"], "best_gamma": [3, 2],
                       "s_best_fixed": [0.78, 2.14], "s_oracle_a": [0.954, 3.17], "s_oracle_b": [0.78, 2.95]})
    return wt, ot


def test_every_window_cell_is_a_replayed_cell_row_named_by_refs_cost_task_and_policy():
    wt, ot = window_frames()
    refs = rt.refs_key(["ref-qwen-greedy.jsonl"])
    df = reconcile.frame(rt.window_cells(PAIR, refs, wt, ot, 18, 128, "fp32", "ref-qwen-greedy.jsonl"))
    assert set(df["kind"]) == {reconcile.CELL} and set(df["basis"]) == {reconcile.REPLAYED}
    by = df.set_index("row")["speedup"]
    qa = rt.win_cell_id(refs, "in-run (7 traces)", "qa", "oracle:a")
    assert qa == "win-ref-qwen-greedy-in-run-7-traces-qa-oracle-a" and by[qa] == 1.0326
    # the oracle table's oracle (a) at the window table's cost is the same figure: one row, not two
    assert rt.oracle_ids(refs, ot, "s_oracle_a")[0] == rt.policy_ids(refs, wt)[2]
    assert len(df) == 4 + 2 * 3 - 1
    assert by[rt.oracle_ids(refs, ot, "s_best_fixed")[1]] == 2.14  # another cost model: another row
    assert rt.refs_key(["b.jsonl", "a.jsonl"]) == rt.refs_key(["a.jsonl", "b.jsonl"])  # order changes no figure
    # a cell is listed on the Speedups page only when a link points at it, and a sentence never links to one
    assert qa not in set(reconcile.table(df, PAIR)["row id"]) and reconcile.table(df, PAIR, qa).iloc[0]["row id"] == qa
    assert "row=" not in reconcile.linkify("1.03× AR", df, PAIR)


def test_links_are_all_or_nothing_and_print_their_row():
    wt, ot = window_frames()
    refs = rt.refs_key(["ref-qwen-greedy.jsonl"])
    df = reconcile.frame(rt.window_cells(PAIR, refs, wt, ot, 18, 128, "fp32", "x"))
    ids = rt.policy_ids(refs, wt)
    cells = rt.links(df, PAIR, ids, wt["speedup"])
    for url, i, x in zip(cells, ids, wt["speedup"]):
        q = parse_qs(urlparse(url).query)
        assert q["row"] == [i] and q["pair"] == [PAIR] and re.search(reconcile.FIGURE_TEXT, url).group(1) == f"{x:.2f}"
    # a figure no row prints (a cost ratio set by hand) leaves the whole column plain, never a dead link
    assert rt.links(df, PAIR, ids, wt["speedup"].where(wt.index != 1, 0.5)) is None
    assert rt.links(df, PAIR, [*ids[:-1], "gone"], wt["speedup"]) is None
    assert rt.links(df, "other-pair", ids, wt["speedup"]) is None and rt.links(None, PAIR, ids, wt["speedup"]) is None
    # a cell with no id (an AR baseline) or no figure is empty; the others still link
    partial = rt.links(df, PAIR, [None, *ids[1:]], [0.76, *wt["speedup"][1:]])
    assert partial[0] is None and all(partial[1:])


def test_sweep_cells_pool_each_setting_and_leave_the_baseline_out():
    view = pd.DataFrame({"task_id": ["t1", "t2", "t3", "t4"], "pair": ["tiny"] * 4,
                         "target": ["../../runs/sweep-tiny/models/target"] * 4, "dtype": ["fp32"] * 4,
                         "temperature": [0.0] * 4, "setting": ["autoregressive", "autoregressive", "model · fixed:2",
                                                               "model · fixed:2"],
                         "policy": ["autoregressive", "autoregressive", "fixed:2", "fixed:2"], "task": ["qa", "rag"] * 2,
                         "prompts": [1] * 4, "new_tokens": [32] * 4, "speedup": [1.0, 1.0, 1.2, 4.5]})
    settings = pd.DataFrame({"setting": ["model · fixed:2", "autoregressive"], "policy": ["fixed:2", "autoregressive"],
                             "prompts": [2, 2], "new_tokens": [64, 64], "speedup": [1.5, 1.0]})
    per_task = view.drop(columns=["task_id"])
    df = reconcile.frame(rt.sweep_cells("app/example_sweep", view, "", settings, per_task, "summary.parquet"))
    pair = rt.sweep_pair("../../runs/sweep-tiny/models/target", "tiny")
    assert pair == "sweep-tiny" and rt.sweep_pair("Qwen/Qwen2.5-Coder-1.5B-Instruct", "q") == reconcile.pair_id(
        "Qwen/Qwen2.5-Coder-1.5B-Instruct")
    by = df.set_index("row")
    top = rt.sweep_id("app/example_sweep", "", "model · fixed:2")
    assert top == "sweep-app-example-sweep-model-fixed-2" and by.at[top, "kind"] == "sweep"
    assert (by.at[top, "speedup"], by.at[top, "prompts"], by.at[top, "tokens"], by.at[top, "basis"]) == (
        1.5, 2, 32, reconcile.WALL)
    assert by.at[rt.sweep_id("app/example_sweep", "", "model · fixed:2", "rag"), "speedup"] == 4.5
    assert by.at["sweep-app-example-sweep-t4", "kind"] == reconcile.CELL  # one trace's shard
    assert not df["what"].str.startswith("autoregressive").any() and len(df) == 1 + 2 + 2
    # a timed setting anyone can run: it may answer "how fast" for its pair
    assert reconcile.answer_row(df, pair)["row"] == top
    assert rt.slice_key(view, ["temperature"]) == "temperature-0.0" and rt.slice_key(view, []) == ""
