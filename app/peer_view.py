"""Serving engines' runs on the Upload page: the formats it takes, and the diagnosis of a run.

    formats_help()          one expander: every format the page imports, with a short example of each
    diagnosis_section(...)  for a chosen trace (imported or our own): the engines' figures recomputed,
                            per-position acceptance against the fitted geometric curve, the window the
                            cost model recommends and the accepted-length bound (engine.interop.diagnose)
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from engine.interop import diagnose, formats


def formats_help() -> None:
    with st.expander("Formats this page takes, with an example of each"):
        st.markdown("- **speclab traces**: `.jsonl` from `python -m engine decode`, `.parquet` from `python -m engine "
                    "export`\n- **Spec-Bench answer files** (`.jsonl`): imported on the way in\n"
                    + "\n".join(f"- **{fmt}**: {desc}" for fmt, desc in formats.DESCRIPTIONS.items()))
        for fmt, example in formats.EXAMPLES.items():
            st.caption(f"{fmt} (`python -m engine import {fmt} FILE -o T.jsonl` does the same on the command line)")
            st.code(example, language="text" if fmt == "vllm-prom" else "json", wrap_lines=True)
        st.caption("An imported run keeps what its engine reported (counts per step or per request, times where "
                   "given); its header lists what it lacks, and every page says so where that matters.")


def _lack_line(trace) -> str | None:
    imp = trace.header.get("imported") or {}
    if not imp:
        return None
    gone = [k for k in imp.get("lacks") or [] if k in ("draft_tokens", "q_draft", "p_target", "emitted_tokens",
                                                        "window", "t_verify_ms", diagnose.PER_STEP, "step order")]
    return (f"Imported from {imp.get('format')}: the file does not record {', '.join(gone) or 'token-level data'}, "
            f"so replaying tokens and probabilities is not possible; what follows uses the accepted counts only.")


def diagnosis_section(entries: dict[str, Any]) -> None:
    """Nothing is drawn unless some trace drafted anything."""
    spec = {k: e for k, e in entries.items() if e.info.get("draft")}
    if not spec:
        return
    st.subheader("Diagnose a run")
    imported = [k for k, e in spec.items() if e.trace.header.get("imported")]
    a, b = st.columns([3, 2])
    options = imported + [k for k in spec if k not in imported]
    label = a.selectbox("Trace", options, key="peer_diag_trace")
    c = b.number_input("draft ÷ target cost ratio c (0: from the trace's timings)", 0.0, 5.0, 0.0, 0.01,
                       key="peer_diag_c")
    e = spec[label]
    try:
        d = diagnose.diagnose(e.trace, c or None)
    except ValueError as err:
        st.info(f"Nothing to diagnose: {err}")
        return
    line = _lack_line(e.trace)
    if line:
        st.caption(line)
    m = d["metrics"]
    cols = st.columns(4)
    cols[0].metric("mean acceptance length", f"{m['mean_acceptance_length']:.3f}",
                   help="1 + accepted ÷ drafting steps, bonus included (vLLM's definition)")
    rate = m["draft_acceptance_rate"]
    cols[1].metric("acceptance rate", "—" if rate is None else f"{rate:.1%}", help="accepted ÷ drafted")
    cols[2].metric("fitted α", f"{d['alpha']:.3f}", help=d["alpha_fit"])
    cols[3].metric("recommended window", d["recommended_window"],
                   help=f"flat-verify cost model at c = {d['c']:.3g} ({d['c_source']}); "
                        f"predicted {d['recommended_speedup']:.2f}× over autoregressive")
    pos = pd.DataFrame({"position": range(1, len(m["per_position_rate"]) + 1),
                        "accepted (÷ drafting steps)": m["per_position_rate"],
                        "geometric fit α^i": d["geometric_per_position"]})
    if len(pos):
        st.line_chart(pos, x="position", y=["accepted (÷ drafting steps)", "geometric fit α^i"], height=220)
    bound = d["bound"]
    if bound:
        st.write(f"**Accepted-length bound** at c = {d['c']:.3g}: the oracle window reaches {bound['s_oracle']:.2f}× "
                 f"against {bound['s_best_fixed']:.2f}× for the best fixed γ = {bound['best_gamma']}, so no per-step "
                 f"window policy gains more than **{(bound['bound'] - 1):.1%}** over it on this run's accepted counts "
                 f"(counts that hit the run's window are censored: the true oracle may be higher).")
    else:
        st.write(f"Accepted-length bound: {d['bound_note']}.")
