"""Speedups: every speedup the app shows for a pair in one table (app.reconcile), with the one number
that answers "how fast is speculation here". Links from every page land here with ?pair=…&row=…."""

import streamlit as st

from app import downloads, reconcile, reconcile_sources, share, site_map, style

style.apply()  # again here: main's copy was missing on this page when the browser measured it (captions 3.89:1)
st.title(site_map.heading("speedups"))
df = reconcile_sources.rows()
if df.empty:
    st.info("No speedup to reconcile yet: load a speculative trace with its autoregressive run, or a bench result.")
    st.stop()
for err in df.attrs.get("errors", []):
    st.warning(err)
labels = reconcile_sources.pair_labels(df)
pairs = sorted(dict.fromkeys(df["pair"]), key=lambda p: (reconcile.answer_row(df, p) is None, "tiny" in p, p))
notes = [share.adopt("pair", "sp_pair", pairs, "pair", page="speedups")]
marked = st.query_params.get("row")
pair = st.selectbox("Pair", pairs, key="sp_pair", format_func=lambda p: labels.get(p, p))
st.info(reconcile.answer_sentence(df, pair, labels.get(pair, pair)), icon=":material/lightbulb:")
if note := share.note(notes):
    st.caption(note)
shown = reconcile.table(df, pair, marked)
if marked and marked not in set(df.loc[df["pair"] == pair, "row"]):
    st.caption(f"The link's row `{marked}` is not loaded for this pair; every row it has is below.")
    marked = None
elif marked:
    hit = shown.iloc[0]
    st.markdown(f"**The figure you followed:** {hit['what']} — **{hit['×AR']:.2f}× AR**, {hit['cost basis']}, "
                f"{hit['dtype']}, {hit['prompts × tokens']} ({hit['from']}).")
st.caption("Cost basis — wall clock: a real run's tokens/s ÷ its own autoregressive run's; modelled: measured "
           "per-call costs combined by a formula; replayed: recorded steps priced by a cost model. Oracles and "
           "ceilings are hindsight bounds, not speeds a policy reaches.")
downloads.table(shown, f"speedups-{pair}", "sp_table", height=min(36 * (len(shown) + 1) + 2, 560),
                column_config={"×AR": st.column_config.NumberColumn(format="%.2f×"),
                               "↗": st.column_config.TextColumn(width="small", pinned=True),
                               "what": st.column_config.TextColumn(pinned=True)})
share.publish(pair=pair, row=marked)
