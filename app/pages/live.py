"""Live: one prompt, two window policies, decoded side by side with the demo pair as you watch."""

from pathlib import Path

import streamlit as st

from app import data, downloads, live, tokens
from engine.trace import TraceError, load_trace, summarize

st.title("Live")
ss = st.session_state
pair = live.get_pair()
if pair.real:
    st.caption(f"Demo pair: **{pair.label}** · both sides share the models; one session decodes at a time.")
else:
    st.warning(f"Running the **{pair.label}**: the SmolLM2 demo pair is not available here"
               + (f" ({pair.note})" if pair.note else "") + ". The page works the same; the tokens mean nothing.")

questions, from_spec_bench = live.prompt_choices()
CUSTOM = "type your own"
options = [CUSTOM] + [f"[{q.category}] {q.text[:90]}" for q in questions]


def _pick() -> None:
    i = options.index(ss["live_choice"])
    if i > 0:
        ss["live_text"] = questions[i - 1].text


if "live_text" not in ss:
    ss["live_text"] = questions[0].text if questions else ""
    ss["live_choice"] = options[1] if questions else CUSTOM
st.selectbox("Prompt", options, key="live_choice", on_change=_pick,
             help="Spec-Bench dev questions (../shared/spec_bench)" if from_spec_bench else
             "Spec-Bench questions not found next to the repository: the project's own example prompts, one per "
             "task type (engine.prompts.EXAMPLE_PROMPTS), or type a prompt")
if not from_spec_bench:
    st.caption(f"Spec-Bench questions not found (`{live.questions_file()}`): offering the project's own example "
               f"prompts, one per task type.")
text = st.text_area("Prompt text", key="live_text", height=110, max_chars=live.MAX_PROMPT_CHARS)
c = st.columns([2, 2, 1, 1])
spec_a = c[0].text_input("Policy A", "fixed:4", key="live_a", help="fixed:γ, heuristic, confidence:t, cumulative:t, "
                         "entropy:H (engine.policies), or autoregressive")
spec_b = c[1].text_input("Policy B", "heuristic", key="live_b")
max_new = c[2].number_input("Max new tokens", 1, live.MAX_NEW_TOKENS, 64, key="live_max")
temp = c[3].number_input("Temperature", 0.0, 2.0, 0.0, 0.1, key="live_temp", help="0 = greedy")
b = st.columns([1, 1, 4])
run = b[0].button("Decode", type="primary", key="live_run")
b[1].button("Stop", key="live_stop", help="stops both sides; what was decoded so far stays available as a trace")
st.markdown(tokens.legend(), unsafe_allow_html=True)
cols = dict(zip(live.SIDES, st.columns(2)))
panes = {s: cols[s].empty() for s in live.SIDES}
specs = {"A": spec_a, "B": spec_b}


def show(side: str, steps: list[dict], status: str, text_cache: dict) -> None:
    """Redraw one side: the text so far (last step's block outlined) and the engine's summary numbers."""
    ids = {t for d in steps for t in (*d["draft_tokens"], *d["emitted_tokens"])}
    texts = live.token_text(pair, text_cache, ids)
    s = summarize(steps)
    with panes[side].container(border=True):
        st.markdown(f"**{side} · {specs[side]}** · {status}")
        earlier = [p for d in steps[:-1] for p in tokens.emitted_pieces(d, texts)]
        st.markdown(tokens.strip(earlier, tokens.step_pieces(steps[-1], texts) if steps else None),
                    unsafe_allow_html=True)
        m = st.columns(3)
        m[0].metric("tokens/s", f"{s['tokens_per_s']:.1f}")
        m[1].metric("target calls", s["target_calls"])
        m[2].metric("emitted / call", f"{s['mean_emitted_per_call_incl_bonus']:.2f}", help="incl. bonus token")


if run:
    from engine.decode import DecodeConfig
    from engine.sampling import SamplingConfig

    ids, policies, err = live.check_inputs(pair, text, specs, int(max_new), float(temp))
    if err:
        st.error(err)
    else:
        cfg = DecodeConfig(max_new_tokens=int(max_new), sampling=SamplingConfig(temperature=float(temp)))
        caches = {s: {} for s in live.SIDES}
        out = live.session_dir()
        ss["live_result"] = {"paths": {}, "specs": dict(specs), "state": "running"}
        ss["live_result"]["paths"] = {s: str(p) for s, p in live.paths_for(out, specs).items()}
        try:
            live.run_pair(pair, ids, text, specs, policies, cfg, out,
                          lambda side, steps, done: show(side, steps, "done" if done else "decoding…", caches[side]))
            ss["live_result"]["state"] = "finished"
        except TimeoutError as e:
            ss["live_result"]["state"] = "busy"
            st.error(f"Not started: {e}. Try again in a moment.")

res = ss.get("live_result")
if res and res["state"] != "busy":
    if res["state"] == "running":  # the script was interrupted (Stop, or a setting changed) mid-decode
        res["state"] = "stopped"
    st.subheader("Last run" + (" (stopped early: traces have no footer)" if res["state"] == "stopped" else ""))
    for side, col in zip(live.SIDES, st.columns(2)):
        path = res["paths"].get(side)
        try:
            t = load_trace(path)
        except (TraceError, TypeError) as e:
            col.error(f"{side}: {e}")
            continue
        caches = {}
        if t.steps:  # redrawn from the trace file itself: what you download is what you saw
            show(side, t.steps, "done" if t.ends else "stopped", caches)
        name = Path(path).name
        raw = open(path, "rb").read()
        downloads.trace_buttons(t, name, f"live_{side}", where=col, jsonl=raw)
        if col.button(f"Open {side} in Replay", key=f"live_open_{side}"):
            label, err = data.add_trace_bytes(name, raw, origin="live")
            if err:
                col.error(err)
            else:
                ss["replay_trace"], ss["replay_step"] = label, 0
                st.switch_page("pages/replay.py")
