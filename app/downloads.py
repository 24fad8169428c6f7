"""Downloads: every table as CSV, a trace as Parquet, its step timings as a Perfetto trace.

The byte producers are pure (dataframe / trace in, bytes out) so tests check the bytes themselves;
the `*_button` wrappers only place a `st.download_button`. Buttons hand Streamlit a callable, which
it runs only when the button is clicked (off the script thread), and use on_click="ignore": a
download neither recomputes anything on every rerun nor reruns the page (Live would redraw).

Formats:
  CSV      `DataFrame.to_csv(index=False)`, UTF-8; list cells are written as JSON text.
  Parquet  `engine.trace.format.to_parquet` (steps as columns, header/requests/ends/footer as file metadata),
           so the file loads again with `engine.trace.format.load_trace` / `loads_trace` (Upload page, CLI).
  Perfetto `engine.trace.perfetto.to_perfetto`: Chrome trace-event JSON, one draft and one verify track per
           request, ts/dur in µs (open in ui.perfetto.dev).
Nothing here imports torch.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pandas as pd
import streamlit as st

from engine.trace.perfetto import to_perfetto
from engine.trace.format import Trace, to_parquet

CSV_LABEL = "⬇ CSV"
PARQUET_LABEL = "⬇ Trace (Parquet)"
PERFETTO_LABEL = "⬇ Step timings (Perfetto)"
JSONL_LABEL = "⬇ Trace (JSONL)"


# ---------------------------------------------------------------- bytes (pure)


def _cell(v):
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return v


def csv_bytes(df: pd.DataFrame) -> bytes:
    """The table as shown (no index), UTF-8 CSV; list/dict cells become JSON text so a spreadsheet shows
    them whole and `json.loads` reads them back; a speedup shown as a link is its figure, not the URL."""
    from app.reconcile import link_figures

    out = link_figures(df).copy()
    for c in out.columns:
        if out[c].dtype == object and out[c].map(lambda v: isinstance(v, (list, tuple, dict))).any():
            out[c] = out[c].map(_cell)
    return out.to_csv(index=False).encode("utf-8")


def parquet_bytes(trace: Trace) -> bytes:
    """`engine.trace.format.to_parquet` into memory (it writes atomically to a path, so via a temp folder)."""
    with tempfile.TemporaryDirectory(prefix="speclab-dl-") as d:
        p = Path(d) / "trace.parquet"
        to_parquet(trace, p)
        return p.read_bytes()


def perfetto_bytes(trace: Trace) -> bytes:
    """Step timings as Chrome/Perfetto trace-event JSON (`engine.trace.perfetto.to_perfetto`)."""
    return json.dumps(to_perfetto(trace)).encode("utf-8")


def stem(name: str) -> str:
    """A safe file stem from a trace label or file name: 'uploaded: my run.jsonl' → 'uploaded-my-run'."""
    base = re.sub(r"\.(jsonl|parquet)$", "", name.split("/")[-1])
    return re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.") or "trace"


# ---------------------------------------------------------------- buttons (thin)


def csv_button(df: pd.DataFrame, name: str, key: str, where=st) -> None:
    """A '⬇ CSV' button for one table; `name` becomes the file name (name.csv)."""
    frame = df.copy()
    where.download_button(CSV_LABEL, lambda: csv_bytes(frame), file_name=f"{stem(name)}.csv", mime="text/csv",
                          key=f"csv_{key}", on_click="ignore", help="this table as CSV")


MISSING = "—"  # what an empty cell shows (never a raw None / nan)


def table(df: pd.DataFrame, name: str, key: str, where=st, csv: pd.DataFrame | None = None, **kwargs) -> None:
    """st.dataframe plus its CSV button: every table in the app goes through here. Empty cells read
    as MISSING. `csv`: the frame the CSV holds when the shown one differs (figures shown as links to the
    Speedups page download as the figures)."""
    where.dataframe(df, **{"hide_index": True, "width": "stretch", "placeholder": MISSING, **kwargs})
    csv_button(df if csv is None else csv, name, key, where)


def trace_buttons(trace: Trace, name: str, key: str, where=st, jsonl: bytes | None = None) -> None:
    """Parquet and Perfetto buttons for one trace (and the original JSONL when its bytes are given),
    in one row that wraps when its column is narrow."""
    s = stem(name)
    row = where.container(horizontal=True, gap="small")
    if jsonl is not None:
        row.download_button(JSONL_LABEL, jsonl, file_name=f"{s}.jsonl", mime="application/x-ndjson",
                            key=f"jsonl_{key}", on_click="ignore", help="the trace file as the engine wrote it")
    row.download_button(PARQUET_LABEL, lambda: parquet_bytes(trace), file_name=f"{s}.parquet",
                        mime="application/vnd.apache.parquet", key=f"parquet_{key}", on_click="ignore",
                        help="loads again with engine.trace.format.load_trace and on the Upload page")
    row.download_button(PERFETTO_LABEL, lambda: perfetto_bytes(trace), file_name=f"{s}.perfetto.json",
                        mime="application/json", key=f"perfetto_{key}", on_click="ignore",
                        help="draft and verify tracks per prompt; open in ui.perfetto.dev")
