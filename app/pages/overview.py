"""Overview: the answer first (best method against AR, or why speculation loses here), the pages, then
every loaded trace as one sortable table of runs, per-position acceptance across runs, and the cards."""

import pandas as pd
import streamlit as st

from app import (acceptance, costaware_view, downloads, frames, overview_view, reconcile, reconcile_sources, runs,
                 share, site_map, traces)

st.title(site_map.heading("overview"))
entries = traces.all_traces()
df = runs.runs_frame(entries)
speedups = reconcile_sources.rows(entries)
best = runs.headline_label(df)
st.info(reconcile.linkify(runs.conclusion(df), speedups, list(dict.fromkeys(map(reconcile.pair_id, df["target"]))),
                          [reconcile.run_id(best)] if best else []), icon=":material/lightbulb:")
pair, advised = costaware_view.pick_pair(entries)
if advised:  # the one answer per pair (engine.offline.advise; `python -m engine advise TRACE...`)
    line = reconcile.linkify(costaware_view.advice_line(advised), speedups, reconcile.pair_id(pair.split(" ← ")[0]),
                             ["advice-overview"])
    st.markdown(f"**Which window?** {pair}: {line}",
                help="From this pair's loaded decode traces: per-position acceptance × the traces' own costs. "
                     "The Windows page answers from a reference run, against the cost-optimal hindsight schedule.")
overview_view.directory()

_, broken = traces.bundled()
for name, err in broken.items():
    st.error(f"Bundled trace skipped: {err}")
for name, err in st.session_state.get(traces.RESTORE_ERRORS, {}).items():
    st.warning(err)
n_up = sum(e.origin != "bundled" for e in entries.values())
st.subheader(f"{len(entries)} traces loaded")
no_ar = int((df["speculative"] & df["×AR"].isna()).sum())
st.caption(f"{len(entries) - n_up} bundled from `traces/`, {n_up} uploaded or recorded live. ×AR = tokens/s ÷ "
           "the autoregressive trace of the same run (same day, machine, dtype and prompts); each one links to its row "
           "on the Speedups page, beside every other figure for its pair. Target calls and emitted per call are "
           "hardware-free. Click a header to sort."
           + (" Runs marked demo come from random tiny models (`python -m app.make_demo_traces`): their numbers "
              "say nothing about real models." if df["demo"].any() else ""))
if not entries:
    st.stop()
notes = [share.adopt("all", "ov_all_runs", [True, False], "view", lambda v: v == "1", page="overview"),
         share.adopt("cards", "ov_cards", [True, False], "view", lambda v: v == "1", page="overview")]
show_all = no_ar == 0 or st.toggle(f"Also the {no_ar} speculative runs recorded without an autoregressive run of their "
                                   "own (no ×AR)", key="ov_all_runs",
                                   help="their tokens/s compare with nothing measured beside them")
view = df if show_all else df[~(df["speculative"] & df["×AR"].isna())]
order = view.assign(_x=view["×AR"].fillna(-1)).sort_values(["demo", "target", "_x"], ascending=[True, True, False],
                                                           kind="stable")
show = order.assign(Run=order["label"], Demo=order["demo"].map({True: "demo", False: ""}))[["Run", *runs.COLUMNS, "Demo"]]
show["×AR"] = [reconcile.figure_link(reconcile.pair_id(t), reconcile.run_id(k), x) if sp else None
               for t, k, x, sp in zip(order["target"], order["label"], order["×AR"], order["speculative"])]
downloads.table(show, "runs", "ov_runs", height=min(36 * (len(show) + 1) + 2, 420), column_config={
    "Run": st.column_config.TextColumn(pinned=True),
    "Emitted / call": st.column_config.NumberColumn(format="%.2f", help="incl. the bonus token: hardware-free"),
    "Acceptance": st.column_config.NumberColumn(format="percent", help="accepted drafts ÷ drafted, excl. bonus"),
    "Tokens/s": st.column_config.NumberColumn(format="%.1f", help="wall clock: compares only within one run"),
    "×AR": st.column_config.LinkColumn(display_text=reconcile.FIGURE_TEXT, pinned=True,
                                       help="tokens/s ÷ the same run's autoregressive tokens/s (an AR row is the "
                                            "1.00 baseline); opens its row on the Speedups page"),
    "Target calls": st.column_config.NumberColumn(help="verify forwards of the target: hardware-free")})

st.subheader("Per-position acceptance across runs")
titles = frames.unique_titles(entries)
spec = [k for k in entries if entries[k].info["draft"]]
notes.append(share.adopt_list("runs", "ov_pos_runs", spec, "runs", page="overview"))
if "ov_pos_runs" not in st.session_state:  # the default as session state: a linked view may have set it already
    st.session_state["ov_pos_runs"] = runs.pair_traces(df, runs.headline_label(df))
chosen = st.multiselect("Runs", spec, key="ov_pos_runs",
                        format_func=titles.get, help="by default the headline run and others of its pair and run")
pos = acceptance.frame(entries, chosen, titles)
if gone := acceptance.totals_only(entries, chosen):
    st.caption(f"No per-position line for {', '.join(titles.get(k, k) for k in gone)}: the file keeps totals only "
               f"(mean acceptance length and rate are exact; a per-position split would be invented).")
if len(pos):
    left, right = st.columns([3, 2])
    left.plotly_chart(acceptance.overlay(pos), theme=None, width="stretch", key="ov_pos_chart")
    with right:
        downloads.table(acceptance.summary(pos), "acceptance", "ov_pos_table", column_config={
            "mean acceptance length": st.column_config.NumberColumn(format="%.2f", help="1 + accepted ÷ drafting "
                                                                    "steps, bonus included (vLLM)"),
            "acceptance rate": st.column_config.NumberColumn(format="percent", help="accepted ÷ drafted")})
else:
    st.caption("Pick speculative runs to overlay their per-position acceptance.")

if st.toggle(f"Cards: one per trace ({len(entries)})", key="ov_cards",
             help="the engine's own summary of each trace, grouped by target and run"):
    overview_view.cards(entries)
share.publish(runs=",".join(chosen), all=int(bool(st.session_state.get("ov_all_runs"))),
              cards=int(bool(st.session_state.get("ov_cards"))))
if note := share.note(notes):
    st.caption(note)
