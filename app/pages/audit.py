"""Audit: is each verifier lossless? The exact-enumeration table of `python -m engine audit`, one
verdict per verifier computed from the CSV (app.audit_view.verdicts). What each rule buys per target
call is the Multi-draft page's."""

import os
from pathlib import Path

import streamlit as st

from app import audit_view, downloads, fmt, plots, site_map

st.title(site_map.heading("audit"))
head = st.container()
st.caption("One iteration of every verifier enumerated exactly (float64) on toy draft/target pairs: every K-tuple "
           "of draft blocks and every accept/reject branch of the real verifier function (`engine/bench/audit.py`, "
           "docs/audit.md). Lossless means the emitted tokens follow the target exactly.")

REPO = Path(__file__).resolve().parents[2]
default = os.environ.get("SPECLAB_AUDIT_CSV") or "docs/results/audit.csv"
path = st.text_input("Audit CSV", default, key="audit_csv",
                     help="written by `python -m engine audit`; a relative path starts at the repository")
try:
    rows = audit_view.load_audit(path if Path(path).is_absolute() else REPO / path)
except ValueError as e:
    st.error(str(e))
    st.stop()
table = audit_view.verdicts(rows)
head.info(audit_view.conclusion(table), icon=":material/lightbulb:")
bad = table[table["verdict"] != "lossless"]
m = st.columns(3)
m[0].metric("verifiers", len(table))
m[1].metric("lossless", len(table) - len(bad))
m[2].metric("NOT lossless", len(bad))
for _, r in bad.iterrows():
    st.warning(f"**{r['verifier']}** is NOT lossless: lossless error {r['max_lossless_error']:.2e} on toy "
             f"'{r['worst_case']}' (V = {r['worst_vocab']}, γ = {r['worst_gamma']}, K = {r['worst_k']}).")
st.subheader("Verdict per verifier")
downloads.table(fmt.labelled(table), "audit-verdicts", "audit_verdicts",
                column_config={fmt.words(c): st.column_config.NumberColumn(format="%.1e")
                               for c in ("max_lossless_error", "max_first_token_error", "max_mass_error",
                                         "min_deficit", "max_fallback_mass")})
st.caption(f"lossless ⇔ lossless error and mass error ≤ {audit_view.TOL:g} on every row; worst toy = the toy "
           f"(case, V, γ, K) with the largest lossless error. Names marked 'near-miss' are deliberately wrong "
           f"variants kept in the audit for contrast.")
st.plotly_chart(plots.audit_errors(table, audit_view.TOL), theme=None, width="stretch", key="audit_plot")
with st.expander(f"Every row ({len(rows)})"):
    pick = st.selectbox("Verifier", ["all", *table["verifier"]], key="audit_pick")
    view = rows if pick == "all" else rows[rows["verifier"] == pick]
    downloads.table(fmt.labelled(view), f"audit-rows-{pick}", "audit_rows")

st.page_link(site_map.file("multidraft"), label="What each lossless rule buys per target call: the Multi-draft page",
             icon=":material/account_tree:")
