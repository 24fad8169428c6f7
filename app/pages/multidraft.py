"""Multi-draft: K draft blocks per step, one verifier that may follow any of them — block efficiency
per (verifier, K, L) from the paired grid on the realistic pair, with the wall-clock speedup beside it
(app.multidraft_view)."""

import os
from pathlib import Path

import streamlit as st

from app import downloads, multidraft_view, plots, reconcile, reconcile_sources, share, site_map, traces

st.title(site_map.heading("multidraft"))
REPO = Path(__file__).resolve().parents[2]
conclusion = st.container()
md_default = os.environ.get("SPECLAB_MULTIDRAFT_JSON") or "docs/results/multibench-qwen-paired-bf16.json"
with st.expander("Result file"):
    md_path = st.text_input("Paired multi-draft result", md_default, key="md_json",
                            help="written by `python -m engine multibench --paired --out …` (python -m engine "
                                 "experiment run multibench-qwen-paired-bf16); a relative path starts at the repository")
try:
    md_rows, md_real, md_head = multidraft_view.load_paired(md_path if Path(md_path).is_absolute() else REPO / md_path)
except ValueError as e:
    conclusion.info(str(e))
    md_rows = None
if md_rows is not None:
    temps = sorted(md_rows["temperature"].unique())
    notes = [share.adopt("t", "md_temp", temps, "temperature", float, page="multidraft")]
    traces.pick("md_temp", temps, temps[-1])
    md_t = st.radio("Temperature", temps, horizontal=True, key="md_temp", format_func=lambda t: f"T = {t:g}")
    share.publish(t=f"{md_t:g}")
    if note := share.note(notes):
        conclusion.caption(f"⚠ {note}")
    speedups = reconcile_sources.rows()
    conclusion.info(reconcile.linkify(f"{multidraft_view.headline(md_rows, md_t)} "
                                      f"{multidraft_view.wall_clock(md_rows, md_t)}", speedups,
                                      reconcile.pair_id(md_head["target"]),
                                      [r for r in speedups["row"] if r.startswith("md-")  # this temperature's
                                       and r.endswith("-" + reconcile.slug(f"t{md_t:g}"))]),
                    icon=":material/lightbulb:")
    st.caption(multidraft_view.DEFINITIONS)
    st.caption(f"{md_head['target']} ← {md_head['draft']} ({md_head['dtype']}), {md_head['prompts']} Spec-Bench dev "
               "prompts. Every (verifier, K) is judged on the same steps' drafts (paired verification: one real run "
               "drafting K = max blocks per step, driven by a lossless rule). The published SpecTr-GBV code is "
               "drawn but not lossless for K ≥ 2 (see the Audit page).")
    be_tab, clock_tab, cells_tab = st.tabs(["Block efficiency", "Wall clock", "Every cell"])
    with be_tab:
        st.plotly_chart(plots.multidraft_be(md_rows, md_t), theme=None, width="stretch", key="md_plot")
    with clock_tab:
        st.plotly_chart(plots.multidraft_be(md_rows, md_t, y="sr_model"), theme=None, width="stretch",
                        key="md_clock")
        st.caption("Modelled: BE × t_AR ÷ (t_draft + t_verify + t_rule + t_loop), every cost measured in the same "
                   "process; at K = 1 and K = max the costs are the real runs' own.")
    pair, known, name = reconcile.pair_id(md_head["target"]), set(speedups["row"]), Path(md_path).name

    def linked(ids, xs) -> list[str | None]:
        """Each speedup as a link to its row on the Speedups page (a file the page does not reconcile: none)."""
        return [reconcile.figure_link(pair, i, x) if i in known else None for i, x in zip(ids, xs)]

    def figure(ids, help: str):
        """The speedup column: links when its rows are reconciled, else plain figures."""
        if known & set(ids):
            return st.column_config.LinkColumn(display_text=reconcile.FIGURE_TEXT,
                                               help=f"{help}; opens its row on the Speedups page")
        return st.column_config.NumberColumn(format="%.2f×", help=help)

    with cells_tab:
        cols = [c for c in ("temperature", "L", "label", "k", "be", "sr_model", "rule_ms_per_call") if c in md_rows]
        names = {"temperature": "T", "label": "verifier", "k": "K", "be": "BE (tokens per call)",
                 "sr_model": "×AR (modelled)", "rule_ms_per_call": "rule ms per call"}
        shown = md_rows[md_rows["temperature"] == md_t]
        ids = [reconcile.md_cell_id(name, m, k, L, t) for m, k, L, t in
               zip(shown["method"], shown["k"], shown["L"], shown["temperature"])] if "sr_model" in shown else []
        cells = shown[cols].rename(columns=names)
        if ids and known & set(ids):
            cells["×AR (modelled)"] = linked(ids, shown["sr_model"])
        downloads.table(cells, f"multidraft-T{md_t:g}", "md_rows", column_config={
            "BE (tokens per call)": st.column_config.NumberColumn(format="%.2f"),
            "×AR (modelled)": figure(ids, "BE × t_AR ÷ the step's measured costs"),
            "rule ms per call": st.column_config.NumberColumn(format="%.3f")})
        if not md_real.empty:
            st.caption("Real runs of the same prompts (the driver and SD): BE and measured speedup vs autoregressive, "
                       "prefill excluded — the paired BE and the modelled speedup above should sit close to these.")
            ids = [reconcile.md_real_id(name, c, t) for c, t in zip(md_real["config"], md_real["temperature"])]
            real = md_real.rename(columns={"temperature": "T", "config": "run", "method": "verifier", "k": "K",
                                           "be": "BE (tokens per call)", "sr": "×AR (measured)"})
            if known & set(ids):
                real["×AR (measured)"] = linked(ids, md_real["sr"])
            downloads.table(real, "multidraft-real", "md_real",
                            column_config={"×AR (measured)": figure(ids, "tokens/s ÷ the same prompts' AR run")})
