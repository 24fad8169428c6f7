"""Audit: is each verifier lossless? The exact-enumeration table of `python -m engine audit`, one
verdict per verifier computed from the CSV (app.audit_view.verdicts); then what each rule buys, the
multi-draft block efficiency of the paired grid on the realistic pair (app.multidraft_view)."""

import os
from pathlib import Path

import streamlit as st

from app import audit_view, downloads, multidraft_view, plots

st.title("Losslessness audit")
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
bad = table[table["verdict"] != "lossless"]
m = st.columns(3)
m[0].metric("verifiers", len(table))
m[1].metric("lossless", len(table) - len(bad))
m[2].metric("NOT lossless", len(bad))
for _, r in bad.iterrows():
    st.warning(f"**{r['verifier']}** is NOT lossless: lossless error {r['max_lossless_error']:.2e} on toy "
             f"'{r['worst_case']}' (V = {r['worst_vocab']}, γ = {r['worst_gamma']}, K = {r['worst_k']}).")
st.subheader("Verdict per verifier")
downloads.table(table, "audit-verdicts", "audit_verdicts",
                column_config={c: st.column_config.NumberColumn(format="%.1e")
                               for c in ("max_lossless_error", "max_first_token_error", "max_mass_error",
                                         "min_deficit", "max_fallback_mass")})
st.caption(f"lossless ⇔ lossless error and mass error ≤ {audit_view.TOL:g} on every row; worst_* = the toy "
           f"(case, V, γ, K) with the largest lossless error. Names marked 'near-miss' are deliberately wrong "
           f"variants kept in the audit for contrast.")
st.plotly_chart(plots.audit_errors(table, audit_view.TOL), theme=None, width="stretch", key="audit_plot")
with st.expander(f"Every row ({len(rows)})"):
    pick = st.selectbox("Verifier", ["all", *table["verifier"]], key="audit_pick")
    view = rows if pick == "all" else rows[rows["verifier"] == pick]
    downloads.table(view, f"audit-rows-{pick}", "audit_rows")

# Lossless is half the story: how many tokens each rule buys per target call on the realistic pair.
st.header("Multi-draft block efficiency on the realistic pair")
md_default = os.environ.get("SPECLAB_MULTIDRAFT_JSON") or "docs/results/multibench-qwen-paired-bf16.json"
md_path = st.text_input("Paired multi-draft result", md_default, key="md_json",
                        help="written by `python -m engine multibench --paired --out …` (python -m engine experiment run multibench-qwen-paired-bf16)")
try:
    md_rows, md_real, md_head = multidraft_view.load_paired(md_path if Path(md_path).is_absolute() else REPO / md_path)
except ValueError as e:
    st.info(str(e))
else:
    st.caption(f"{md_head['target']} ← {md_head['draft']} ({md_head['dtype']}), {md_head['prompts']} Spec-Bench dev "
               "prompts. Every (verifier, K) is judged on the same steps' drafts (paired verification: one real run "
               "drafting K = max blocks per step, driven by a lossless rule); BE = tokens emitted per target call, "
               "bonus included. The published SpecTr-GBV code is drawn but not lossless for K ≥ 2.")
    temps = sorted(md_rows["temperature"].unique())
    md_t = st.radio("Temperature", temps, index=len(temps) - 1, horizontal=True, key="md_temp",
                    format_func=lambda t: f"T = {t:g}")
    st.markdown(multidraft_view.headline(md_rows, md_t))
    st.plotly_chart(plots.multidraft_be(md_rows, md_t), theme=None, width="stretch", key="md_plot")
    with st.expander("Every cell (BE, modelled speedup) and the check against real runs"):
        cols = [c for c in ("temperature", "L", "label", "k", "be", "sr_model", "rule_ms_per_call") if c in md_rows]
        downloads.table(md_rows[md_rows["temperature"] == md_t][cols], f"multidraft-T{md_t:g}", "md_rows")
        if not md_real.empty:
            st.caption("Real runs of the same prompts (the driver and SD): BE and speedup vs autoregressive, prefill "
                       "excluded — the paired BE and the modelled speedup above should sit close to these.")
            downloads.table(md_real, "multidraft-real", "md_real")
