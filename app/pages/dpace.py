"""D-PACE: block-drafter training dashboard — weight heatmaps, τ curves, α sweep, from committed
training traces (docs/results/dpace*/, written by `python -m engine dpace report`)."""

from pathlib import Path

import pandas as pd
import streamlit as st

from app import downloads, reconcile, reconcile_sources, site_map
from app import dpace_plots as dp

st.title(site_map.heading("dpace"))
head = st.container()
st.caption("A DFlash-style block drafter trained with different position weightings: uniform CE, DFlash's "
           "exponential decay, D-PACE (adaptive, detached weights) and its ablations, under the same data, "
           "steps and seeds. Every number comes from the training traces and summary in the results directory.")

results = Path(__file__).resolve().parents[2] / "docs" / "results"
BUNDLED = {"SmolLM2-135M target, B = 16": results / "dpace-smollm2",
           "tiny byte-level target, B = 16": results / "dpace",
           "tiny byte-level target, B = 8": results / "dpace-b8"}
present = [k for k, v in BUNDLED.items() if (v / "traces").is_dir()] + ["other directory…"]
which = st.radio("Results", present, key="dpace_which", horizontal=True)
if which == "other directory…":
    directory = st.text_input("Results directory", str(results / "dpace"), key="dpace_dir")
else:
    directory = str(BUNDLED[which])
summary, traces, bad = dp.load_results(directory)
for name, err in bad.items():
    st.error(f"Trace skipped: {err}")
if not traces:
    st.info("No training traces found. Produce them with `python -m engine dpace sweep` then "
            "`python -m engine dpace report --out docs/results/dpace`.")
    st.stop()

logs, evals = dp.logs_frame(traces), dp.evals_frame(traces)
labels = list(dict.fromkeys(logs["label"]))
pick = dp.chosen(summary)
head.info(reconcile.linkify(dp.conclusion(summary), reconcile_sources.rows(), reconcile_sources.dpace_pair(directory))
          if summary.get("summary") else "No summary.json in this directory: the training "
          "curves below, without the seed-pooled comparison.", icon=":material/lightbulb:")
tab_sum, tab_w, tab_tau, tab_alpha = st.tabs(["τ per objective", "Position weights", "τ during training", "α sweep"])
if summary.get("summary"):
    tab_sum.plotly_chart(dp.objectives_bar(summary), theme=None, width="stretch")
    rows = [{"objective": r["label"], "seeds": len(r["seeds"]), "τ offline": r["tau_offline_mean"],
             "sd": r["tau_offline_std"], "Δ vs DFlash": r["diff_vs_dflash_offline"]["mean"],
             "95% CI lo": r["diff_vs_dflash_offline"]["t_lo"], "95% CI hi": r["diff_vs_dflash_offline"]["t_hi"],
             "Δ% vs DFlash": (r.get("rel_pct_vs_dflash_offline") or {}).get("mean"),
             "τ online": r["tau_online_mean"], "Δ online": r["diff_vs_dflash_online"]["mean"],
             "CPU speedup": r.get("speedup_cpu_mean")} for r in summary["summary"]]
    table = pd.DataFrame(rows).round(3)
    pair, folder = reconcile_sources.dpace_pair(directory), Path(directory).name
    ids = [reconcile.dpace_id(folder, r["label"]) for r in summary["summary"]]
    known = set(reconcile_sources.rows().query("pair == @pair")["row"])
    what = "the block drafter's CPU decode tokens/s ÷ the target's own AR"
    speed = st.column_config.NumberColumn(format="%.2f", help=what)
    if known & set(ids):  # each timed objective links to its row on the Speedups page
        table["CPU speedup"] = [reconcile.figure_link(pair, i, x) if i in known else None
                                for i, x in zip(ids, table["CPU speedup"])]
        speed = st.column_config.LinkColumn(display_text=reconcile.FIGURE_TEXT,
                                            help=f"{what}; opens its row on the Speedups page")
    downloads.table(table, "dpace-summary", "dpace_summary", where=tab_sum, column_config={"CPU speedup": speed})
    tab_sum.caption("— = not measured (one seed has no interval; only the chosen run was decoded online and timed).")
    tab_alpha.plotly_chart(dp.alpha_sweep(summary), theme=None, width="stretch")
else:
    tab_alpha.caption("No summary.json: no α sweep.")

c1, c2 = tab_w.columns([3, 1])
default = pick["label"] if pick and pick["label"] in labels else next(
    (lab for lab in labels if lab.startswith("dpace(")), labels[0])
label = c1.selectbox("Objective", labels, index=labels.index(default), key="dpace_label")
value = c2.radio("Value", ["weight_share", "q"], key="dpace_value", horizontal=True,
                 format_func={"weight_share": "share of the loss weight", "q": "drafter probability q"}.get)
tab_w.plotly_chart(dp.weight_heatmap(logs, label, value), theme=None, width="stretch")
tab_w.plotly_chart(dp.share_profiles(logs, label), theme=None, width="stretch")

chosen = tab_tau.multiselect("Objectives", labels, key="dpace_curves",
                             default=[x for x in labels if x == (pick or {}).get("label") or not x.startswith("dpace")])
tab_tau.plotly_chart(dp.tau_curves(evals, chosen or labels), theme=None, width="stretch")
