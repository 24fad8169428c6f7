"""Where the app's traces come from — bundled files in traces/, uploads (kept on disk by app.persist),
Live runs and reference runs — and which one a page opens on.

Why one module: every page must see the same set of traces (an upload on the Upload page, or a
finished Live run, shows up in Replay and Compare), and every number a page shows must come from a
trace through `engine.trace.format`, turned into frames once (app.frames).

Bundled traces are cached with `st.cache_data` keyed on (path, mtime), so editing or adding a file
in traces/ is picked up on the next rerun. Uploads are parsed once and stored in
`st.session_state["uploads"]`, and their bytes kept in app.persist's folder so a new session (a reload)
loads them again. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import streamlit as st

from app.frames import Entry, make_entry
from app.token_texts import tokenizer_for
from engine.interop import formats, specbench
from engine.trace.format import TraceError, load_trace, loads_trace

REPO = Path(__file__).resolve().parent.parent
TRACES_ENV = "SPECLAB_TRACES"  # another folder of bundled traces (tests; a lab's own sweep directory)
TRACE_SUFFIXES = (".jsonl", ".parquet")
PEER_SUFFIXES = (".json", ".prom", ".txt", ".log")  # serving engines' reports (engine.interop.formats), besides .jsonl
# Also set as server.maxUploadSize in .streamlit/config.toml; the page checks it itself too, because
# AppTest and other launch paths do not read that file. 50 MB holds ~100k steps: a large sweep.
MAX_UPLOAD_MB = 50
# What the server takes in (server.maxUploadSize, the uploader's own limit): four times the limit, so a file
# over it reaches the page and is refused with a line of text saying how to shrink it. A browser refuses a
# file past its uploader's limit with only a tooltip on a red chip; that now happens past 200 MB only.
RECEIVE_MB = 4 * MAX_UPLOAD_MB
UPLOADS = "uploads"  # session_state key: label -> Entry


REFERENCE_SCHEMA = "speclab.reference"  # engine.offline.reference files share traces/ and are told apart by schema
REF_UPLOADS = "uploaded_refs"  # session_state key: label -> (Reference, digest)


def schema_of(head: bytes) -> str | None:
    """The `schema` of a JSONL file's first line, without parsing the rest (None if unreadable)."""
    import json

    try:
        d = json.loads(head.split(b"\n", 1)[0])
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: a line nested thousands deep
        return None
    return d.get("schema") if isinstance(d, dict) else None


def _peek(p: Path) -> bytes:
    with open(p, "rb") as f:
        return f.readline(1 << 20)


def trace_dir() -> Path:
    return Path(os.environ.get(TRACES_ENV) or REPO / "traces")


def bundled_paths(directory: Path | None = None, kind: str = "trace") -> list[Path]:
    """traces/*.jsonl|*.parquet that are decode traces (kind 'trace') or reference runs ('reference')."""
    out = []
    for p in sorted((directory or trace_dir()).glob("*")):
        if p.suffix not in TRACE_SUFFIXES or not p.is_file():
            continue
        is_ref = p.suffix == ".jsonl" and schema_of(_peek(p)) == REFERENCE_SCHEMA
        if is_ref == (kind == "reference"):
            out.append(p)
    return out


@st.cache_data(max_entries=128, show_spinner=False)
def _load_bundled(path: str, mtime: float) -> Entry:  # mtime is part of the cache key
    return make_entry(Path(path).name, "bundled", load_trace(path))


def bundled() -> tuple[dict[str, Entry], dict[str, str]]:
    """Every trace in traces/, and a one-line error for each file that does not load."""
    ok, bad = {}, {}
    for p in bundled_paths():
        try:
            e = _load_bundled(str(p), p.stat().st_mtime)
            ok[e.label] = e
        except TraceError as err:
            bad[p.name] = str(err)
    return ok, bad


# ---------------------------------------------------------------- uploads


def uploads() -> dict[str, Entry]:
    return st.session_state.setdefault(UPLOADS, {})


def add_trace_bytes(name: str, data: bytes, origin: str = "uploaded",
                    progress=None) -> tuple[str | None, str | None]:
    """Parse an uploaded (or live-recorded) trace into the session. Returns (label, error line).

    The error is the loader's own one-line message (file, line/row, field), or a size message; no
    exception escapes, so a bad file cannot break the page or the session's other traces. Messages
    name the file only (`name` is the browser's file name; no server path is ever shown).
    `progress(fraction, text)` is called while a trace is parsed (engine.trace.format.loads_trace)."""
    name = Path(name).name
    if len(data) > MAX_UPLOAD_MB * 1024 * 1024:
        return None, size_message(name, len(data))
    if not name.endswith(TRACE_SUFFIXES + PEER_SUFFIXES):
        return None, (f"{name}: expected a .jsonl or .parquet trace, or a vLLM / llama.cpp / SGLang report "
                      f"({', '.join(PEER_SUFFIXES)}, .jsonl)")
    digest = hashlib.sha1(data).hexdigest()[:8]
    if name.endswith(".jsonl") and schema_of(data[: 1 << 20]) == REFERENCE_SCHEMA:
        return add_reference_bytes(name, data, digest)
    label = f"{origin}: {name}"
    store = uploads()
    if label in store and store[label].info.get("digest") == digest:
        return label, None
    try:
        # a Spec-Bench answer file or a serving engine's report is imported on the way in (engine.interop)
        # the whole file to detect: it reads JSON only to its first record's end, whatever its length
        peer = None if name.endswith(".parquet") else formats.detect(data)
        if peer is not None:  # an engine's report first: its keys are specific, an answer file's are not
            trace = formats.loads_peer(data, name, peer)
        elif name.endswith(".jsonl") and specbench.is_answer_file(data[:1 << 20]):
            trace = specbench.loads_answers(data, name)
        elif name.endswith(TRACE_SUFFIXES):
            trace = loads_trace(data, name=name, progress=progress)
        else:
            return None, f"{name}: not a vLLM, llama.cpp or SGLang report (see the formats listed on this page)"
    except TraceError as e:
        return None, str(e)
    except RecursionError:
        return None, f"{name}: a record is nested too deeply to read (thousands of [ or {{ levels); not a trace"
    except Exception as e:  # a parser bug must still not take the page down; say what and where
        return None, f"{name}: could not be read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    entry = make_entry(label, origin, trace)
    entry.info["digest"] = digest
    store[label] = entry
    return label, None


def size_message(name: str, n_bytes: int) -> str:
    """Why a file is refused for size, and what to do instead (Parquet is ~3.5× smaller than JSONL)."""
    return (f"{name}: {n_bytes / 1e6:.1f} MB exceeds the {MAX_UPLOAD_MB} MB upload limit; convert it to Parquet "
            f"(python -m engine export {Path(name).stem}.jsonl {Path(name).stem}.parquet, about 3.5× smaller) "
            f"or check it locally with python -m engine validate")


def remove_upload(label: str) -> None:
    """Forget an upload in this session and delete its kept copy (app.persist)."""
    from app import persist

    gone = uploads().pop(label, None)
    ref = st.session_state.setdefault(REF_UPLOADS, {}).pop(label, None)
    digest = gone.info.get("digest") if gone is not None else ref[1] if ref is not None else None
    if label.startswith("uploaded: "):
        st.session_state.setdefault(REMOVED, {})[label.split(": ", 1)[1]] = digest
        name = label.split(": ", 1)[1]
        persist.remove(name)
        st.session_state.setdefault(KEPT, {}).pop(name, None)
        st.session_state.setdefault(SEEN, {}).pop(name, None)


REMOVED = "uploads_removed"  # session_state: file name -> digest removed (the uploader widget still holds it)
KEPT = "uploads_kept"  # session_state: file name -> digest of the bytes last saved to the uploads folder
SEEN = "uploads_seen"  # session_state: file name -> ((size, mtime), error) as app.persist.restore last read it
RESTORE_ERRORS = "uploads_restore_errors"


def keep_upload(name: str, data: bytes) -> None:
    """Keep an accepted upload in app.persist's folder (once per distinct content), so it survives a reload."""
    from app import persist

    digest = hashlib.sha1(data).hexdigest()
    kept = st.session_state.setdefault(KEPT, {})
    if kept.get(Path(name).name) == digest:
        return
    path = persist.save(name, data)
    if path is not None:
        kept[Path(name).name] = digest
        st.session_state.setdefault(SEEN, {})[path.name] = (persist.stamp(path), None)


def restore_uploads() -> dict[str, str]:
    """Load the kept uploads into this session (new or changed files only); {file: one-line error}.
    A kept file that no longer loads drops its stale entry from the session and stays on disk as it is."""
    from app import persist

    seen = st.session_state.setdefault(SEEN, {})
    errors = persist.restore(lambda n, b: add_trace_bytes(n, b), seen)
    for name in errors:
        uploads().pop(f"uploaded: {name}", None)
        st.session_state.setdefault(REF_UPLOADS, {}).pop(f"uploaded: {name}", None)
    st.session_state[RESTORE_ERRORS] = errors
    return errors


# ---------------------------------------------------------------- reference runs (Windows page)
# engine.trace.reference_file (the reader: plain JSON, no torch) is imported lazily, by the Windows page only.


def was_removed(name: str, data: bytes) -> bool:
    """These exact bytes were removed in this session: the uploader widget still holds them, so skip them."""
    return st.session_state.get(REMOVED, {}).get(Path(name).name) == hashlib.sha1(data).hexdigest()[:8]


def add_reference_bytes(name: str, data: bytes, digest: str) -> tuple[str | None, str | None]:
    from engine.trace.reference_file import loads_reference

    label = f"uploaded: {name}"
    try:
        ref = loads_reference(data, name=name)
    except TraceError as e:  # ReferenceFormatError is a TraceError: same one-line form
        return None, str(e)
    st.session_state.setdefault(REF_UPLOADS, {})[label] = (ref, digest)
    return label, None


@st.cache_data(max_entries=64, show_spinner=False)
def _load_reference(path: str, mtime: float):
    from engine.trace.reference_file import load_reference

    return load_reference(path)


def bundled_references() -> tuple[dict[str, tuple[Any, str]], dict[str, str]]:
    """Reference runs of traces/ alone: label -> (Reference, cache key); plus load errors."""
    ok, bad = {}, {}
    for p in bundled_paths(kind="reference"):
        mtime = p.stat().st_mtime
        try:
            ok[p.name] = (_load_reference(str(p), mtime), f"{p.name}@{mtime}")
        except TraceError as err:
            bad[p.name] = str(err)
    return ok, bad


def references() -> tuple[dict[str, tuple[Any, str]], dict[str, str]]:
    """Reference runs: label -> (Reference, cache key), bundled then uploaded; plus load errors."""
    ok, bad = bundled_references()
    restore_uploads()
    ok.update(st.session_state.get(REF_UPLOADS, {}))
    return ok, bad


def all_traces() -> dict[str, Entry]:
    """Bundled traces first (sorted by file name), then this session's uploads and live runs."""
    ok, _ = bundled()
    restore_uploads()
    return {**ok, **uploads()}


# ---------------------------------------------------------------- which trace a page opens on


def pick(key: str, options: list, default) -> None:
    """Point a selectbox's session value at a valid option before the widget is drawn (so another
    page can preselect it, and a vanished upload falls back to `default`) without passing `index`,
    which Streamlit rejects alongside a session-set value."""
    if st.session_state.get(key) not in options:
        st.session_state[key] = default


def default_label(entries: dict[str, Entry], prefer: str = "fixed:4", skip: str | None = None,
                  readable: bool = False) -> str | None:
    """The trace a page opens on: with `readable`, traces whose tokens this machine can show as text
    first; real (non-demo) traces before tiny demo ones, greedy before sampled;
    within those, the preferred policy (the usual fixed baseline), else the first speculative trace,
    else anything.
    `skip` avoids picking the same trace twice (Compare)."""
    labels = [k for k in entries if k != skip] or list(entries)
    # Real before demo, greedy before sampled (stable: keeps file order within each group).
    labels.sort(key=lambda k: (readable and entries[k].info["target"] != "tiny-random-llama-target"
                               and tokenizer_for(entries[k].info["target"]) is None,
                               bool(entries[k].info["demo"]), bool(entries[k].info.get("temperature"))))
    for test in (lambda e: e.info["policy"] == prefer, lambda e: e.info["draft"] is not None, lambda e: True):
        for k in labels:
            if test(entries[k]):
                return k
    return None
