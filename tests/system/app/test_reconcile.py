"""The reconciliation table (app.reconcile): rows from each source carry their basis, dtype, weights and
sample; one sentence per pair names the number that answers "how fast is speculation here"; linkify
turns every printed speedup into a link to its row. Pure: hand-made results, no Streamlit."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pandas as pd

from app import reconcile

PEERS = {"target": "qwen2.5-coder-1.5b", "config": {"prompts": 6, "max_new_tokens": 48},
         "rows": [{"engine": "speclab", "config": "ar", "weights": "bf16", "prompts": 18, "speedup_vs_own_ar": 1.0},
                  {"engine": "speclab", "config": "fixed:2", "weights": "bf16", "prompts": 18, "speedup_vs_own_ar": 1.102},
                  {"engine": "speclab", "config": "costaware", "weights": "bf16", "prompts": 18,
                   "speedup_vs_own_ar": 0.99},
                  {"engine": "vllm", "config": "draft:2", "weights": "bf16", "prompts": 18, "speedup_vs_own_ar": 1.3}]}
BENCH = {"target": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b", "config": {"prompts": 6, "max_new_tokens": 64},
         "command": "python -m engine bench --dtype bf16 --max-new-tokens 64",
         "rows": [{"task": "overall", "temperature": 0.0, "config": "oracle", "speedup_vs_ar": 1.486},
                  {"task": "overall", "temperature": 0.0, "config": "fixed:2", "speedup_vs_ar": 1.104},
                  {"task": "qa", "temperature": 0.0, "config": "fixed:2", "speedup_vs_ar": 2.0}]}


def qwen_rows() -> pd.DataFrame:
    pair = reconcile.pair_id("qwen2.5-coder-1.5b")
    wt = pd.DataFrame({"task": ["all"] * 4, "kind": ["fixed", "fixed", "oracle", "oracle"],
                       "policy": ["fixed:2", "fixed:3", "oracle:a", "oracle:c"], "gamma": [2, 3, None, None],
                       "speedup": [0.76, 0.78, 0.954, 1.23]})
    rows = (reconcile.peer_rows("peers-qwen.json", PEERS)
            + reconcile.bench_rows("bench-qwen-policies-bf16.json", BENCH, ["oracle", "fixed:2"])
            + reconcile.window_rows(pair, wt, "in-run", "ref-qwen-greedy.jsonl", 18, 128, "fp32")
            + [reconcile._row(pair, "run-qwen-fixed-2-t0.jsonl", "fixed:2 (draft model), decode trace", 0.6417,
                              "run", reconcile.WALL, "fp32", "dense", 6, 41, "qwen-fixed-2-t0.jsonl", "Overview")])
    return reconcile.frame(rows)


def test_every_row_says_basis_dtype_weights_sample_and_page():
    df = qwen_rows()
    assert set(df["basis"]) == {"wall clock", "replayed"}
    assert not df[["what", "basis", "dtype", "weights", "source", "page"]].isna().any().any()
    peer = df[df["row"] == "peer-peers-qwen-speclab-fixed-2"].iloc[0]
    assert (peer["speedup"], peer["dtype"], peer["weights"], peer["prompts"], peer["tokens"]) == (1.102, "bf16", "dense",
                                                                                                  18, 48)
    bench = df[df["kind"] == "oracle"].set_index("source")["speedup"]
    assert bench["bench-qwen-policies-bf16.json"] == 1.486  # the task row (qa) is not the overall figure
    assert (df["what"].str.contains("oracle (a)", regex=False)).sum() == 1 and len(df[df["kind"] == "replay"]) == 1
    assert "ar" not in set(df["what"])  # AR against itself is no speedup


def test_the_answer_is_a_timed_runnable_policy_on_the_largest_sample():
    df = qwen_rows()
    pair = reconcile.pair_id("qwen2.5-coder-1.5b")
    r = reconcile.answer_row(df, pair)
    # 18 × 48 (peers) beats 6 × 64 (bench) and 6 × 41 (fp32 traces); vLLM's 1.3× answers for vLLM, not here;
    # the oracles' 1.49× and 1.23× are bounds, not speeds.
    assert (r["what"], round(r["speedup"], 3)) == ("fixed:2 (speclab)", 1.102)
    text = reconcile.answer_sentence(df, pair, "qwen ← 0.5b")
    assert text.startswith(f"**qwen ← 0.5b: speculation runs at [1.10× AR]({reconcile.href(pair, r['row'])})**")
    assert "hindsight bounds" in text and "fp32 weights" in text and "replayed policies (0.78×)" in text
    # Without any timed row there is no answer, and the sentence says so.
    only_replay = df[df["basis"] == "replayed"]
    assert reconcile.answer_row(only_replay, pair) is None
    assert "no timed run" in reconcile.answer_sentence(only_replay, pair, "qwen")


def test_linkify_links_every_figure_that_is_a_row_and_prefers_the_named_row():
    df = qwen_rows()
    pair = reconcile.pair_id("qwen2.5-coder-1.5b")
    text = "fixed:2 runs at **0.64× AR**; oracle 0.95× AR; a figure 9.99× AR that is no row; ratio 1.22× overall."
    out = reconcile.linkify(text, df, pair)
    links = re.findall(r"\[(\d\.\d\d)× AR\]\(([^)]+)\)", out)
    assert [x for x, _ in links] == ["0.64", "0.95"]
    for x, url in links:
        q = parse_qs(urlparse(url).query)
        assert urlparse(url).path == reconcile.PAGE and q["pair"] == [pair]
        assert f"{df.loc[df['row'] == q['row'][0], 'speedup'].iloc[0]:.2f}" == x  # the row prints this figure
    assert "9.99× AR that is no row" in out and "1.22× overall" in out
    assert reconcile.linkify(out, df, pair) == out  # idempotent: a linked figure is not linked again
    # Two rows printing 1.10: the preferred one wins.
    twin = reconcile.frame([*df.to_dict("records"), {**df.iloc[0].to_dict(), "row": "twin", "speedup": 1.104}])
    first = reconcile.linkify("1.10× AR", twin, pair)
    assert "row=twin" not in first and "row=twin" in reconcile.linkify("1.10× AR", twin, pair, ["twin"])


def test_table_marks_the_linked_row_first_and_figure_links_end_in_the_figure():
    df = qwen_rows()
    pair = reconcile.pair_id("qwen2.5-coder-1.5b")
    marked = df.loc[df["kind"] == "oracle", "row"].iloc[0]
    t = reconcile.table(df, pair, marked)
    assert t.iloc[0]["row id"] == marked and t.iloc[0]["↗"] == "▶ linked" and (t["↗"] == "▶ linked").sum() == 1
    assert {"cost basis", "dtype", "weights path", "prompts × tokens", "from", "shown on"} <= set(t.columns)
    assert "18 prompts × 48 tokens" in set(t["prompts × tokens"])
    url = reconcile.figure_link(pair, "r1", 0.6417)
    assert re.search(reconcile.FIGURE_TEXT, url).group(1) == "0.64"
    assert reconcile.figure_link(pair, "r1", float("nan")) is None


def test_dtype_from_names_and_command_lines():
    assert reconcile.dtype_of("bfloat16") == "bf16" and reconcile.dtype_of("python -m engine x --dtype fp32") == "fp32"
    assert reconcile.dtype_of("bench-qwen-policies-bf16.json") == "bf16" and reconcile.dtype_of(None) == "—"


def test_every_multidraft_cell_is_a_row_listed_only_when_linked():
    """The Multi-draft page's grid links each cell to its own row: every cell is a row (CELL), the best
    cells keep their modelled rows, the Speedups table lists a cell only when a link points at it, and a
    figure in a sentence elsewhere never links to a cell."""
    grid = pd.DataFrame({"temperature": [0.0] * 3, "L": [4] * 3, "method": ["token", "rbv", "rbv"], "k": [1, 2, 4],
                         "label": ["SD", "RBV (ours)", "RBV (ours)"], "be": [2.0, 2.2, 2.4],
                         "sr_model": [1.10, 1.2345, 1.31]})
    real = pd.DataFrame({"temperature": [0.0], "config": ["rbv-k4"], "sr": [1.27], "prompts": [6]})
    head = {"target": "qwen2.5-coder-1.5b", "dtype": "bfloat16", "prompts": 6}
    df = reconcile.frame(reconcile.multidraft_rows("multibench-x.json", grid, real, head, ["rbv"]))
    pair = reconcile.pair_id("qwen2.5-coder-1.5b")
    ids = [reconcile.md_cell_id("multibench-x.json", m, k, 4, 0.0) for m, k in zip(grid["method"], grid["k"])]
    assert set(ids) <= set(df["row"]) and reconcile.md_real_id("multibench-x.json", "rbv-k4", 0.0) in set(df["row"])
    kinds = df.set_index("row")["kind"]
    assert list(kinds[ids]) == ["modelled", reconcile.CELL, "modelled"]  # best lossless (K = 4) and SD's best
    assert df.set_index("row").at[ids[1], "speedup"] == 1.2345  # the cell's own figure
    assert ids[1] not in set(reconcile.table(df, pair)["row id"])
    assert reconcile.table(df, pair, ids[1]).iloc[0]["row id"] == ids[1]
    assert "row=" not in reconcile.linkify("a figure 1.23× AR elsewhere", df, pair)
