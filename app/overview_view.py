"""Overview's pieces that are not the headline: the page directory (one line per page, computed where
the data allows) and the per-trace cards, grouped by target and run, that open on demand."""

from __future__ import annotations

import streamlit as st

from app import frames, imported, site_map

def directory(lines: dict[str, str] | None = None) -> None:
    """Three columns of page links, each with one line (a computed one from `lines` when given)."""
    cols = st.columns(3)
    for i, p in enumerate(site_map.directory()):  # every page but this one (app/site_map.py)
        with cols[i % 3]:
            st.page_link(p.file, label=f"**{p.title}** — {(lines or {}).get(p.title, p.line)}", icon=p.icon)


def cards(entries: dict) -> None:
    """One card per trace with the engine's own summary, grouped by target model and run."""
    titles = frames.unique_titles(entries)
    st.caption("Grouped by target model, then by run (same day, machine settings and prompts). Target calls and "
               "emitted per call do not depend on the hardware; tokens/s does, so it compares only within a run.")
    for target, runs in frames.run_groups(entries).items():
        st.subheader(f"Target {target}")
        for run, labels in runs.items():
            first = entries[labels[0]].info
            machine = first["context"].split(" · ", 1)[-1]
            st.markdown(f"**Run · {first['created'][:10] or 'date not recorded'} · {machine}** · "
                        f"{len(first['prompts_key'])} prompts ({', '.join(first['tasks']) or '—'})")
            for row in range(0, len(labels), 3):
                for col, label in zip(st.columns(3), labels[row:row + 3]):
                    _card(col, entries[label], titles[label])


def _card(col, e, title: str) -> None:
    s, info = e.info["summary"], e.info
    with col.container(border=True):
        st.markdown(f"##### {title}")
        tags = [":violet-badge[tiny-model demo]" if info["demo"] else "", f":gray-badge[{e.origin}]",
                "" if info["complete"] else ":orange-badge[interrupted]",
                f":blue-badge[imported: {imported.source_format(e.trace)}]" if imported.lacks(e.trace) else ""]
        st.markdown(" ".join(t for t in tags if t))
        st.caption(f"{e.label}")
        a, b = st.columns(2)
        a.metric("target calls", s["target_calls"], help="verify forwards of the target: hardware-free")
        b.metric("emitted / call", f"{s['mean_emitted_per_call_incl_bonus']:.2f}", help="incl. bonus token: hardware-free")
        a.metric("acceptance", imported.pct(s["draft_acceptance_rate"] if info["draft"] else None),
                 help="accepted drafts ÷ drafted, excl. bonus"
                      + (f" · {imported.missing(e.trace, ('window',))}" if imported.lacks(e.trace) else ""))
        b.metric("tokens/s", f"{s['tokens_per_s']:.1f}", help=f"wall clock on {info['context']}: compare only within one run")
        st.caption(f"{s['requests']} prompts · {s['new_tokens']} tokens · tokens/s measured {info['context']}")
