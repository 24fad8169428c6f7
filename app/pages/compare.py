"""Compare: two traces over the same prompts, step-aligned — target calls and time saved or lost, and
per-position acceptance of both. A and B (and the prompt) live in the URL (app.share)."""

import pandas as pd
import streamlit as st

from app import (acceptance, downloads, fmt, frames, imported, plots, reconcile, reconcile_sources, runs, share,
                 site_map, token_texts, tokens, traces)

st.title(site_map.heading("compare"))
entries = traces.all_traces()
if len(entries) < 2:
    st.info("Comparing needs two traces: bundled ones in `traces/`, uploads, or Live runs.")
    st.stop()
head = st.container()
names = list(entries)
titles = frames.unique_titles(entries)
a_label = traces.default_label(entries)
notes = [share.adopt("a", "cmp_a", names, "trace", page="compare"),
         share.adopt("b", "cmp_b", names, "trace", page="compare")]
traces.pick("cmp_a", names, a_label)
c1, c2 = st.columns(2)
la = c1.selectbox("Trace A", names, key="cmp_a", format_func=titles.get)
base = entries[la].info
only = st.toggle("Only traces comparable with A (same target and draft, sampling and prompts)", True, key="cmp_only",
                 help="an autoregressive trace (no draft) counts as the baseline of any draft on its target")
fits = [k for k in names if k != la and not frames.comparable(base, entries[k].info)]
b_names = fits if only and fits else [k for k in names if k != la] or names
if only and not fits:
    c2.caption("No other trace matches A's pair, sampling and prompts: showing all traces.")
# B defaults to another policy on the same pair with the same sampling and prompts.
b_default = next((k for k in fits if entries[k].info["policy"] != base["policy"] and entries[k].info["draft"]),
                 fits[0] if fits else b_names[0])
if st.query_params.get("b") == st.session_state.get("cmp_b") and "cmp_b_linked_for" not in st.session_state:
    st.session_state["cmp_b_linked_for"] = la  # the link's own A: its B is kept even outside the filter
linked = st.session_state.get("cmp_b_linked_for") == la
if linked and st.session_state.get("cmp_b") in names and st.session_state.get("cmp_b") not in b_names:
    b_names = [st.session_state["cmp_b"], *b_names]  # a linked B outside the filter stays, until A changes
traces.pick("cmp_b", b_names, b_default)
lb = c2.selectbox("Trace B", b_names, key="cmp_b", format_func=titles.get)
A, B = entries[la], entries[lb]
if la == lb:
    st.warning("Pick two different traces.")
    st.stop()
mismatch = frames.comparable(A.info, B.info)
if mismatch:
    st.warning("These traces are not a like-for-like pair: " + "; ".join(mismatch) + ". Differences below mix "
               "the policy with those.")

sa, sb = A.info["summary"], B.info["summary"]
overview, by_pos, by_prompt, by_step = st.tabs(["Totals", "Acceptance by position", "Per prompt", "Step by step"])
overview.markdown("**Hardware-free** — the same on any machine")
m = overview.columns(4)
calls_d, calls_arrow = fmt.delta(sb["target_calls"] - sa["target_calls"], f"{abs(sb['target_calls'] - sa['target_calls'])}")
m[0].metric(f"target calls · B ({B.info['policy']})", sb["target_calls"], calls_d, delta_arrow=calls_arrow,
            delta_color="inverse", help=f"delta vs A ({A.info['policy']}): {sa['target_calls']} calls")
emit_d, emit_arrow = fmt.delta(sb["mean_emitted_per_call_incl_bonus"] - sa["mean_emitted_per_call_incl_bonus"])
m[1].metric("emitted per call · B", f"{sb['mean_emitted_per_call_incl_bonus']:.2f}", emit_d, delta_arrow=emit_arrow,
            help=f"incl. bonus; A: {sa['mean_emitted_per_call_incl_bonus']:.2f}")
acc_a, acc_b = sa["draft_acceptance_rate"], sb["draft_acceptance_rate"]  # None: an imported run without drafts
acc_d, acc_arrow = fmt.delta(None if None in (acc_a, acc_b) else (acc_b - acc_a) * 100,
                             None if None in (acc_a, acc_b) else f"{abs(acc_b - acc_a) * 100:.0f} pts")
m[2].metric("acceptance · B", imported.pct(acc_b), acc_d, delta_arrow=acc_arrow,
            help=f"accepted ÷ drafted, excl. bonus; A: {imported.pct(acc_a)}")
tok_d, tok_arrow = fmt.delta(sb["new_tokens"] - sa["new_tokens"], f"{abs(sb['new_tokens'] - sa['new_tokens'])}")
m[3].metric("tokens · B", sb["new_tokens"], tok_d, delta_arrow=tok_arrow, delta_color="off", help=f"A: {sa['new_tokens']}")
same_machine = A.info["context"].split(" · ", 1)[-1] == B.info["context"].split(" · ", 1)[-1]
same_run = same_machine and A.info["created"][:10] == B.info["created"][:10]
overview.markdown("**Wall clock** — depends on the machine and its load at the time")
m = overview.columns(4)
ms_d, ms_arrow = fmt.delta(sb["decode_ms"] - sa["decode_ms"], fmt.duration(abs(sb["decode_ms"] - sa["decode_ms"])))
m[0].metric("decode time · B", fmt.duration(sb["decode_ms"]), ms_d, delta_arrow=ms_arrow,
            delta_color="inverse" if same_run else "off",
            help=f"A: {fmt.duration(sa['decode_ms'])} (draft + verify + prefill)")
tps_d, tps_arrow = fmt.delta(sb["tokens_per_s"] - sa["tokens_per_s"], f"{abs(sb['tokens_per_s'] - sa['tokens_per_s']):.1f}")
m[1].metric("tokens/s · B", f"{sb['tokens_per_s']:.1f}", tps_d, delta_arrow=tps_arrow,
            delta_color="normal" if same_run else "off", help=f"A: {sa['tokens_per_s']:.1f}")
overview.caption(f"A timed {A.info['context']} · B timed {B.info['context']}"
           + ("" if same_run else " · **recorded on different days or machine settings: the wall-clock difference "
              "mixes hardware and load with the policy; trust the target calls above**"))
overview.caption(f"A = {la} ({A.info['pair']}, {A.info['sampling']}) · B = {lb} ({B.info['pair']}, {B.info['sampling']}) · "
           "deltas are B − A")

ra = frames.requests_frame(A.trace, A.steps)
rb = frames.requests_frame(B.trace, B.steps)
pairs = ra.assign(key=imported.prompt_keys(ra)).merge(rb.assign(key=imported.prompt_keys(rb)), on="key",
                                                     suffixes=("_a", "_b"))
share.publish(a=la, b=lb)
if note := share.note(notes):
    head.caption(f"⚠ {note}")
conclusion = runs.compare_conclusion(runs.runs_frame(entries), la, lb, (int(pairs["target_calls_a"].sum()),
                                     int(pairs["target_calls_b"].sum())), (float(pairs["decode_ms_a"].sum()),
                                     float(pairs["decode_ms_b"].sum())), len(pairs), same_run, mismatch)
head.info(reconcile.linkify(conclusion, reconcile_sources.rows(entries),
                            [reconcile.pair_id(runs.model_name(x.info["target"])) for x in (A, B)],
                            [reconcile.run_id(la), reconcile.run_id(lb)]), icon=":material/lightbulb:")
with by_pos:
    pos = acceptance.frame(entries, [la, lb], {la: f"A · {A.info['policy']}", lb: f"B · {B.info['policy']}"})
    if gone := acceptance.totals_only(entries, [la, lb]):
        st.caption(f"No per-position line for {' and '.join('A' if k == la else 'B' for k in gone)}: totals only "
                   f"in the file (a per-position split would be invented).")
    if len(pos):
        left, right = st.columns([3, 2])
        left.plotly_chart(acceptance.overlay(pos), theme=None, width="stretch", key="cmp_pos_chart")
        with right:
            downloads.table(acceptance.summary(pos), "compare-acceptance", "cmp_pos_table", column_config={
                "mean acceptance length": st.column_config.NumberColumn(format="%.2f"),
                "acceptance rate": st.column_config.NumberColumn(format="percent")})
    else:
        st.caption("Neither trace drafted anything: no per-position acceptance to show.")
if pairs.empty:
    by_prompt.warning("The two traces share no prompts (identical prompt token ids), so only the totals compare.")
    st.stop()
same = [imported.same_output(A.trace, B.trace, x, y) for x, y in zip(pairs["request_id_a"], pairs["request_id_b"])]
div, unit = fmt.time_unit([*pairs["decode_ms_a"], *pairs["decode_ms_b"]])  # s once a prompt takes a second
table = pd.DataFrame({"prompt": pairs["request_id_a"], "task": pairs["task_a"],
                      "calls A": pairs["target_calls_a"], "calls B": pairs["target_calls_b"],
                      "Δ calls": pairs["target_calls_b"] - pairs["target_calls_a"],
                      f"{unit} A": pairs["decode_ms_a"] / div, f"{unit} B": pairs["decode_ms_b"] / div,
                      f"Δ {unit}": (pairs["decode_ms_b"] - pairs["decode_ms_a"]) / div, "same output": same})
by_prompt.subheader(f"{len(pairs)} shared prompts")
downloads.table(table, f"compare-{downloads.stem(la)}-vs-{downloads.stem(lb)}", "cmp_table", where=by_prompt,
                column_config={k: st.column_config.NumberColumn(format="%.1f" if unit == "s" else "%.0f",
                                                                 help=f"decode time in {unit}")
                               for k in (f"{unit} A", f"{unit} B", f"Δ {unit}")})
if not all(same):
    by_prompt.caption("Outputs differ on some prompts: expected under sampling, or when the models/settings differ.")

notes = [share.adopt("request", "cmp_prompt", list(range(len(pairs))), "prompt", int, page="compare")]
row = by_step.selectbox("Prompt, step by step", range(len(pairs)), key="cmp_prompt",
                   format_func=lambda i: f"#{pairs['request_id_a'].iat[i]} · {pairs['task_a'].iat[i]} · "
                                         f"{str(pairs['prompt_text_a'].iat[i])[:80]}")
ida, idb = int(pairs["request_id_a"].iat[row]), int(pairs["request_id_b"].iat[row])
steps = {"A": [s for s in A.trace.steps if s["request_id"] == ida],
         "B": [s for s in B.trace.steps if s["request_id"] == idb]}
n = max(len(v) for v in steps.values())
k = by_step.slider("Step (same number of target calls on both sides)", 0, n - 1, 0, key="cmp_step") if n > 1 else 0
share.publish(request=row)
if note := share.note(notes):
    head.caption(f"⚠ {note}")
cols = by_step.columns(2)
for col, side, e in ((cols[0], "A", A), (cols[1], "B", B)):
    seq = steps[side]
    if imported.missing(e.trace, ("draft_tokens", "emitted_tokens")):  # imported: counts, no drafts to show
        col.info(f"**{side}** · {imported.missing(e.trace, ('draft_tokens', 'emitted_tokens'))} After "
                 f"{min(k + 1, len(seq))} target calls: {sum(s['emitted'] for s in seq[: k + 1])} tokens.")
        continue
    tok = token_texts.entry_tokenizer(e)
    ids = {t for s in seq for t in (*s["draft_tokens"], *s["emitted_tokens"])}
    texts = dict(zip(ids, token_texts.token_texts(tok, list(ids))))
    with col.container(border=True):
        st.markdown(f"**{side} · {e.info['policy']}**")
        if k < len(seq):
            earlier = [p for s in seq[:k] for p in tokens.emitted_pieces(s, texts)]
            st.markdown(tokens.strip(earlier, tokens.step_pieces(seq[k], texts)), unsafe_allow_html=True)
            done = sum(s["emitted"] for s in seq[: k + 1])
            st.caption(f"after {k + 1} target calls: {done} tokens · this step drafted {seq[k]['window']}, "
                       f"accepted {seq[k]['accepted']} (excl. bonus)")
        else:
            st.markdown(tokens.strip([p for s in seq for p in tokens.emitted_pieces(s, texts)]), unsafe_allow_html=True)
            st.caption(f"finished after {len(seq)} target calls")
by_step.markdown(tokens.legend(), unsafe_allow_html=True)
curves = {f"A · {A.info['policy']}": A.steps[A.steps["request_id"] == ida],
          f"B · {B.info['policy']}": B.steps[B.steps["request_id"] == idb]}
left, right = by_step.columns(2)
left.plotly_chart(plots.cumulative_compare(curves, cursor=k), theme=None, width="stretch", key="cmp_cum")
right.plotly_chart(plots.time_compare(curves), theme=None, width="stretch", key="cmp_time")

from app import peer_view  # noqa: E402  the peers benchmark (python -m engine peers), after the two traces

peer_view.peers_section()
