"""Rows for every speedup cell of the tables the Windows and Sweeps pages show, and the links a table
column carries to them. Pure: frames in, rows (app.reconcile's shape) and link lists out.

A table cell links to a row that prints its figure (app.reconcile.figure_link). Each cell is a CELL row:
listed on the Speedups page only when a link points at it, so a table of 168 replayed policies adds no
clutter there, and never the figure a sentence elsewhere links to (reconcile.linkify skips CELL rows).

Row ids name what fixes the figure, so two views that print different figures never share an id:
    Windows   references × cost model × task × policy      win-ref-qwen-greedy-in-run-7-traces-qa-oracle-a
    Sweeps    sweep folder × facet slice × setting [× task]  sweep-example-sweep-model-fixed-2-qa
A view the Speedups page does not reconcile (a cost ratio set by hand, a sweep folder typed in) has ids
that are no row: `column` then leaves that column as plain figures rather than link to nothing.

Worked example: the Qwen references replayed at their in-run cost, task qa, oracle (a) at 1.0326× →
row `win-ref-qwen-greedy-in-run-7-traces-qa-oracle-a`, speedup 1.0326, replayed; the Windows page's
oracle table shows that cell as "1.03", a link to speedups?x=01.03&pair=qwen2-5-coder-1-5b&row=win-….
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from app import reconcile

# The oracle table's ×AR columns (engine.offline.analysis.oracle_ratio_table) -> the policy each prints;
# the best fixed window gets its own id (which γ it is differs by task and cost).
ORACLE_COLUMNS = {"s_best_fixed": "best-fixed", "s_oracle_a": "oracle:a", "s_oracle_b": "oracle:b",
                  "s_oracle_c": "oracle:c"}


def refs_key(labels: Iterable[str]) -> str:
    """The references part of an id: their file stems, sorted and joined ('ref-qwen-greedy'); the replay
    pools them, so their order changes no figure."""
    return "+".join(sorted(str(x).rsplit("/", 1)[-1].rsplit(".", 1)[0] for x in labels))


def win_cell_id(refs: str, cost: str, task: str, policy: str) -> str:
    return reconcile.slug(f"win-{refs}-{cost}-{task}-{policy}")


def window_cells(pair: str, refs: str, wt: pd.DataFrame, ot: pd.DataFrame | None, prompts: Any, tokens: Any,
                 dtype: str, source: str) -> list[dict]:
    """Every replayed speedup of the Windows tables: each policy × task of the window table (the
    simulated-policies table) and each ×AR column × task × cost of the oracle table."""
    out = []
    for r in wt.to_dict("records"):
        out.append(_window_row(pair, win_cell_id(refs, r["cost"], r["task"], r["policy"]), r["speedup"],
                               f"{r['policy']}, task {r['task']}, replayed ({r['cost']})", prompts, tokens, dtype,
                               source, "Windows (simulated policies)"))
    for r in ([] if ot is None else ot.to_dict("records")):
        for col, policy in ORACLE_COLUMNS.items():
            if col in r and r[col] is not None and not pd.isna(r[col]):
                what = f"best fixed γ = {int(r['best_gamma'])}" if policy == "best-fixed" else policy.replace(":", " (") + ")"
                out.append(_window_row(pair, win_cell_id(refs, r["cost"], r["task"], policy), r[col],
                                       f"{what}, task {r['task']}, replayed ({r['cost']})", prompts, tokens, dtype,
                                       source, "Windows (oracle ÷ best fixed)"))
    return out


def _window_row(pair, row, x, what, prompts, tokens, dtype, source, page) -> dict:
    return reconcile._row(pair, row, what, x, reconcile.CELL, reconcile.REPLAYED, dtype, "dense", prompts, tokens,
                          source, page)


def policy_ids(refs: str, wt: pd.DataFrame) -> list[str]:
    """The ids of the window table's rows, in order (the simulated-policies table)."""
    return [win_cell_id(refs, c, t, p) for c, t, p in zip(wt["cost"], wt["task"], wt["policy"])]


def oracle_ids(refs: str, ot: pd.DataFrame, col: str) -> list[str]:
    """The ids of one ×AR column of the oracle table, in order."""
    return [win_cell_id(refs, c, t, ORACLE_COLUMNS[col]) for c, t in zip(ot["cost"], ot["task"])]


# ---------------------------------------------------------------- Sweeps

AUTOREGRESSIVE = "autoregressive"


def sweep_pair(target: str | None, pair: str | None) -> str:
    """A sweep's pair id: its target model, unless the target is a local folder (the tiny example's
    '../../runs/sweep-tiny/models/target'), then the grid's own pair name."""
    t = str(target or "")
    local = t.startswith((".", "/", "~")) or t.count("/") > 1
    return reconcile.pair_id(f"sweep {pair or 'pair'}" if local or not t else t)


def slice_key(view: pd.DataFrame, facets: Sequence[str]) -> str:
    """The facet values that pick `view` out of its sweep ('' when the sweep has one slice)."""
    return "-".join(f"{f}-{view[f].iloc[0]}" for f in facets if f in view and len(view))


def sweep_id(folder: str, key: str, setting: str, task: str | None = None) -> str:
    return reconcile.slug("-".join(x for x in (f"sweep-{folder}", key, setting, task or "") if x))


def sweep_cells(folder: str, view: pd.DataFrame, key: str, settings: pd.DataFrame, per_task: pd.DataFrame,
                source: str) -> list[dict]:
    """One slice of a sweep: each setting pooled over tasks (the Sweeps page's first table, a row the
    Speedups page lists) and each setting × task (its second table) and each trace (its third) as
    CELL rows. Autoregressive rows are the 1.00 baseline, no row."""
    if view.empty:
        return []
    pair = sweep_pair(view["target"].iloc[0], view["pair"].iloc[0] if "pair" in view else None)
    dtype = reconcile.dtype_of(view["dtype"].iloc[0]) if "dtype" in view else "—"
    t = view["temperature"].iloc[0] if "temperature" in view else 0.0
    out = []
    for r in settings.to_dict("records"):
        if r["policy"] != AUTOREGRESSIVE and not pd.isna(r["speedup"]):
            out.append(_sweep_row(pair, sweep_id(folder, key, r["setting"]), r, f"{r['setting']}, all tasks (T = {t:g})",
                                  "sweep", dtype, source))
    for r in per_task.to_dict("records"):
        if r["policy"] != AUTOREGRESSIVE and not pd.isna(r["speedup"]):
            out.append(_sweep_row(pair, sweep_id(folder, key, r["setting"], r["task"]), r,
                                  f"{r['setting']}, task {r['task']} (T = {t:g})", reconcile.CELL, dtype, source))
    for r in view.to_dict("records"):
        if r["policy"] != AUTOREGRESSIVE and not pd.isna(r.get("speedup")):
            out.append(_sweep_row(pair, sweep_id(folder, "", r["task_id"]), r,
                                  f"{r.get('setting', r['policy'])}, task {r['task']}, trace {r['task_id']} (T = {t:g})",
                                  reconcile.CELL, dtype, source))
    return out


def _sweep_row(pair, row, r: Mapping[str, Any], what, kind, dtype, source) -> dict:
    prompts = r.get("prompts") or None
    per = r["new_tokens"] / prompts if prompts else None
    return reconcile._row(pair, row, what, r["speedup"], kind, reconcile.WALL, dtype, "dense", prompts, per, source,
                          "Sweeps")


# ---------------------------------------------------------------- a table column's links


def links(df: pd.DataFrame | None, pair: str, ids: Sequence[str | None], xs: Sequence[Any]) -> list[str | None] | None:
    """Each figure of a column as a link to its row (figure_link), None where a cell has no figure or no
    id (an AR baseline); None for the whole column when any figure is not a row of `pair` printing that
    figure — the column then stays plain numbers, never a link to a row the Speedups page lacks."""
    if df is None or df.empty:
        return None
    rows = df[df["pair"] == pair].set_index("row")["speedup"]
    out, linked = [], False
    for i, x in zip(ids, xs):
        if i is None or x is None or pd.isna(x):
            out.append(None)
            continue
        if i not in rows.index or f"{rows[i]:.2f}" != f"{float(x):.2f}":
            return None
        out.append(reconcile.figure_link(pair, i, float(x)))
        linked = True
    return out if linked else None


def column(frame: pd.DataFrame, col: str, cells: list[str | None] | None, help: str, fmt: str = "%.2f×"):
    """(frame, column config) for one speedup column: its cells as links to their rows when `links`
    found every one, else the plain figures as before."""
    import streamlit as st

    if cells is None:
        return frame, st.column_config.NumberColumn(format=fmt, help=help)
    return frame.assign(**{col: cells}), st.column_config.LinkColumn(
        display_text=reconcile.FIGURE_TEXT, help=f"{help}; opens its row on the Speedups page")
