"""A view in the URL: the page's trace / request / step as query parameters, so a copied link opens the
same view, and a link naming something that is not loaded opens the default view with one line saying so.

    adopt(param, key, options, what, parse)   before the widget is drawn: point session key `key` at
                                              the URL's value when it names an option; returns what it
                                              names when that is nothing loaded (for note), else None
    note(missing)                             one line for all of them
    publish(**params)                         after the widgets: the URL shows the current view

Only the first run of a page in a session adopts the URL (a later widget change must not be undone by the
URL it already rewrote); switching pages drops the parameters, as Streamlit's navigation does.
"""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st

ADOPTED = "share_adopted"  # session_state: the (page, param) pairs already taken from the URL


def adopt(param: str, key: str, options: list, what: str, parse: Callable[[str], Any] = str,
          page: str = "") -> str | None:
    raw = st.query_params.get(param)
    done = st.session_state.setdefault(ADOPTED, set())
    first = (page, param) not in done
    done.add((page, param))
    if raw is None or not first:
        return None
    try:
        value = parse(raw)
    except (TypeError, ValueError):
        value = None
    if value in options:
        st.session_state[key] = value
        return None
    return f"{what} `{raw}`"


def adopt_list(param: str, key: str, options: list, what: str, page: str = "") -> str | None:
    """adopt for a multiselect: the URL holds the picks comma-separated; the loaded ones are taken, the
    others named for `note`."""
    raw = st.query_params.get(param)
    done = st.session_state.setdefault(ADOPTED, set())
    first = (page, param) not in done
    done.add((page, param))
    if raw is None or not first:
        return None
    picks = [x for x in raw.split(",") if x]
    if any(x in options for x in picks):  # nothing loaded among them: the default view
        st.session_state[key] = [x for x in picks if x in options]
    gone = [x for x in picks if x not in options]
    return f"{what} `{', '.join(gone)}`" if gone else None


def note(missing: list[str | None]) -> str | None:
    """One line for every part of a link that names nothing loaded (adopt's returns), or None."""
    gone = [m for m in missing if m]
    if not gone:
        return None
    return (f"The link names {' and '.join(gone)}, which {'is' if len(gone) == 1 else 'are'} not loaded here: "
            "showing the default view.")


def drop(page: str, *params: str) -> None:
    """Ignore these parameters of the link (e.g. the step of a trace the link names but that is not loaded)."""
    st.session_state.setdefault(ADOPTED, set()).update((page, p) for p in params)


def publish(**params: Any) -> None:
    want = {k: str(v) for k, v in params.items() if v is not None}
    if {k: st.query_params.get(k) for k in want} != want:
        st.query_params.update(want)
