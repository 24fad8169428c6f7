"""What the Live page says about a finished run, and what it carries elsewhere — split from app/live.py
(which decodes). Pure: summaries and files in, sentences and entries out; no torch.

    loss_sentence(side, spec, s, base)   why a side ran slower than the autoregressive baseline, with the
                                         run's own measured draft cost c and one thing to try
    open_in_replay(paths, side, base)    the side's trace *and* the baseline's into the session, so Replay
                                         (and Overview's ×AR) find the AR trace Live just measured
    load_estimate / record_load          seconds a model-pair load takes on this machine, learned from
                                         its past loads (LOAD_TIMES_FILE)
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

from app import runs


def cost_ratios(s: dict[str, Any], base: dict[str, Any]) -> tuple[float | None, float | None]:
    """(c, v) of a side against the baseline of the same run (app.runs' definitions): c = draft ms per
    drafted token ÷ the baseline's ms per target step; v = the side's ms per verify call ÷ the same."""
    step = base["verify_ms"] / base["target_calls"] if base.get("target_calls") and base.get("verify_ms") else None
    if not step:
        return None, None
    c = s["draft_ms"] / s["drafted_tokens"] / step if s.get("drafted_tokens") and s.get("draft_ms") is not None else None
    v = s["verify_ms"] / s["target_calls"] / step if s.get("target_calls") and s.get("verify_ms") else None
    return c, v


def loss_sentence(side: str, spec: str, s: dict[str, Any], base: dict[str, Any] | None) -> str | None:
    """One sentence for a side slower than its baseline: its ×AR, the reason from its measured c (or v)
    and one suggestion (app.runs.why_slower); None when it was not slower or there is no baseline."""
    if not base or not base.get("tokens_per_s") or not s.get("tokens_per_s"):
        return None
    x = s["tokens_per_s"] / base["tokens_per_s"]
    if x >= 1:
        return None
    c, v = cost_ratios(s, base)
    why = runs.why_slower({"Emitted / call": s["mean_emitted_per_call_incl_bonus"], "c": c, "v": v})
    return f"{side} ({spec}) lost to autoregressive decoding at {x:.2f}× AR because {why}."


def open_in_replay(paths: dict[str, str], side: str, base: str) -> tuple[str | None, str | None]:
    """Add the side's trace *and* the baseline's (when it ran) to the session as origin 'live' — the same
    run to app.runs — so Replay's ×AR and conclusion use the AR this run just measured. (label of the
    side, error line)."""
    from app import traces

    p = Path(paths[side])
    label, err = traces.add_trace_bytes(p.name, p.read_bytes(), origin="live")
    if not err and paths.get(base) and Path(paths[base]).is_file():
        b = Path(paths[base])
        _, err = traces.add_trace_bytes(b.name, b.read_bytes(), origin="live")
    return (None, err) if err else (label, None)


# ---------------------------------------------------------------- the load estimate

LOAD_TIMES_FILE = Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab")) / "live-load-seconds.json"
# A 2-core CPU's order for a pair's first load ever; once any pair has loaded here, the guess for another
# is scaled by how this machine compared with its own guess (a slow disk slows every pair alike).
LOAD_GUESS_S = {"smollm2": 20.0, "qwen2.5-coder": 60.0, "qwen2.5-coder-quantized": 120.0,
                "qwen2.5-coder-mixed": 90.0, "tiny": 5.0}
KEEP = 5  # loads remembered per pair: the median of the last five


def _history(path: Path) -> dict[str, list[float]]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for k, v in raw.items():  # older files kept one number per pair
        xs = v if isinstance(v, list) else [v]
        xs = [float(x) for x in xs if isinstance(x, (int, float)) and x > 0]
        if xs:
            out[k] = xs
    return out


def load_estimate(which: str, path: Path | None = None) -> tuple[float, str]:
    """(seconds a load of `which` should take here, how that was learned): the median of this pair's
    recorded loads; else the pair's guess scaled by this machine's ratio measured ÷ guessed on the pairs
    it has loaded; else the plain guess."""
    hist = _history(path or LOAD_TIMES_FILE)
    if hist.get(which):
        n = len(hist[which])
        return statistics.median(hist[which]), f"the median of this machine's last {n} load{'s' * (n > 1)}"
    guess = LOAD_GUESS_S.get(which, 30.0)
    ratios = [statistics.median(xs) / LOAD_GUESS_S[k] for k, xs in hist.items() if k in LOAD_GUESS_S]
    if ratios:
        r = statistics.median(ratios)
        return guess * r, f"a first estimate, scaled by this machine's other loads ({r:.1f}× the usual)"
    return guess, "a first estimate: later loads on this machine are timed"


def record_load(which: str, seconds: float, path: Path | None = None) -> None:
    path = path or LOAD_TIMES_FILE
    try:
        hist = _history(path)
        hist[which] = (hist.get(which, []) + [round(seconds, 1)])[-KEEP:]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(hist))
    except (OSError, ValueError):
        pass  # an estimate is a courtesy: never fail the page for it
