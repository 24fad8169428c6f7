"""Overview: what is loaded, one card per trace with the engine's own summary, and where to go next."""

import streamlit as st

from app import data, imported

st.title("speclab")
st.caption("Speculative decoding, one verify call at a time: replay traces, compare window policies, "
           "run the demo pair live.")

entries = data.all_traces()
_, broken = data.bundled()
n_up = sum(e.origin != "bundled" for e in entries.values())
st.write(f"**{len(entries)} traces loaded** — {len(entries) - n_up} bundled from `traces/`, "
         f"{n_up} uploaded or recorded in this session.")
for name, err in broken.items():
    st.error(f"Bundled trace skipped: {err}")
if any(e.info["demo"] for e in entries.values()):
    st.info("Traces marked **tiny-model demo** come from random 64-token Llama models "
            "(`python -m app.make_demo_traces`). They exercise every view; their numbers say nothing about "
            "real models. Real traces written by `python -m engine decode` into `traces/` appear here too.")
if not entries:
    st.warning("No traces yet: add some to `traces/`, upload one, or record one on the Live page.")

COLS = 3
items = list(entries.values())
for row in range(0, len(items), COLS):
    for col, e in zip(st.columns(COLS), items[row:row + COLS]):
        s, info = e.info["summary"], e.info
        with col.container(border=True):
            st.markdown(f"#### {info['policy']}")
            tags = [":violet-badge[tiny-model demo]" if info["demo"] else "",
                    f":gray-badge[{e.origin}]", "" if info["complete"] else ":orange-badge[interrupted]",
                    f":blue-badge[imported: {imported.source_format(e.trace)}]" if imported.lacks(e.trace) else ""]
            st.markdown(" ".join(t for t in tags if t))
            st.caption(f"{e.label}  \npair: {info['pair']}  \ntasks: {', '.join(info['tasks']) or '—'}")
            a, b = st.columns(2)
            a.metric("tokens/s", f"{s['tokens_per_s']:.1f}")
            b.metric("target calls", s["target_calls"])
            a.metric("emitted / call", f"{s['mean_emitted_per_call_incl_bonus']:.2f}", help="incl. bonus token")
            b.metric("acceptance", imported.pct(s["draft_acceptance_rate"]), help="accepted drafts ÷ drafted, excl. bonus"
                     + (f" · {imported.missing(e.trace, ('window',))}" if imported.lacks(e.trace) else ""))
            st.caption(f"mean emitted per call incl. bonus · acceptance rate excl. bonus · "
                       f"{s['requests']} prompts · {s['new_tokens']} tokens")

st.subheader("Where next")
c = st.columns(6)
c[0].page_link("pages/replay.py", label="Replay a trace step by step", icon=":material/play_circle:")
c[1].page_link("pages/windows.py", label="Window analysis (oracle vs fixed)", icon=":material/query_stats:")
c[2].page_link("pages/compare.py", label="Compare two policies", icon=":material/compare_arrows:")
c[3].page_link("pages/live.py", label="Decode live, side by side", icon=":material/bolt:")
c[4].page_link("pages/upload.py", label="Upload your traces", icon=":material/upload_file:")
c[5].page_link("pages/audit.py", label="Which verifiers are lossless", icon=":material/verified:")
