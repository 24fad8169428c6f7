"""Replay: one trace, one prompt, one verify call at a time — slider, prev/next and play/pause. The
trace, prompt and step live in the URL (app.share), so a copied link opens this same step."""

import pandas as pd
import streamlit as st

from app import (costaware_view, downloads, fmt, frames, imported, plots, reconcile, reconcile_sources, runs, share,
                 site_map, time_plots, token_texts, tokens, traces)

st.title(site_map.heading("replay"))
ss = st.session_state
entries = traces.all_traces()
if not entries:
    st.warning("No traces loaded: add files to `traces/` or use the Upload page.")
    st.stop()
head = st.container()


def _reset() -> None:
    ss["replay_step"], ss["replay_playing"] = 0, False


c1, c2 = st.columns([2, 3])
names = list(entries)
notes = [share.adopt("trace", "replay_trace", names, "trace", page="replay")]
if notes[0]:  # the linked trace is not here: its prompt and step mean nothing for the default one
    share.drop("replay", "request", "step")
traces.pick("replay_trace", names, traces.default_label(entries, readable=True))
titles = frames.unique_titles(entries)
label = c1.selectbox("Trace", names, key="replay_trace", on_change=_reset, format_func=lambda k: f"{titles[k]} · {k}")
e = entries[label]
reqs = frames.requests_frame(e.trace, e.steps).set_index("request_id")
notes.append(share.adopt("request", "replay_req", list(reqs.index), "prompt", int, page="replay"))
traces.pick("replay_req", list(reqs.index), reqs.index[0])
rid = c2.selectbox("Prompt", list(reqs.index), key="replay_req", on_change=_reset,
                   format_func=lambda r: f"#{r} · {reqs.at[r, 'task']} · {str(reqs.at[r, 'prompt_text'])[:80]}")
# the link names the trace on screen from here on, whatever the page shows below (an imported run stops early)
share.publish(trace=label, request=rid)
raw = [s for s in e.trace.steps if s["request_id"] == rid]
steps = e.steps[e.steps["request_id"] == rid]
pos = e.positions[e.positions["request_id"] == rid]
n = len(raw)
notes.append(share.adopt("step", "replay_step", list(range(n)), "step", int, page="replay"))
if note := share.note(notes):
    head.caption(f"⚠ {note}")
head.info(reconcile.linkify(runs.trace_conclusion(runs.runs_frame(entries), label), reconcile_sources.rows(entries),
                            reconcile.pair_id(runs.model_name(e.info["target"])), [reconcile.run_id(label)])
          + (f" This prompt: {n} target calls for {int(steps['emitted'].sum())} tokens." if n else ""),
          icon=":material/lightbulb:")
if not raw:
    st.warning("This prompt has no verify steps in the trace.")
    st.stop()
info = e.info
n_drafts = max(len(s.get("all_drafts") or [()]) for s in raw)  # K > 1: a multi-draft trace
st.caption(f"{info['pair']} · policy **{info['policy']}** · verifier {info['verifier']} · "
           f"{info['sampling']} · {n} verify calls · timed {info['context']}"
           + (f" · {n_drafts} drafts per step" if n_drafts > 1 else "")
           + (" · :violet-badge[tiny-model demo]" if info["demo"] else ""))
downloads.trace_buttons(e.trace, label, "replay")
if imported.replay_fallback(e, rid):  # an imported run: step counts, no tokens to replay
    if "step" in st.query_params:  # no step is shown: a copied link must not carry another trace's step
        del st.query_params["step"]
    st.stop()

tok = token_texts.entry_tokenizer(e)
ids = set(reqs.at[rid, "prompt_ids"]) | {t for s in raw for t in (*s["draft_tokens"], *s["emitted_tokens"])} | {
    t for s in raw for block in s.get("all_drafts") or [] for t in block}
texts = dict(zip(ids, token_texts.token_texts(tok, list(ids))))
if tok is None:
    st.caption(f"No tokenizer for target `{info['target']}` on this machine (`make models` installs it): tokens "
               "shown as ⟨id⟩.")
with st.expander("Prompt and final output (from the trace)"):
    st.text(reqs.at[rid, "prompt_text"] or " ".join(map(str, reqs.at[rid, "prompt_ids"])))
    st.text((e.trace.ends.get(rid) or {}).get("output_text") or "(no output_text recorded)")

ss.setdefault("replay_playing", False)
ss["replay_step"] = min(ss.get("replay_step", 0), n - 1)


def _move(d: int) -> None:
    ss["replay_step"] = max(0, min(n - 1, ss["replay_step"] + d))


def _toggle_play() -> None:
    ss["replay_playing"] = not ss["replay_playing"]
    if ss["replay_playing"] and ss["replay_step"] >= n - 1:
        ss["replay_step"] = 0


b = st.columns([1, 1, 1, 3])
b[0].button("Prev", icon=":material/skip_previous:", on_click=_move, args=(-1,), width="stretch")
b[1].button("Next", icon=":material/skip_next:", on_click=_move, args=(1,), width="stretch")
b[2].button("Pause" if ss["replay_playing"] else "Play", on_click=_toggle_play, key="replay_play", width="stretch",
            icon=":material/pause:" if ss["replay_playing"] else ":material/play_arrow:", type="primary")
speed = b[3].select_slider("Speed (steps per second)", options=[0.5, 1, 2, 4, 8], value=2, key="replay_speed")


def stop_reason(s: dict) -> str:
    stop = (s.get("policy_fields") or {}).get("stop")
    return s["stop_reason"] + (f" · {stop}" if stop else "")


def policy_fields(s: dict, k: int) -> None:
    fields = s.get("policy_fields") or {}
    fig = plots.policy_scores(fields, s["window"])
    if fig is not None and sum(len(t.x) for t in fig.data if t.mode != "lines" or len(t.x) > 2) > 1:
        st.plotly_chart(fig, theme=None, width="stretch", key="replay_scores")
    if (ufig := costaware_view.utilities_figure(fields, s["window"])) is not None:  # costaware's U(k)
        st.plotly_chart(ufig, theme=None, width="stretch", key="replay_utilities")
        st.markdown(costaware_view.caption(fields))
    records = {f: v for f, v in fields.items() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)}
    for name, v in records.items():  # e.g. PACER's per-block scores, thresholds and decisions
        st.caption(fmt.words(name))
        downloads.table(fmt.labelled(pd.DataFrame(v)), f"{downloads.stem(label)}-req{rid}-step{k}-{name}", f"replay_rec_{name}")
    if rest := {f: v for f, v in fields.items() if f not in records}:
        st.dataframe(pd.DataFrame({"field": [fmt.words(f) for f in rest], "value": [str(v) for v in rest.values()]}),
                     hide_index=True, width="stretch", placeholder=downloads.MISSING)
    if not fields:
        st.caption(f"The policy `{info['policy']}` logged nothing for this step.")


@st.fragment(run_every=1.0 / speed if ss["replay_playing"] else None)
def step_view() -> None:
    if ss["replay_playing"]:
        if ss["replay_step"] >= n - 1:
            ss["replay_playing"] = False
            st.rerun()  # whole page: redraw the Play button and stop the timer
        ss["replay_step"] += 1
    if n > 1:
        k = st.slider("Step", 0, n - 1, key="replay_step")
    else:
        k = 0
    share.publish(trace=label, request=rid, step=k)
    s = raw[k]
    earlier = [p for prev in raw[:k] for p in tokens.emitted_pieces(prev, texts)]
    st.markdown(f"**Step {k} of {n - 1}** — generated text so far; the outlined block is this step",
                help="colours: " + ", ".join(f"{k2} = {v}" for k2, v in tokens.FATE_HELP.items()))
    st.markdown(tokens.strip(earlier, tokens.step_pieces(s, texts)), unsafe_allow_html=True)
    st.markdown(tokens.legend(), unsafe_allow_html=True)
    src = (s.get("policy_fields") or {}).get("drafter")
    if isinstance(src, dict) and src.get("span"):  # a model-free draft: show where it was copied from
        context = list(reqs.at[rid, "prompt_ids"]) + [t for prev in raw[:k] for t in prev["emitted_tokens"]]
        a, b = src["span"]
        st.markdown(f"**Copied from the {src.get('source', 'context')}**: positions {a}–{b - 1} (highlighted), "
                    f"matched on the {src.get('match_len', '?')} tokens before them (dotted)")
        st.markdown(tokens.copy_source_html(context, src, texts), unsafe_allow_html=True)
    if s.get("all_drafts"):
        st.markdown(f"**{len(s['all_drafts'])} drafted blocks this step** — the verifier followed draft "
                    f"{s['chosen']} (★); the others (○, grey) were scored but not followed",
                    help="coloured by the verifier's outcome on the followed draft; each token's tooltip gives its "
                         "coin (block verification emits up to the last successful coin)")
        st.markdown(tokens.multi_draft_html(s, texts), unsafe_allow_html=True)

    m = st.columns(5)
    m[0].metric("window (drafted)", s["window"])
    m[1].metric("accepted", s["accepted"], help="excl. bonus")
    m[2].metric("emitted", s["emitted"], help="incl. correction/bonus")
    m[3].metric("draft ms", f"{s['t_draft_ms']:.2f}")
    m[4].metric("verify ms", f"{s['t_verify_ms']:.2f}")
    st.markdown(f"**Stop reason:** {stop_reason(s)}", help="why the drafter stopped drafting at this step")
    block = pos[pos["step"] == k].assign(text=lambda d: d["token"].map(texts))
    tabs = st.tabs(["Tokens per call", "Time per step", "Accept probability", "Drafted block", "Policy fields"])
    with tabs[0]:
        st.plotly_chart(plots.step_timeline(steps, cursor=k), theme=None, width="stretch", key="replay_timeline")
    with tabs[1]:
        st.plotly_chart(time_plots.step_time_bars(steps, cursor=k), theme=None, width="stretch", key="replay_time")
        ar = ar_steps()
        if ar is not None:
            st.plotly_chart(time_plots.two_lanes({"autoregressive": ar, f"{info['policy']}": steps}), theme=None,
                            width="stretch", key="replay_lanes")
            st.caption("The same prompt in this trace's autoregressive run (same day, machine, dtype), laid out on one "
                       "clock: striped = drafting, solid = verifying, grey = prefill.")
        else:
            st.caption("No autoregressive trace of this run holds this prompt, so there is no lane to set beside it.")
    with tabs[2]:
        if len(pos):
            st.plotly_chart(plots.position_heatmap(pos, cursor=k, steps=steps), theme=None, width="stretch",
                            key="replay_heatmap")
        else:
            st.caption("Nothing was drafted for this prompt.")
    with tabs[3]:
        if len(block):
            names = {"pos": "position", "text": "token text", "token": "token id", "fate": "fate",
                     "q_draft": "draft prob q", "p_target": "target prob p", "accept_prob": "accept prob min(1, p/q)",
                     "draft_entropy": "draft entropy"}
            downloads.table(block[list(names)].rename(columns=names), f"{downloads.stem(label)}-req{rid}-step{k}-block",
                            "replay_block", column_config={c: st.column_config.NumberColumn(format="%.3f")
                                                           for c in list(names.values())[4:]})
        else:
            st.caption("Nothing drafted: an autoregressive target call.")
    with tabs[4]:
        policy_fields(s, k)


def ar_steps():
    """This prompt's steps in the autoregressive trace of the same run (app.runs), or None."""
    ar = runs.runs_frame(entries).set_index("label").at[label, "ar"] if e.info["draft"] else None
    if not ar or ar not in entries:
        return None
    other = entries[ar]
    want = list(reqs.at[rid, "prompt_ids"])
    reqs_other = other.trace.requests.values() if isinstance(other.trace.requests, dict) else other.trace.requests
    match = [r["request_id"] for r in reqs_other if list(r.get("prompt_ids") or []) == want]
    return other.steps[other.steps["request_id"] == match[0]] if match else None


step_view()
if len(e.positions):
    with st.expander("Acceptance rate by block position, whole trace"):
        st.plotly_chart(plots.position_rate(e.positions), theme=None, width="stretch", key="replay_rate")
