"""Where the reconciliation table's rows come from: the same loaders and defaults each page uses, so a
row equals the figure its page prints by default. Streamlit-cached through app.traces and
app.result_files; the arithmetic lives in app.reconcile (pure)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app import analyses, reconcile, reconcile_tables, result_files, runs, traces
from app import window_story as story

MULTIDRAFT_JSON = "docs/results/multibench-qwen-paired-bf16.json"


def window_cost(refs: list, key: tuple):
    """The Windows page's default cost model: in-run when decode traces of the pair exist, else the
    references' measured timings, else a flat c (tiny demo references open on flat)."""
    from engine.offline import analysis

    in_run, _ = analyses.in_run_cost(refs, key)
    if all(r.header.get("demo") for r in refs):
        return float(analysis.CostModel().c)
    if in_run is not None:
        return in_run
    return "measured" if analysis.has_timings(refs) else float(analysis.CostModel().c)


def window_costs(cost, timed: bool) -> tuple:
    """The cost models of the Windows page's oracle table: the page's own first, then the defaults
    (measured only when the references carry timings)."""
    from engine.offline import analysis

    return tuple(dict.fromkeys([cost, *[x for x in analysis.DEFAULT_COSTS if x != "measured" or timed]]))


def _reference_rows() -> list[dict]:
    from engine.offline import advise, analysis

    # traces/ alone: an uploaded reference is evidence about its own run, shown on Windows when picked, never
    # a row here (nor, through the cache below, in another session's rows)
    refs_all, _ = traces.bundled_references()
    headers = {k: r.header for k, (r, _) in refs_all.items()}
    out = []
    for (target, draft), labels in story.group_by_pair(headers).items():
        refs = [refs_all[k][0] for k in labels]
        key = tuple(refs_all[k][1] for k in labels)
        pair = reconcile.pair_id(target)
        try:
            cost = window_cost(refs, key)
            wt = analyses.window_table(refs, key, cost)
        except Exception:  # a reference the analysis refuses is reported on Windows, not here
            continue
        cc = analyses.confidence_ceiling(refs, key, cost) if all(r.greedy for r in refs) else None
        h = refs[0].header
        prompts = sum(len(r.requests) for r in refs) or None
        dtype = reconcile.dtype_of((h.get("target") or {}).get("dtype"))
        out += reconcile.window_rows(pair, wt, wt["cost"].iloc[0], ", ".join(labels), prompts,
                                     h.get("max_new_tokens"), dtype, cc)
        ot = analyses.oracle_ratio_table(refs, key, window_costs(cost, analysis.has_timings(refs)))
        out += reconcile_tables.window_cells(pair, reconcile_tables.refs_key(labels), wt, ot, prompts,
                                             h.get("max_new_tokens"), dtype, ", ".join(labels))
        adv = advise.from_window_table(wt, story.pair_label((target, draft)), "measured", ceiling=cc)
        out += reconcile.advice_rows(pair, adv.speedup if adv.k else None, adv.k, ", ".join(labels),
                                     "replayed reference, page's cost model", "Windows", dtype)
        sweep = result_files.pacer_sweep_for(draft)
        model = result_files.pacer_ceiling_model(sweep)
        if result_files.pacer_models().get(model or "", ("", ""))[1] == draft:
            ceil = result_files.pacer_ceiling(sweep)
            if ceil.empty:
                continue
            at = story.pacer_position(ceil)
            o = ceil[(ceil["split"] == "all") & (ceil["f"] == 1.0) & (ceil["rule"] == "oracle")]["speedup"]
            out += reconcile.pacer_rows(pair, at, float(o.iloc[0]) if len(o) else None, Path(sweep).name, None, dtype)
    return out


def _bench_rows() -> list[dict]:
    benches = result_files.bench_results()
    seen, out = set(), []
    for b in benches.values():
        pair = (b.get("target"), b.get("draft"))
        if pair in seen:
            continue
        seen.add(pair)
        if found := story.find_bench(benches, *pair):
            real = story.bench_oracle_ratio(found[1])
            out += reconcile.bench_rows(found[0], found[1], ["oracle", f"fixed:{real['best_gamma']}"])
        if found := story.find_bench(benches, *pair, need=story.bench_pacer_standing):
            g = story.bench_pacer_standing(found[1])
            out += reconcile.bench_rows(found[0], found[1], [g["config"], f"fixed:{g['best_gamma']}", "oracle"])
            if (s := story.bench_pacer_standing(found[1], temperature=0.7)) is not None:
                out += reconcile.bench_rows(found[0], found[1], [s["config"], f"fixed:{s['best_gamma']}"], 0.7)
    return out


def multidraft_path() -> Path:
    """The paired multi-draft result the Multi-draft page opens on ($SPECLAB_MULTIDRAFT_JSON, else the bf16 one)."""
    import os

    path = os.environ.get("SPECLAB_MULTIDRAFT_JSON") or MULTIDRAFT_JSON
    return Path(path) if Path(path).is_absolute() else traces.REPO / path


def _multidraft_rows(p: Path) -> list[dict]:
    from app import multidraft_view

    try:
        rows, real, head = multidraft_view.load_paired(p)
    except ValueError:
        return []
    return reconcile.multidraft_rows(p.name, rows, real, head, multidraft_view.LOSSLESS_MULTI)


def _advice_rows(entries: dict) -> list[dict]:
    from app import costaware_view

    label, traces = costaware_view.pick_pair(entries)
    adv = costaware_view.advice(traces) if traces else None
    if adv is None or not adv.k:
        return []
    target = label.split(" ← ")[0]
    return reconcile.advice_rows(reconcile.pair_id(target), adv.speedup, adv.k, "loaded decode traces",
                                 f"from decode traces, {adv.units}", "Overview", "—")


# D-PACE's bundled results (app/pages/dpace.py): folder -> the target its speedups are over
DPACE = {"dpace-smollm2": "smollm2-135m", "dpace": "tiny byte-level target (B = 16)",
         "dpace-b8": "tiny byte-level target (B = 8)"}


def dpace_pair(folder: str) -> str:
    return reconcile.pair_id(DPACE.get(Path(folder).name, Path(folder).name))


def _dpace_rows() -> list[dict]:
    import json

    out = []
    for folder in DPACE:
        try:
            summary = json.loads((result_files.RESULTS / folder / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        out += reconcile.dpace_rows(folder, summary, dpace_pair(folder))
    return out


def sweep_folders() -> tuple[list[str], str]:
    """The Sweeps page's folders (runs/**/ with a summary, then the bundled example) and the one it opens
    on ($SPECLAB_SWEEP_DIR, else the first): the rows below are that folder's."""
    import os

    from engine.bench.sweep_grid import SUMMARY_NAME

    runs_dir, example = traces.REPO / "runs", traces.REPO / "app" / "example_sweep"
    found = sorted(str(p.parent) for p in runs_dir.glob(f"**/{SUMMARY_NAME}")) if runs_dir.is_dir() else []
    if (example / SUMMARY_NAME).is_file():
        found.append(str(example))
    default = os.environ.get("SPECLAB_SWEEP_DIR") or (found[0] if found else "")
    if default and default not in found:
        found.insert(0, default)
    return found, default


def sweep_name(folder: str) -> str:
    """A sweep folder as its ids name it: the path inside the repository, else the folder's name."""
    p = Path(folder).resolve()
    return str(p.relative_to(traces.REPO)) if p.is_relative_to(traces.REPO) else p.name


def sweep_rows(folder: str, stamp: float = 0.0) -> list[dict]:
    """Every speedup the Sweeps page shows for `folder`: per facet slice, each setting pooled over tasks,
    each setting × task and each trace (app.reconcile_tables.sweep_cells)."""
    from app import sweep_plots
    from engine.bench.sweep_grid import SUMMARY_NAME
    from engine.bench.sweep_summary import load_sweep_summary, with_settings

    if not folder or not (Path(folder) / SUMMARY_NAME).is_file():
        return []
    df = with_settings(load_sweep_summary(folder))
    facets = list(sweep_plots.facet_values(df))
    out = []
    for _, view in (df.groupby(facets) if facets else [((), df)]):
        out += reconcile_tables.sweep_cells(sweep_name(folder), view, reconcile_tables.slice_key(view, facets),
                                            sweep_plots.setting_table(view), sweep_plots.policy_task_table(view),
                                            f"{Path(folder).name}/{SUMMARY_NAME}")
    return out


@st.cache_data(max_entries=8, show_spinner=False)
def sweep_frame(folder: str, stamp: float = 0.0) -> pd.DataFrame:
    """`sweep_rows` as a frame: what the Sweeps page links to, without gathering every other page's rows."""
    return reconcile.frame(sweep_rows(folder, stamp))


def _peer_rows() -> list[dict]:
    from app import peer_view

    return [r for name, res in peer_view.peers_results().items() for r in reconcile.peer_rows(name, res)]


@st.cache_data(ttl=600, show_spinner="Collecting every speedup the app shows…")
def _static(multidraft: str, sweep: str = "", stamp: float = 0.0, refs: str = "") -> pd.DataFrame:
    """Rows from committed results (bench, peers, multi-draft, references, the default sweep): the same for
    every session. Keyed on the multi-draft file, the sweep folder (and its summary's time) and the
    references' folder, so pointing a page at another one brings its rows (and links)."""
    rows, errors = [], []
    parts = {"multidraft": lambda: _multidraft_rows(Path(multidraft)), "sweep": lambda: sweep_rows(sweep, stamp)}
    for part in (_bench_rows, _peer_rows, parts["multidraft"], _reference_rows, _dpace_rows, parts["sweep"]):
        try:
            rows += part()
        except Exception as e:  # one unreadable source must not hide the others' rows; the page says which
            name = next((k for k, f in parts.items() if f is part), part.__name__.strip("_").removesuffix("_rows"))
            errors.append(f"{name} results skipped ({type(e).__name__})")
    df = reconcile.frame(rows)
    df.attrs["errors"] = errors
    return df


def rows(entries: dict | None = None) -> pd.DataFrame:
    """Every speedup row: committed results plus this session's traces (bundled, uploaded, live)."""
    entries = traces.all_traces() if entries is None else entries
    df = runs.runs_frame(entries)
    live = reconcile.run_rows(df, entries) + _advice_rows(entries)
    from engine.bench.sweep_grid import SUMMARY_NAME

    sweep = sweep_folders()[1]
    summary = Path(sweep) / SUMMARY_NAME if sweep else None
    static = _static(str(multidraft_path()), sweep, summary.stat().st_mtime if summary and summary.is_file() else 0.0,
                     str(traces.trace_dir()))
    out = reconcile.frame([*static.to_dict("records"), *live])
    out.attrs["errors"] = static.attrs.get("errors", [])
    return out


def pair_labels(df: pd.DataFrame) -> dict[str, str]:
    """pair id -> 'target ← draft' (the draft model the most rows name, else the target alone)."""
    out = {}
    for pair in dict.fromkeys(df["pair"]):
        out[pair] = pair
    for folder, target in DPACE.items():
        if dpace_pair(folder) in out:
            out[dpace_pair(folder)] = f"{target} ← D-PACE block drafter"
    refs_all, _ = traces.bundled_references()
    for r, _ in refs_all.values():
        t, d = story.pair_of(r.header)
        out[reconcile.pair_id(t)] = story.pair_label((runs.model_name(t), d))
    for b in result_files.bench_results().values():
        pid = reconcile.pair_id(b.get("target"))
        if pid in out and out[pid] == pid and ":" not in str(b.get("draft")):
            out[pid] = f"{runs.model_name(b.get('target'))} ← {b.get('draft')}"
    sweep = sweep_folders()[1]
    if sweep and any(df.loc[df["page"] == "Sweeps", "pair"].isin([p for p, v in out.items() if v == p])):
        from engine.bench.sweep_summary import load_sweep_summary

        summ = load_sweep_summary(sweep)
        keys = [k for k in ("pair", "target", "draft") if k in summ.columns]  # a summary may name no draft model
        for vals, _ in (summ.groupby(keys) if {"pair", "target"} <= set(keys) else ()):
            pair, target, draft = (*vals, None)[:3]
            pid = reconcile_tables.sweep_pair(target, pair)
            if out.get(pid) == pid:  # a sweep of a local tiny pair: its grid's name and the models' folders
                models = Path(str(target)).name + (f" ← {Path(str(draft)).name}" if draft is not None else "")
                out[pid] = f"sweep pair “{pair}” ({models})"
    return out
