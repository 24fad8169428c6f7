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

from app.fmt import words as field_words

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
    named = ", ".join(field_words(k) for k in gone)  # in words: no raw field names on a page
    return (f"Imported from {imp.get('format')}: the file does not record {named or 'token-level data'}, "
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
    e = spec[label]
    own, own_how = diagnose.resolve_c(e.trace)
    c = b.number_input("draft ÷ target cost ratio c", 0.0, 5.0, value=None, step=0.01, key="peer_diag_c",
                       placeholder=f"{own:.3g} ({own_how})" if own is not None else "enter c: no measured cost",
                       help="cost of drafting one token ÷ one target forward. Empty: the trace's own timings, "
                            "else the lab's measured costs of this pair; with neither, no window is recommended")
    try:
        d = diagnose.diagnose(e.trace, c)
    except ValueError as err:
        st.info(f"Nothing to diagnose: {err}")
        return
    line = _lack_line(e.trace)
    if line:
        st.caption(line)
    m = d["metrics"]
    al = d["acceptance_length"]
    cols = st.columns(5)
    cols[0].metric(diagnose.LENGTH_NAMES["token_weighted"], "—" if al["token_weighted"] is None
                   else f"{al['token_weighted']:.3f}",
                   help="1 + accepted ÷ drafting steps over the whole run, bonus included (AIPerf's "
                        "spec_decode_token_weighted_acceptance_length; vLLM's /metrics figure)")
    cols[1].metric(diagnose.LENGTH_NAMES["per_request_mean"], "—" if al["per_request_mean"] is None
                   else f"{al['per_request_mean']:.3f}",
                   help=f"each request's own 1 + accepted ÷ drafting steps, averaged over {al['requests']} requests "
                        "(AIPerf's spec_decode_acceptance_length, avg)")
    rate = m["draft_acceptance_rate"]
    cols[2].metric("acceptance rate", "—" if rate is None else f"{rate:.1%}", help="accepted ÷ drafted")
    cols[3].metric("fitted α", f"{d['alpha']:.3f}", help=d["alpha_fit"])
    if d["c"] is None:
        cols[4].metric("recommended window", "needs c", help=d["c_source"])
        st.info(d["c_source"])
    else:
        cols[4].metric(f"recommended window at c = {d['c']:.3g}",
                       f"{d['recommended_window']}{' (extrapolated)' if d['extrapolated'] else ''}",
                       help=f"flat-verify cost model at c = {d['c']:.3g} ({d['c_source']}); predicted "
                            f"{d['recommended_speedup']:.2f}× over autoregressive"
                            + (f"; the run never drafted more than {d['largest_window_run']}, so this is an "
                               f"extrapolation of the fitted curve" if d["extrapolated"] else ""))
    if m["per_position_rate"] is None:
        st.caption(f"Per-position acceptance: none drawn — {m['per_position_basis']}.")
    else:
        pos = pd.DataFrame({"position": range(1, len(m["per_position_rate"]) + 1),
                            "accepted (÷ drafting steps)": m["per_position_rate"],
                            "geometric fit α^i": d["geometric_per_position"][:len(m["per_position_rate"])]})
        if len(pos):
            st.line_chart(pos, x="position", y=["accepted (÷ drafting steps)", "geometric fit α^i"], height=220)
    bound = d["bound"]
    if bound:
        st.write(f"**Accepted-length bound** at c = {d['c']:.3g}: the oracle window reaches {bound['s_oracle']:.2f}× "
                 f"against {bound['s_best_fixed']:.2f}× for the best fixed γ = {bound['best_gamma']}, so no per-step "
                 f"window policy gains more than **{(bound['bound'] - 1):.1%}** over it on this run's accepted counts "
                 f"(counts that hit the run's window are censored: the true oracle may be higher).")
    elif d["c"] is not None:
        st.write(f"Accepted-length bound: {d['bound_note']}.")
    if m["per_position_rate"] is None and m.get("per_position_stated"):
        ps = m["per_position_stated"]
        st.caption(f"The engine's own per-position rates ({ps['basis']}, over {ps['steps']} steps), shown as "
                   f"stated totals, not drawn as per-step data: " + ", ".join(f"{r:.3f}" for r in ps["rates"]))
    ar_section(entries, label, e.trace)
    why_section(e.trace)
    beside_section(entries, label, e.trace)


def ar_section(entries: dict[str, Any], label: str, trace) -> None:
    """×AR against a loaded run of the same engine without speculation (an upload chosen as the baseline)."""
    from engine.interop.baseline import BaselineError, times_ar

    ars = [k for k, x in entries.items() if not x.info.get("draft") and x.trace.header.get("imported")
           and k != label]
    if not ars:
        st.markdown("×AR: upload the same engine's run without speculation (e.g. a vLLM file without "
                   "speculative-decoding metrics, a llama.cpp run without a draft) and choose it here as the baseline.")
        return
    pick = st.selectbox("AR baseline (same engine, no speculation)", ["—", *ars], key="peer_diag_ar")
    if pick == "—":
        return
    try:
        x = times_ar(trace, entries[pick].trace, pick)
    except BaselineError as err:
        st.warning(str(err))
        return
    if x["x_ar"] is None:
        st.info(f"×AR: none — {x['why_none']}.")
        return
    shared = (f"; over the {x['shared']['requests']} requests both runs share: {x['shared']['x_ar']:.2f}×"
              if x["shared"] else "")
    st.metric("×AR (measured)", f"{x['x_ar']:.2f}×", help=f"basis: {x['basis_text']}")
    st.caption(f"{x['tokens_per_s']:.2f} vs {x['ar_tokens_per_s']:.2f} tokens/s against {pick}; basis: "
               f"{x['basis_text']}{shared}.")


def why_section(trace) -> None:
    """Why acceptance is low: first rejections, tasks, the per-position drop (engine.interop.baseline)."""
    from engine.interop.baseline import why_low

    w = why_low(trace)
    st.markdown("**Why is acceptance low?**")
    fr = w["first_rejection"]
    if fr["shares"] is None:
        st.caption(f"First rejection: — {fr['why']}.")
    else:
        st.bar_chart(pd.DataFrame({"first rejected position": [k if k != "all" else "none" for k in fr["shares"]],
                                   "share of drafting steps": list(fr["shares"].values())}),
                     x="first rejected position", y="share of drafting steps", height=200)
    if w["by_task"]:
        st.dataframe(pd.DataFrame(w["by_task"]), hide_index=True)
    d = w["per_position"].get("largest_drop")
    if d:
        st.caption(f"Conditional acceptance falls most at position {d['position']}: {d['from']:.3f} → {d['to']:.3f}.")


def beside_section(entries: dict[str, Any], label: str, trace) -> None:
    """An imported run beside the lab's own loaded runs of the same pair (engine.interop.same_pair): the
    acceptance rate at each draft position, and where drafts are first rejected, overall and by task."""
    if not trace.header.get("imported"):
        return
    from app.peer_plots import position_lines
    from engine.interop.same_pair import beside_ours, position_rows, rejection_rows

    ours = {k: x.trace for k, x in entries.items() if k != label and not x.trace.header.get("imported")}
    b = beside_ours(trace, ours, label)
    st.markdown("**Beside the lab's own runs of the same pair**")
    if b["imported"] is None:
        st.caption(f"Nothing to compare: {b['why']}.")
        return
    st.caption(f"{b['pair'][0]} ← {b['pair'][1]} (model names compared without hub prefix, path, quantisation or "
               f"-Instruct): {len(b['ours'])} of the lab's runs. Acceptance rate at draft position i = drafting "
               f"steps that accepted at least i drafts ÷ drafting steps; a run stops at its largest window.")
    if b["imported"]["why"]:
        st.info(f"The imported run: {b['imported']['why']}. Its totals: mean acceptance length "
                f"{b['imported']['mean_acceptance_length']:.3f}"
                + ("" if b["imported"]["acceptance_rate"] is None else
                   f", acceptance rate {b['imported']['acceptance_rate']:.1%}") + ".")
    pos = pd.DataFrame(position_rows(b), columns=["run", "source", "position", "rate", "drop"])
    if len(pos):
        st.plotly_chart(position_lines(pos), theme=None, width="stretch", key="peer_diag_beside")
    rej = pd.DataFrame(rejection_rows(b))
    if len(rej):
        # "none" first: a long window's positions would push it off the table's right edge
        shares = (["none"] if "none" in rej else []) + sorted((c for c in rej.columns if c.isdigit()), key=int)
        rej = rej[["task", "run", "steps", "mean acceptance length", *shares]]
        st.caption("Where drafts are first rejected: share of drafting steps whose first rejected draft was at "
                   "each position (none = every draft accepted), for the whole run and for each task both sides "
                   "carry; — where the file cannot tell (totals only, or windows not known per step).")
        st.dataframe(rej, hide_index=True, placeholder="—",
                     column_config={c: st.column_config.NumberColumn(format="percent") for c in shares}
                     | {"mean acceptance length": st.column_config.NumberColumn(format="%.3f")})
    for name, why in b["skipped"]:
        st.caption(f"Left out: {name} ({why}).")


# ---------------------------------------------------------------- the peers benchmark (Compare page)

PEERS_ENV = "SPECLAB_PEERS_RESULTS"  # a folder of peers-*.json (default docs/results; tests point it elsewhere)
COLUMNS = {"engine": "engine", "weights": "weights", "config": "config", "tokens_per_s": "tokens/s",
           "speedup_vs_own_ar": "speedup vs own AR", "mean_acceptance_length": "mean acceptance length",
           "draft_acceptance_rate": "acceptance rate", "per_position_acceptance": "accepted per position",
           "same_output_as_ar": "same output as AR", "prompts": "runs"}


def peers_results(directory: str | None = None) -> dict[str, dict]:
    """peers-*.json in the folder: file name → result (unreadable files skipped, said by the caller)."""
    import json
    import os
    from pathlib import Path

    d = Path(directory or os.environ.get(PEERS_ENV) or Path(__file__).resolve().parents[1] / "docs" / "results")
    out = {}
    for p in sorted(d.glob("peers-*.json")):
        try:
            r = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(r, dict) and isinstance(r.get("rows"), list):
            out[p.name] = r
    return out


def peers_frame(result: dict) -> pd.DataFrame:
    """The result's rows in the table's words; per-position acceptance as one string ("0.78 0.61")."""
    df = pd.DataFrame(result["rows"])
    df = df[[k for k in COLUMNS if k in df]].rename(columns=COLUMNS)
    if "accepted per position" in df:
        df["accepted per position"] = [" ".join(f"{x:.2f}" for x in v) if isinstance(v, list) else "–"
                                       for v in df["accepted per position"]]
    return df


def target_line(result: dict) -> str:
    """One line per peer: speclab's best ÷ the peer's best speculative tokens/s."""
    out = []
    for peer, t in (result.get("target_check") or {}).items():
        if t:
            out.append(f"{t['ours']} {t['ours_tokens_per_s']:.2f} tokens/s = **{t['ratio']:.2f}×** {t['peer']} "
                       f"({t['peer_tokens_per_s']:.2f})")
    return " · ".join(out)


def peers_section(directory: str | None = None) -> None:
    """The newest peers result: table, speedup bars and the target line; nothing when there is none."""
    from app import downloads
    from app.peer_plots import speedup_bars

    results = peers_results(directory)
    if not results:
        return
    st.subheader("Peers: speclab beside vLLM and llama.cpp")
    name = st.selectbox("Peers result", list(results)[::-1], key="peers_result") if len(results) > 1 else next(
        iter(results))
    r = results[name]
    cfg = r.get("config", {})
    st.caption(f"{name} · {r.get('created', '?')[:10]} · {r.get('machine', '?')} · {cfg.get('prompts', '?')} prompts × "
               f"{cfg.get('max_new_tokens', '?')} tokens, greedy, interleaved per prompt · each engine's speedup is "
               f"over its own AR; the engines' weights differ where the weights column says so")
    df = peers_frame(r)
    from app import reconcile

    shown = df.copy()
    if "speedup vs own AR" in df and "engine" in df:  # each figure links to its row on the Speedups page
        pair = reconcile.pair_id(r.get("target"))
        ids = [reconcile.slug(f"peer-{reconcile._stem(name)}-{e}-{c}") for e, c in zip(df["engine"], df["config"])]
        shown["speedup vs own AR"] = [None if c == "ar" else reconcile.figure_link(pair, i, x)
                                      for i, c, x in zip(ids, df["config"], df["speedup vs own AR"])]
    downloads.table(shown, downloads.stem(name), "peers_table",
                    column_config={"tokens/s": st.column_config.NumberColumn(format="%.2f"),
                                   "speedup vs own AR": st.column_config.LinkColumn(
                                       display_text=reconcile.FIGURE_TEXT,
                                       help="over the engine's own AR (its AR row is the 1.00 baseline); opens the "
                                            "figure's row on the Speedups page"),
                                   "mean acceptance length": st.column_config.NumberColumn(format="%.3f"),
                                   "acceptance rate": st.column_config.NumberColumn(format="%.3f")})
    st.plotly_chart(speedup_bars(df), theme=None, width="stretch", key="peers_bars")
    line = target_line(r)
    if line:
        st.markdown(line)
