"""The multi-draft grid as the Multi-draft page shows it: rows of a paired-grid result
(`python -m engine multibench --paired`, engine.bench.paired) → a tidy frame and one sentence per
temperature. Pure pandas, no torch: the bench stores its rows in the JSON.

Headline rule (the multi-draft issue's target): at each T and L, the best lossless rule with K ≥ 2
(RRS, K-SEQ, RBV, KBV) against SD (token verification, K = 1) on block efficiency
BE = emitted tokens per target call; the gain is BE_best / BE_SD − 1. The published SpecTr-GBV code is
shown but never picked: it is not lossless for K ≥ 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

LOSSLESS_MULTI = ("rrs", "kseq", "rbv", "kbv")
LABELS = {"token": "SD (token)", "block": "BV (Sun et al.)", "rrs": "RRS", "kseq": "SpecTr K-SEQ",
          "spectr-gbv-published": "SpecTr-GBV (published, lossy)", "rbv": "RBV (ours)", "kbv": "KBV (ours)"}
ROW_COLUMNS = {"temperature": float, "L": int, "method": str, "k": int, "be": float}


def load_paired(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(grid rows, real-run rows, header) of a paired result; ValueError with one line on bad input."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: no such result (write it with `python -m engine multibench --paired --out …`)")
    try:
        res = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{p.name}: not JSON ({type(e).__name__})") from None
    if not isinstance(res, dict) or res.get("kind") != "paired" or not isinstance(res.get("rows"), list):
        raise ValueError(f"{p.name}: not a paired multi-draft result (no kind='paired' with rows)")
    rows = pd.DataFrame(res["rows"])
    missing = [c for c in ROW_COLUMNS if c not in rows.columns]
    if rows.empty or missing:
        raise ValueError(f"{p.name}: rows lack {', '.join(missing) or 'everything'}")
    try:
        rows = rows.astype(ROW_COLUMNS | {"sr_model": float} if "sr_model" in rows else ROW_COLUMNS)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{p.name}: a row has a non-numeric field ({e})") from None
    unknown = set(rows["method"]) - set(LABELS)
    if unknown:
        raise ValueError(f"{p.name}: unknown method(s) {sorted(unknown)}")
    rows["label"] = rows["method"].map(LABELS)
    real = pd.DataFrame(res.get("real_rows") or [])
    head = {k: res.get(k) for k in ("created", "target", "draft", "dtype", "command")}
    head["prompts"] = len(res.get("prompts") or [])
    return rows, real, head


def gains(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (T, L): SD's BE, the best lossless K ≥ 2 rule, its BE and its gain over SD."""
    out = []
    for (t, L), g in rows.groupby(["temperature", "L"]):
        sd = g[(g["method"] == "token") & (g["k"] == 1)]
        multi = g[g["method"].isin(LOSSLESS_MULTI) & (g["k"] >= 2)]
        if sd.empty or multi.empty:
            continue
        best = multi.loc[multi["be"].idxmax()]
        be_sd = float(sd["be"].iloc[0])
        out.append({"temperature": t, "L": L, "sd_be": be_sd, "best": f"{LABELS[best['method']]}, K = {best['k']}",
                    "best_be": float(best["be"]), "gain": float(best["be"]) / be_sd - 1})
    return pd.DataFrame(out)


def headline(rows: pd.DataFrame, temperature: float) -> str:
    """One sentence: where the best lossless multi-draft rule beats SD most, and by how much, at this T."""
    g = gains(rows)
    g = g[g["temperature"] == temperature]
    if g.empty:
        return f"No SD and multi-draft rows at T = {temperature:g}."
    top = g.loc[g["gain"].idxmax()]
    span = ", ".join(f"L = {int(r.L)}: {r.gain:+.0%}" for r in g.itertuples())
    return (f"At T = {temperature:g} the best lossless multi-draft rule gains {top['gain']:+.0%} block efficiency "
            f"over SD ({top['best']} at L = {int(top['L'])}: {top['best_be']:.2f} vs {top['sd_be']:.2f} tokens "
            f"per target call); per L: {span}.")


DEFINITIONS = ("**K** = drafts per step: K independent draft blocks are proposed and the verifier may follow "
               "any one of them (K = 1 is ordinary speculative decoding). **L** = block length: tokens in "
               "each draft block. **BE** (block efficiency) = tokens emitted per target call, bonus included: "
               "hardware-free. **×AR** = the wall-clock speedup over autoregressive decoding, modelled from "
               "per-call costs measured in the same run (engine.bench.paired).")


def wall_clock(rows: pd.DataFrame, temperature: float) -> str:
    """One sentence: the best modelled wall-clock speedup at this T (any rule, any K, L) against SD's best,
    and whether the extra drafts pay for themselves on the clock."""
    d = rows[(rows["temperature"] == temperature)]
    if "sr_model" not in d or d["sr_model"].isna().all():
        return "This result has no measured costs, so no wall-clock figure stands beside BE."
    d = d[d["sr_model"].notna() & (d["method"].isin(LOSSLESS_MULTI + ("token",)))]
    best = d.loc[d["sr_model"].idxmax()]
    sd = d[(d["method"] == "token") & (d["k"] == 1)]
    sd_best = sd.loc[sd["sr_model"].idxmax()] if len(sd) else None
    out = (f"On the wall clock the fastest lossless cell is {LABELS[best['method']]}, K = {int(best['k'])}, "
           f"L = {int(best['L'])} at {best['sr_model']:.2f}× AR (BE {best['be']:.2f})")
    if sd_best is not None and best["method"] != "token":
        out += f", against SD's best {sd_best['sr_model']:.2f}× AR at L = {int(sd_best['L'])}"
        if best["sr_model"] < sd_best["sr_model"] * 1.02:
            out += ": the extra drafts buy tokens per call but not time"
    elif sd_best is not None:
        out += ": SD itself, so more drafts per step cost more time than they save here"
    return out + "."
