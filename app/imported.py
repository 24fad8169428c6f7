"""Imported runs in the app (engine.interop): what their pages can show, and saying what they cannot.

A trace imported from a Spec-Bench answer file keeps per step only the emitted count (accept
length) and an equal share of its turn's wall time; its header's `imported.lacks` names the rest
(draft tokens, probabilities, windows, token ids). Pages call in here instead of failing on a null:

    lacks(trace)            the fields a trace does not have (empty for our own traces)
    missing(trace, need)    one line saying which of `need` are missing, or None
    pct(x)                  a rate as a percentage, '—' when unknown
    prompt_keys(frame)      how Compare pairs prompts: token ids, else the Spec-Bench question id
    same_output(a, b, …)    output ids when both have them, else output text
    replay_fallback(e, rid) Replay's view of a step sequence without tokens
    windows_section(...)    Windows: accepted-length distribution, spread and the renewal bound
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app.fmt import words as field_words

from engine.interop import bounds
from engine.trace.prompts import task_of
from engine.trace.format import Trace


def lacks(trace: Trace) -> list[str]:
    imp = trace.header.get("imported")
    return list(imp.get("lacks") or []) if isinstance(imp, dict) else []


def source_format(trace: Trace) -> str | None:
    imp = trace.header.get("imported")
    return imp.get("format") if isinstance(imp, dict) else None


def missing(trace: Trace, need: tuple[str, ...]) -> str | None:
    gone = [k for k in need if k in lacks(trace)]
    if not gone:
        return None
    return (f"This trace was imported from {source_format(trace) or 'another tool'}, whose file does not record "
            f"{', '.join(field_words(k) for k in gone)}.")


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def prompt_keys(frame: pd.DataFrame) -> pd.Series:
    """Pairing key per request: its prompt token ids; imported runs have none, so their Spec-Bench
    question id stands in (two answer files of one benchmark share question ids)."""
    return pd.Series([tuple(ids) if len(ids) else ("question", q)
                      for ids, q in zip(frame["prompt_ids"], frame["question_id"])], index=frame.index)


def same_output(a: Trace, b: Trace, ra: int, rb: int) -> bool:
    """Same output for two requests: token ids when both traces have them, else the output text."""
    ea, eb = a.ends.get(ra) or {}, b.ends.get(rb) or {}
    if "output_ids" in lacks(a) or "output_ids" in lacks(b):
        return ea.get("output_text") == eb.get("output_text")
    return ea.get("output_ids") == eb.get("output_ids")


def replay_fallback(entry, rid: int) -> bool:
    """Draw Replay's view for an imported trace without tokens; False (nothing drawn) otherwise."""
    note = missing(entry.trace, ("draft_tokens", "emitted_tokens"))
    if note is None:
        return False
    st.info(f"{note} Replay shows tokens, so for this prompt it lists what the file has: tokens emitted "
            f"per verify call (Spec-Bench's accept length) and each call's share of its turn's wall time.")
    s = entry.steps[entry.steps["request_id"] == rid]
    turn = [(x.get("policy_fields") or {}).get("turn") for x in entry.trace.steps if x["request_id"] == rid]
    st.dataframe(placeholder="—", data=pd.DataFrame({"step": s["step"].to_numpy(), "turn": turn, "emitted": s["emitted"].to_numpy(),
                               "accepted (excl. bonus)": s["accepted"].to_numpy(),
                               "ms (share of the turn)": s["t_ms"].round(3).to_numpy()}),
                 hide_index=True, width="stretch")
    return True


def accepted_frame(entries: dict[str, Any]) -> pd.DataFrame:
    """One row per verify call of the given entries: series (label), task, accepted, emitted."""
    rows = []
    for label, e in entries.items():
        cats = {rid: str(r.get("category") or "") for rid, r in e.trace.requests.items()}
        for s in e.trace.steps:
            if s["window"] == 0:  # a prefill call or a step that drafted nothing: not a draft's accepted run
                continue
            rows.append({"series": label, "task": task_of(cats.get(s["request_id"], "")),
                         "accepted": s["accepted"], "emitted": s["emitted"]})
    return pd.DataFrame(rows, columns=["series", "task", "accepted", "emitted"])


def windows_section(entries: dict[str, Any]) -> None:
    """The Windows page for imported traces: nothing is drawn when none is loaded."""
    from app import downloads, window_plots

    imp = {k: e for k, e in entries.items() if lacks(e.trace) and e.info.get("draft")}
    if not imp:
        return
    st.subheader("Imported runs: what accepted lengths alone support")
    st.caption("These traces (e.g. Spec-Bench answer files) record how many tokens each verify call emitted, "
               "nothing about the drafts. The replay analysis below needs every position's draft and target "
               "tokens, so here the bound is the **renewal-reward bound**: if each verify call drew its accepted "
               "run A independently from the observed accepted counts, and a window γ cost γ·c + 1 target "
               "forwards, fixed γ gives E[min(A, γ) + 1] / (γc + 1) and the oracle (window = A) "
               "E[A + 1] / (c·E[A] + 1). Their ratio is an **upper bound** on what any per-step window can gain "
               "over the best fixed window on this distribution. Counts that hit the run's own window are "
               "censored (A could be larger), so the true oracle may be higher; tree methods report the accepted "
               "path of a tree, read here as a chain.")
    a, b = st.columns([3, 2])
    label = a.selectbox("Imported trace", list(imp), key="win_imp_trace")
    from engine.interop import diagnose

    known, how = diagnose.resolve_c(imp[label].trace)
    given = b.number_input("draft ÷ target cost ratio c", 0.0, 5.0, value=None, step=0.01, key="win_imp_c",
                           placeholder=f"{known:.3g} ({how})" if known is not None else "enter c",
                           help="cost of drafting one token relative to one target forward (flat verify cost). "
                                "Empty: the trace's own timings, else the lab's measured costs of this pair")
    c, how = (given, "given") if given is not None else (known, how)
    if c is None:
        st.info(f"{how}. The figures below are priced by c, so none is drawn until it is given.")
        return
    if not diagnose.per_step_known(imp[label].trace):
        st.info("This file keeps totals only: the accepted-length distribution (and so the bound) would come "
                "from an even split of the totals, not from data. See the Upload page's diagnosis for its totals.")
        return
    frame = accepted_frame({label: imp[label]})
    var = bounds.variability(frame, c)
    row = var.iloc[0]
    st.caption(f"Basis: {imp[label].trace.header['imported'].get('format')} run {label!r}, its own accepted counts; "
               f"priced at c = {c:.3g} ({how}); speedups are modelled (renewal model), not measured.")
    m = st.columns(4)
    m[0].metric("mean emitted per call", f"{frame['emitted'].mean():.2f}", help="Spec-Bench's #Mean accepted tokens")
    m[1].metric(f"best fixed γ* at c = {c:.3g}", int(row["best_gamma"]), help="under the renewal model at this c")
    m[2].metric(f"modelled oracle at c = {c:.3g}", f"{row['s_oracle']:.2f}×",
                help="window = accepted run, nothing wasted; a model of this run's accepted counts, not a "
                     "measured speedup")
    m[3].metric("oracle ÷ best fixed (bound)", f"{row['bound']:.2f}×",
                help="upper bound on any per-step window's gain over the best fixed γ, renewal model")
    left, right = st.columns(2)
    left.plotly_chart(window_plots.accepted_distribution(frame, x="emitted", color="series"), theme=None,
                      key="win_imp_dist")
    right.plotly_chart(window_plots.speedup_vs_window(bounds.fixed_curve(frame["accepted"], c), "gamma", "speedup",
                                               oracle=float(row["s_oracle"])), theme=None, key="win_imp_curve")
    downloads.table(var, "imported-variability", "win_imp_table",
                    column_config={k: st.column_config.NumberColumn(format="%.3f") for k in var.columns
                                   if k not in ("task", "steps", "best_gamma")})
    st.caption("Per task: spread of the accepted count A (std, coefficient of variation, share of A = 0, "
               "quantiles) and the renewal bound. A wide spread is what a per-step window exploits; with a "
               "constant A the fixed γ = A already is the oracle.")
