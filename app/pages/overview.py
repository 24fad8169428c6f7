"""Overview: what is loaded, grouped by target model and run, one card per trace with the engine's own
summary, and where to go next."""

import streamlit as st

from app import costaware_view, data, imported

st.title("speclab")
st.caption("Speculative decoding, one verify call at a time: replay traces, compare window policies, "
           "run the demo pair live.")

entries = data.all_traces()
pair, advised = costaware_view.pick_pair(entries)
if advised:  # the one answer per pair (engine.offline.advise; `python -m engine advise TRACE...`)
    st.markdown(f"**Which window?** {pair}: {costaware_view.advice_line(advised)}",
                help="From this pair's loaded decode traces: per-position acceptance × the traces' own costs. "
                     "The Windows page answers from a reference run, against the cost-optimal hindsight schedule.")
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
else:
    st.caption("Grouped by target model, then by run (same day, machine settings and prompts). Target calls and "
               "emitted per call do not depend on the hardware; tokens/s does, so it compares only within a run.")

titles = data.unique_titles(entries)
groups = data.run_groups(entries)
COLS = 3
for target, runs in groups.items():
    st.subheader(f"Target {target}")
    for run, labels in runs.items():
        first = entries[labels[0]].info
        machine = first["context"].split(" · ", 1)[-1]
        st.markdown(f"**Run · {first['created'][:10] or 'date not recorded'} · {machine}** · "
                    f"{len(first['prompts_key'])} prompts "
                    f"({', '.join(first['tasks']) or '—'})")
        for row in range(0, len(labels), COLS):
            for col, label in zip(st.columns(COLS), labels[row:row + COLS]):
                e = entries[label]
                s, info = e.info["summary"], e.info
                with col.container(border=True):
                    st.markdown(f"##### {titles[label]}")
                    tags = [":violet-badge[tiny-model demo]" if info["demo"] else "",
                            f":gray-badge[{e.origin}]", "" if info["complete"] else ":orange-badge[interrupted]",
                            f":blue-badge[imported: {imported.source_format(e.trace)}]" if imported.lacks(e.trace) else ""]
                    st.markdown(" ".join(t for t in tags if t))
                    st.caption(f"{e.label}")
                    a, b = st.columns(2)
                    a.metric("target calls", s["target_calls"], help="verify forwards of the target: hardware-free")
                    b.metric("emitted / call", f"{s['mean_emitted_per_call_incl_bonus']:.2f}",
                             help="incl. bonus token: hardware-free")
                    a.metric("acceptance", imported.pct(s["draft_acceptance_rate"] if info["draft"] else None),
                             help="accepted drafts ÷ drafted, excl. bonus"
                                  + (f" · {imported.missing(e.trace, ('window',))}" if imported.lacks(e.trace) else ""))
                    b.metric("tokens/s", f"{s['tokens_per_s']:.1f}",
                             help=f"wall clock on {info['context']}: compare only within one run")
                    st.caption(f"{s['requests']} prompts · {s['new_tokens']} tokens · tokens/s measured "
                               f"{info['context']}")

st.subheader("Where next")
LINKS = [("pages/replay.py", "Replay a trace", ":material/play_circle:"),
         ("pages/windows.py", "Window analysis", ":material/query_stats:"),
         ("pages/compare.py", "Compare two traces", ":material/compare_arrows:"),
         ("pages/live.py", "Decode live", ":material/bolt:"),
         ("pages/upload.py", "Upload traces", ":material/upload_file:"),
         ("pages/audit.py", "Lossless verifiers", ":material/verified:")]
for row in range(0, len(LINKS), 3):
    for col, (page, label, icon) in zip(st.columns(3), LINKS[row:row + 3]):
        col.page_link(page, label=label, icon=icon)
