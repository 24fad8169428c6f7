"""Live: one prompt, two sides (each a drafter — the pair's draft model, lookup, suffix or a block drafter — and a window
policy) and an autoregressive baseline, decoded side by side as you watch. Every input is checked before
anything runs; the result panes say what actually ran, and where a model-free draft was copied from."""

import time
from pathlib import Path

import streamlit as st

from app import (downloads, frames, live_explain, live_inputs, live_models, live_queue, live_run, site_map, tokens,
                 traces)
from engine.trace.format import TraceError, load_trace, summarize

st.title(site_map.heading("live"))
live_head = st.empty()  # the last run's conclusion, or what this page does
live_head.info("Type a prompt and press **Decode**: two speculative settings and the autoregressive baseline decode "
               "it side by side on this machine, and each side's speedup over the baseline is measured as you watch.",
               icon=":material/lightbulb:")
ss = st.session_state
REDRAW_S = 0.2
queue = live_queue.model_queue()

# ---------------------------------------------------------------- inputs

pairs, hint = live_models.pair_options()
PAIR_LABELS = {k: f"{t} ← {d}" + (f" · {live_models.PAIR_WEIGHTS[k]} weights (CPU fast path)"
                                   if k in live_models.PAIR_WEIGHTS else "")
               for k, (t, d) in live_models.PAIRS.items()}
traces.pick("live_pair", pairs, pairs[0])
which = st.selectbox("Model pair", pairs, key="live_pair", format_func=PAIR_LABELS.get,
                     help="SmolLM2 is bundled; the Qwen2.5-Coder pair appears once `make models` installed it")
if hint:
    st.caption(hint)
loading = st.empty()
try:
    pair = live_models.get_pair_with_progress(which, lambda f, t: loading.progress(f, text=t))
    loading.empty()
except Exception as e:  # noqa: BLE001  (e.g. engine.models.provision.ModelNotInstalled: the message names the fix)
    st.error(f"Could not load {PAIR_LABELS[which]}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    st.stop()
if pair.real:
    st.caption(f"Pair: **{pair.label}** · all sessions share the models and take turns, first come first served.")
else:
    st.warning(f"Running the **{pair.label}**: the SmolLM2 demo pair is not available here"
               + (f" ({pair.note})" if pair.note else "") + ". The page works the same; the tokens mean nothing.")

questions, from_spec_bench = live_inputs.prompt_choices()
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
             "task type (engine.trace.prompts.EXAMPLE_PROMPTS), or type a prompt")
if not from_spec_bench:
    st.caption(f"Spec-Bench questions not found (`{live_inputs.questions_file()}`): offering the project's own example "
               f"prompts, one per task type.")
text = st.text_area("Prompt text", key="live_text", height=110, max_chars=live_inputs.MAX_PROMPT_CHARS)
prompt_err = st.empty()

names = live_inputs.policy_names()
DEFAULTS = {"A": "fixed:4", "B": "heuristic"}
draft_names = live_inputs.draft_names()
DRAFT_LABELS = {live_inputs.MODEL_DRAFT: f"draft model ({pair.draft_name})",
                live_inputs.CONTEXT_DRAFT: f"ctx: {pair.draft_name} reading a long prompt's first 64 and last W tokens",
                "lookup": "lookup: n-gram prompt lookup (no model)", "suffix": "suffix: suffix trie (no model)",
                live_inputs.BLOCK_DRAFT: "block: block drafter (one forward per block, on the target's features)",
                live_inputs.EAGLE_DRAFT: "eagle: EAGLE-style head (one layer on the target's features; Qwen pair)"}


def _fill(side: str) -> None:
    ss[f"live_{side.lower()}"] = live_inputs.preset(ss[f"live_{side.lower()}_kind"])


def _fill_draft(side: str) -> None:
    ss[f"live_{side.lower()}_draft"] = live_inputs.draft_preset(ss[f"live_{side.lower()}_draft_kind"])


c = st.columns([3, 3, 2, 2])
specs, drafts, err_at = {}, {}, {}
for col, side in zip(c, live_models.SIDES):
    dkey = f"live_{side.lower()}_draft"
    ss.setdefault(dkey, live_inputs.MODEL_DRAFT)
    kind = ss[dkey].strip().partition(":")[0].strip()
    if kind in draft_names:  # the choice follows an edited spec
        ss[f"{dkey}_kind"] = kind
    traces.pick(f"{dkey}_kind", draft_names, live_inputs.MODEL_DRAFT)
    col.selectbox(f"Draft {side}", draft_names, key=f"{dkey}_kind", on_change=_fill_draft, args=(side,),
                  format_func=lambda k: DRAFT_LABELS.get(k, k),
                  help="the pair's draft model (on the whole prompt, or on its first 64 and last W tokens: a long "
                       "prompt's draft prefill for some acceptance), a model-free drafter that copies from the prompt "
                       "and the output so far (no draft forward; pair it with matchlen to size windows by the match), "
                       "or a saved block drafter (one forward per block, on the target's hidden features)")
    drafts[side] = col.text_input(f"Draft {side} spec", key=dkey, help=live_inputs.DRAFT_SYNTAX)
    err_at[f"draft_{side}"] = col.empty()
    key = f"live_{side.lower()}"
    ss.setdefault(key, DEFAULTS[side])
    kind = ss[key].strip().partition(":")[0].strip()
    if kind in names:  # the choice follows an edited spec
        ss[f"{key}_kind"] = kind
    traces.pick(f"{key}_kind", names, DEFAULTS[side].partition(":")[0])
    col.selectbox(f"Policy {side}", names, key=f"{key}_kind", on_change=_fill, args=(side,),
                  help="every policy the engine accepts (engine.policies.base, PACER included); the spec below is "
                       "filled in and can be edited")
    specs[side] = col.text_input(f"Policy {side} spec", key=key,
                                 help="fixed:γ, heuristic[:γ0,max=N], confidence[:t][,trim=1], cumulative[:t], "
                                      "entropy[:H], pacer[:b=,t=,rho=][,trim=1], matchlen[:f,offset=,max=,p=] "
                                      "(model-free drafts), costaware[:max,c=,v=,probe=] (expected value vs in-run cost, K = 0 allowed), "
                                      "or autoregressive")
    err_at[side] = col.empty()
ss.setdefault("live_max", 64)
ss.setdefault("live_temp", 0.0)
max_new = c[2].number_input("Max new tokens", step=1, key="live_max",
                            help=f"1 to {live_inputs.MAX_NEW_TOKENS}")
err_at["max_new"] = c[2].empty()
temp = c[3].number_input("Temperature", step=0.1, format="%.2f", key="live_temp",
                         help=f"0 = greedy; at most {live_inputs.MAX_TEMPERATURE:g}")
err_at["temperature"] = c[3].empty()
err_at["prompt"] = prompt_err
baseline = st.checkbox("Also decode autoregressively (the baseline the speedups are measured against)", True,
                       key="live_baseline")

ids, policies, errors = live_inputs.validate(pair, text, specs, max_new, temp, drafts)
for f, msg in errors.items():  # each message names its field and sits right under it
    err_at[f].error(msg)
inputs = {"pair": which, "text": text, "A": specs["A"].strip(), "B": specs["B"].strip(),
          "draft_A": drafts["A"].strip(), "draft_B": drafts["B"].strip(), "max_new": max_new,
          "temperature": temp, "baseline": baseline}


def _take_ticket() -> None:
    """Decode's callback: the earliest moment of the run, so the line keeps the order of the clicks."""
    ss["live_ticket"] = queue.take()


b = st.columns([1, 1, 4])
run = b[0].button("Decode", type="primary", key="live_run", disabled=bool(errors), on_click=_take_ticket,
                  help="fix the fields marked in red first" if errors else None)
b[1].button("Stop", key="live_stop", help="stops all sides; what was decoded so far stays available as a trace")
ticket = ss.pop("live_ticket", None)
status = st.empty()
st.markdown(tokens.legend(), unsafe_allow_html=True)
stale = st.empty()
cols = dict(zip(live_models.SIDES, st.columns(2)))
panes = {s: cols[s].empty() for s in live_models.SIDES}
base_pane = st.empty()


def _tps(s: dict) -> float:
    return s["tokens_per_s"] if s["decode_ms"] else 0.0


def show_copy(steps: list[dict], prompt_ids: list[int], texts: dict) -> None:
    """Where a model-free side's latest copy came from, as on the Replay page (app.tokens.copy_source_html)."""
    found = live_run.last_copy(steps, prompt_ids)
    tally = live_run.copy_sources(steps)
    if found is None:
        if tally:
            st.caption("No copy yet: the context's last tokens never occurred earlier (autoregressive steps).")
        return
    k, context, src = found
    live_inputs.token_text(pair_of_run, texts, context)
    a, b = src["span"]
    where = {"prompt": "from the prompt", "output": "from the output", "none": "no match"}
    st.markdown(f"**Copied from the {src.get('source', 'context')}** (step {k}): positions {a}–{b - 1} "
                f"(highlighted), matched on the {src.get('match_len', '?')} tokens before them (dotted)",
                help="steps so far: " + ", ".join(f"{n} {where.get(w, w)}" for w, n in tally.items()))
    st.markdown(tokens.copy_source_html(context, src, texts), unsafe_allow_html=True)


def show(side: str, steps: list[dict], status_text: str, label: str, text_cache: dict, base: dict | None,
         prompt_ids: list[int]) -> None:
    """Redraw one side: what ran (label), the text so far (last step's block outlined), where a model-free
    draft was copied from, and its numbers; the speedup is over the autoregressive baseline of the same run
    (so far, while it decodes)."""
    ids_ = {t for d in steps for t in (*d["draft_tokens"], *d["emitted_tokens"])}
    texts = live_inputs.token_text(pair_of_run, text_cache, ids_)
    s = summarize(steps)
    with panes[side].container(border=True):
        st.markdown(f"**{side} · {label}** · {status_text}")
        earlier = [p for d in steps[:-1] for p in tokens.emitted_pieces(d, texts)]
        st.markdown(tokens.strip(earlier, tokens.step_pieces(steps[-1], texts) if steps else None),
                    unsafe_allow_html=True)
        show_copy(steps, prompt_ids, texts)
        m = st.columns(2) + st.columns(2)  # 2 × 2: four metrics do not fit one row of half a page
        m[0].metric("target calls", s["target_calls"], help="verify forwards of the target: hardware-free")
        m[1].metric("emitted / call", f"{s['mean_emitted_per_call_incl_bonus']:.2f}", help="incl. bonus token")
        m[2].metric("tokens/s", f"{_tps(s):.1f}", help="this machine, now: the sides decode in turn, one target "
                                                        "call each, so they share the same load")
        speed = _tps(s) / _tps(base) if base and _tps(base) else None
        m[3].metric("speedup", f"{speed:.2f}×" if speed else "—",
                    help="tokens/s ÷ the autoregressive baseline's tokens/s on the same prompt, in the same run")


def show_base(steps: list[dict], status_text: str) -> None:
    s = summarize(steps)
    with base_pane.container(border=True):
        st.markdown(f"**Autoregressive baseline** (target only, same prompt) · {status_text}")
        m = st.columns(4)
        m[0].metric("tokens/s", f"{_tps(s):.1f}")
        m[1].metric("tokens", s["new_tokens"])
        m[2].metric("target calls", s["target_calls"])
        m[3].metric("decode time (ms)", f"{s['decode_ms']:.0f}")


# ---------------------------------------------------------------- run

pair_of_run = pair
if ticket is not None and not run:  # a callback's ticket this run did not use: leave the line at once
    queue.release(ticket)
if run and ticket is not None:
    if errors:  # an edit and the click arrived together: the new values are invalid, so nothing runs
        queue.release(ticket)
        status.error("Not started: " + " ".join(errors.values()))
    else:
        from engine.decode import DecodeConfig
        from engine.core.sampling import SamplingConfig

        cfg = DecodeConfig(max_new_tokens=int(max_new), sampling=SamplingConfig(temperature=float(temp)))
        caches = {s: {} for s in live_models.SIDES}
        out = live_run.new_run_dir()
        run_specs = {s: inputs[s] for s in live_models.SIDES}
        run_drafts = {s: inputs[f"draft_{s}"] for s in live_models.SIDES}
        labels = {s: (live_inputs.AUTOREGRESSIVE if policies[s] is None else policies[s].spec +
                      (f" ← {run_drafts[s]}" if live_inputs.own_drafter(run_drafts[s])
                       or live_inputs.is_context(run_drafts[s]) else ""))
                  for s in live_models.SIDES}
        ss["live_result"] = {"paths": {s: str(p) for s, p in
                                       live_run.paths_for(out, live_run.run_labels(run_specs, run_drafts)).items()},
                             "inputs": dict(inputs), "state": "running"}
        if baseline:
            base_path = live_run.paths_for(out, {live_models.BASE: live_inputs.AUTOREGRESSIVE})[live_models.BASE]
            ss["live_result"]["paths"][live_models.BASE] = str(base_path)
        for s in live_models.SIDES:
            panes[s].empty()
        base_pane.empty()
        progress = {live_models.BASE: []}

        def _waiting(ahead: int) -> None:
            status.info(f"Waiting for the models (another session is decoding) · {ahead} "
                        f"{'run' if ahead == 1 else 'runs'} ahead of yours; yours starts when "
                        f"{'it finishes' if ahead == 1 else 'they finish'} (first come, first served).",
                        icon=":material/hourglass_top:")

        drawn: dict[str, float] = {}

        def _step(side: str, steps: list[dict], done: bool) -> None:
            now = time.monotonic()  # redraw a side at most 5× a second (the strip grows with every step)
            if not done and now - drawn.get(side, 0.0) < REDRAW_S:
                return
            drawn[side] = now
            if side == live_models.BASE:
                progress[live_models.BASE] = steps
                show_base(steps, "done" if done else "decoding…")
            else:
                show(side, steps, "done" if done else "decoding…", labels[side], caches[side],
                     summarize(progress[live_models.BASE]) if progress[live_models.BASE] else None, ids)

        if queue.position(ticket) > 0:
            _waiting(queue.position(ticket))
        try:
            live_run.run_pair(pair, ids, text, run_specs, policies, cfg, out, _step, queue=queue, ticket=ticket,
                          on_wait=_waiting, baseline=baseline, drafts=run_drafts)
            ss["live_result"]["state"] = "finished"
            status.empty()
        except TimeoutError as e:
            ss["live_result"] = None
            status.error(f"Not started: {e}. Try again in a moment.")

# ---------------------------------------------------------------- last run (from its trace files)

res = ss.get("live_result")
if res:
    if res["state"] == "running":  # the script was interrupted (Stop, or a setting changed) mid-decode
        res["state"] = "stopped"
    NAMES = {**live_inputs.FIELDS, "pair": "model pair", "text": "prompt", "baseline": "baseline"}
    changed = [NAMES[k] for k in ("pair", "text", "draft_A", "A", "draft_B", "B", "max_new", "temperature",
                                  "baseline")
               if res["inputs"].get(k) != inputs.get(k)]
    pair_of_run = live_models.get_pair(res["inputs"]["pair"]) if res["inputs"]["pair"] in pairs else pair
    head = "Last run" + (" (stopped early: traces have no footer)" if res["state"] == "stopped" else "")
    stale.markdown(f"#### {head}" + (f"  \n:orange-badge[stale] the inputs changed since this run "
                                     f"({', '.join(changed)}): the panes show the run as it was; press Decode to run "
                                     f"the new settings." if changed else ""))
    traces = {}
    if not any(Path(p).exists() for p in res["paths"].values()):
        st.caption("Stopped while waiting for the models: nothing ran.")
    for side, path in res["paths"].items():
        if not Path(path).exists():
            continue
        try:
            traces[side] = load_trace(path)
        except (TraceError, TypeError, OSError) as e:
            (cols[side] if side in cols else st).error(f"{side}: {e}")
    base = traces.get(live_models.BASE)
    base_sum = summarize(base.steps) if base is not None and base.steps else None
    if base is not None and base.steps:
        show_base(base.steps, "done" if base.ends else "stopped")
    for side in live_models.SIDES:
        t = traces.get(side)
        if t is None:
            continue
        h = t.header
        label = (f"{(h.get('policy') or {}).get('spec', '?')} · {(h.get('target') or {}).get('name')}"
                 f"{' ← ' + frames.draft_label(h) if frames.draft_label(h) else ''} · {frames.sampling_label(h)} · "
                 f"max {h.get('max_new_tokens')} tokens")
        if t.steps:  # redrawn from the trace file itself: what you download is what you saw
            show(side, t.steps, "done" if t.ends else "stopped", label, {}, base_sum,
                 t.requests[0]["prompt_ids"])
        col = cols[side]
        name = Path(res["paths"][side]).name
        raw = open(res["paths"][side], "rb").read()
        downloads.trace_buttons(t, name, f"live_{side}", where=col, jsonl=raw)
        if col.button(f"Open {side} in Replay", key=f"live_open_{side}"):
            # the baseline goes along: Replay's ×AR and its conclusion use the AR this run just measured
            label, err = live_explain.open_in_replay(res["paths"], side, live_models.BASE)
            if err:
                col.error(err)
            else:
                ss["replay_trace"], ss["replay_step"] = label, 0
                st.switch_page(site_map.file("replay"))
    st.caption(f"Timed on this machine at {frames.run_date(next(iter(traces.values())).header) if traces else '?'} UTC, "
               "the sides taking turns one target call at a time: compare them with each other (and the speedup), "
               "not with traces recorded elsewhere.")
    if base_sum and base_sum["tokens_per_s"]:
        said = [f"{side} ({(traces[side].header.get('policy') or {}).get('spec', '?')}) "
                f"{summarize(traces[side].steps)['tokens_per_s'] / base_sum['tokens_per_s']:.2f}× AR"
                for side in live_models.SIDES if side in traces and traces[side].steps]
        losses = [live_explain.loss_sentence(side, (traces[side].header.get("policy") or {}).get("spec", "?"),
                                             summarize(traces[side].steps), base_sum)
                  for side in live_models.SIDES if side in traces and traces[side].steps]
        if said:
            live_head.info(f"Last run, on this machine: {', '.join(said)} (tokens/s over the autoregressive baseline "
                           "of the same prompt" + ("; the run was interrupted" if res["state"] == "stopped" else "") + ")."
                           + "".join(f" {x}" for x in losses if x), icon=":material/lightbulb:")
