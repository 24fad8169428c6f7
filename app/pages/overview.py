"""Overview: the answer first (best method against AR, or why speculation loses here), the pages, then
every loaded trace as one sortable table of runs, per-position acceptance across runs, and the cards."""

import streamlit as st

from app import acceptance, costaware_view, data, downloads, overview_view, runs

st.title("speclab")
entries = data.all_traces()
df = runs.runs_frame(entries)
st.info(runs.conclusion(df), icon=":material/lightbulb:")
pair, advised = costaware_view.pick_pair(entries)
if advised:  # the one answer per pair (engine.offline.advise; `python -m engine advise TRACE...`)
    st.markdown(f"**Which window?** {pair}: {costaware_view.advice_line(advised)}",
                help="From this pair's loaded decode traces: per-position acceptance × the traces' own costs. "
                     "The Windows page answers from a reference run, against the cost-optimal hindsight schedule.")
overview_view.directory()

_, broken = data.bundled()
for name, err in broken.items():
    st.error(f"Bundled trace skipped: {err}")
for name, err in st.session_state.get(data.RESTORE_ERRORS, {}).items():
    st.warning(err)
n_up = sum(e.origin != "bundled" for e in entries.values())
st.subheader(f"{len(entries)} traces loaded")
st.caption(f"{len(entries) - n_up} bundled from `traces/`, {n_up} uploaded or recorded live. ×AR = tokens/s ÷ "
           "the autoregressive trace of the same run (same day, machine, dtype and prompts); empty where that run "
           "has no AR trace. Target calls and emitted per call are hardware-free. Click a header to sort."
           + (" Runs marked demo come from random tiny models (`python -m app.make_demo_traces`): their numbers "
              "say nothing about real models." if df["demo"].any() else ""))
if not entries:
    st.stop()
order = df.assign(_x=df["×AR"].fillna(-1)).sort_values(["demo", "target", "_x"], ascending=[True, True, False],
                                                       kind="stable")
show = order.assign(Run=order["label"], Demo=order["demo"].map({True: "demo", False: ""}))[["Run", *runs.COLUMNS, "Demo"]]
downloads.table(show, "runs", "ov_runs", height=min(36 * (len(show) + 1) + 2, 420), column_config={
    "Emitted / call": st.column_config.NumberColumn(format="%.2f", help="incl. the bonus token: hardware-free"),
    "Acceptance": st.column_config.NumberColumn(format="percent", help="accepted drafts ÷ drafted, excl. bonus"),
    "Tokens/s": st.column_config.NumberColumn(format="%.1f", help="wall clock: compares only within one run"),
    "×AR": st.column_config.NumberColumn(format="%.2f×", help="tokens/s ÷ the same run's autoregressive tokens/s"),
    "Target calls": st.column_config.NumberColumn(help="verify forwards of the target: hardware-free")})

st.subheader("Per-position acceptance across runs")
titles = data.unique_titles(entries)
spec = [k for k in entries if entries[k].info["draft"]]
chosen = st.multiselect("Runs", spec, default=runs.pair_traces(df, runs.headline_label(df)), key="ov_pos_runs",
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
