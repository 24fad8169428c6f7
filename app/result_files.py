"""Result files the lab committed under docs/results and models/ that pages read: the PACER sweep's
ceiling and which pre-verifier (and so which pair) it replayed, and the `engine bench` results.
Cached on (path, mtime) where a file can change under a running server.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app.traces import REPO

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
