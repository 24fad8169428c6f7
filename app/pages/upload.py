"""Upload: add JSONL or Parquet traces (or reference runs); every page then sees them, and they are kept
on disk (app.persist) so a reload or a later visit finds them again."""

import streamlit as st

from app import peer_view, persist, site_map, traces

st.title(site_map.heading("upload"))
restored = traces.restore_uploads()
head = st.empty()  # filled once this run's files are in
st.write(f"Takes **.jsonl** or **.parquet** traces (`python -m engine decode`, `python -m engine export`), "
         f"reference runs (.jsonl) for the Windows page, Spec-Bench answer files (.jsonl), and serving engines' "
         f"reports — vLLM, llama.cpp, SGLang as {', '.join(traces.PEER_SUFFIXES)} — imported on the way in. Limit "
         f"**{traces.MAX_UPLOAD_MB} MB** per file. A file that does not load gets one line saying why; any other "
         f"type (.csv, .txt of something else) is read and refused here with its reason, and so is a file over "
         f"{traces.MAX_UPLOAD_MB} MB (convert it to Parquet: `python -m engine export T.jsonl T.parquet`, about "
         f"3.5× smaller); past {traces.RECEIVE_MB} MB the browser stops it before it is sent.")
for err in restored.values():
    st.warning(err)
peer_view.formats_help()

# No `type=` filter: the browser would refuse a .csv with only a tooltip on a red chip; here it is read and
# refused with a line of text (app.traces.add_trace_bytes), like any other file that does not load.
files = st.file_uploader("Trace files", type=None,
                         accept_multiple_files=True, key="upload_files", max_upload_size=traces.RECEIVE_MB)
before = set(traces.uploads())
for f in files or []:
    if traces.was_removed(f.name, f.getvalue()):
        continue
    if f.size > traces.MAX_UPLOAD_MB * 1024 * 1024:  # before reading it into the session at all
        st.error(traces.size_message(f.name, f.size))
        continue
    bar = st.progress(0.0, text=f"Reading {f.name}…")

    def _tick(frac: float, text: str, bar=bar, name=f.name) -> None:
        bar.progress(min(max(frac, 0.0), 1.0), text=f"{name}: {text}")

    label, err = traces.add_trace_bytes(f.name, f.getvalue(), progress=_tick)
    bar.empty()
    e = traces.uploads().get(label) if label else None
    if err:
        st.error(err)
    elif e is not None and not e.info["complete"]:
        # An interrupted (killed) run: what was kept, in yellow, rather than a plain success.
        ends = len(e.trace.ends)
        st.warning(f"**{f.name}** is from an interrupted run: kept {len(e.trace.steps)} verify steps of "
                   f"{len(e.trace.requests)} prompts ({ends} finished) up to its last complete line. "
                   + " ".join(f"{w[0].upper()}{w[1:]}." for w in e.info["warnings"] if not w.startswith("no footer")))
    else:
        st.success(f"Loaded **{f.name}** — open it in Replay, Compare or Windows.")
    if e is not None and label not in before and e.info.get("draft"):
        st.session_state["peer_diag_trace"] = label  # the diagnosis below shows the file just added
    if not err:
        traces.keep_upload(f.name, f.getvalue())

ups = traces.uploads()
refs = st.session_state.get(traces.REF_UPLOADS, {})
head.info(f"**{len(ups)} uploaded traces and {len(refs)} reference runs** are loaded; uploads are kept on the "
          f"server's disk (its `{persist.ENV}` folder) and come back after a reload until you remove them below "
          f"(Remove deletes the kept copy too).",
          icon=":material/lightbulb:")
st.subheader(f"Kept uploads: {len(ups)} traces, {len(refs)} reference runs")
for label, e in list(ups.items()):
    s = e.info["summary"]
    a, b = st.columns([5, 1])
    a.markdown(f"**{label}** — {e.info['pair']} · `{e.info['policy']}` · {s['target_calls']} target calls · "
               f"{s['mean_emitted_per_call_incl_bonus']:.2f} emitted per call (incl. bonus)"
               + ("" if e.info["complete"] else " · :orange-badge[interrupted: no footer]"))
    for w in e.info["warnings"]:
        a.caption(f"warning: {w}")
    b.button("Remove", key=f"rm-{label}", on_click=traces.remove_upload, args=(label,))
for label, (ref, _) in list(refs.items()):
    a, b = st.columns([5, 1])
    a.markdown(f"**{label}** — reference run, {len(ref.requests)} prompts, mode {ref.header.get('mode')}")
    b.button("Remove", key=f"rm-{label}", on_click=traces.remove_upload, args=(label,))

peer_view.diagnosis_section(traces.all_traces())
