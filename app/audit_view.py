"""The losslessness audit as the Audit page shows it: the rows of docs/results/audit.csv (written
by `python -m engine audit`, one row per verifier × toy case × (V, γ, K)) → one verdict per verifier.

Verdict rule (the same as `engine.bench.audit.AuditRow.lossless` and the table in docs/audit.md): a
verifier is **lossless** iff on every row

    lossless_error = max_z |Σ_t P(Y = z_1:t)·p(z_t+1: | z_1:t) − p(z)| ≤ TOL   and   mass_error ≤ TOL,

TOL = 1e-12: exact float64 enumeration leaves errors ≈ 1e-16 for a correct rule, while a wrong one
is off by ≥ 1e-3 on some toy. Otherwise it is **NOT lossless**, and the worst row (largest
lossless error) names the toy. Pure pandas, no torch (engine.bench.audit itself imports torch).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

TOL = 1e-12
COLUMNS = {"verifier": str, "case": str, "vocab": int, "gamma": int, "k": int, "lossless_error": float,
           "first_token_error": float, "mass_error": float, "min_deficit": float, "fallback_mass": float,
           "expected_accepted": float}
VERDICT_COLUMNS = ["verifier", "verdict", "rows", "toys", "max_lossless_error", "worst_case", "worst_vocab",
                   "worst_gamma", "worst_k", "max_first_token_error", "max_mass_error", "min_deficit",
                   "max_fallback_mass"]


def load_audit(path: str | Path) -> pd.DataFrame:
    """Read and check an audit CSV; ValueError with one line (file, what is wrong) on bad input."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: no such audit file (write it with `python -m engine audit`)")
    try:
        df = pd.read_csv(p)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{p.name}: not a readable CSV ({type(e).__name__})") from None
    return check(df, p.name)


def check(df: pd.DataFrame, name: str = "audit") -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{name}: missing column(s) {', '.join(missing)} "
                         f"(expected the CSV of `python -m engine audit`)")
    if df.empty:
        raise ValueError(f"{name}: no rows")
    out = df.copy()
    for c, kind in COLUMNS.items():
        if kind is str:
            out[c] = out[c].astype(str)
            continue
        num = pd.to_numeric(out[c], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(num)
        if bad.any():
            i = int(bad.nonzero()[0][0])
            raise ValueError(f"{name}: row {i + 1}: field '{c}': expected a finite number, got {df[c].iloc[i]!r}")
        out[c] = num.astype(kind)
    return out


def verdicts(df: pd.DataFrame, tol: float = TOL) -> pd.DataFrame:
    """One row per verifier (in CSV order): verdict, worst lossless error and the toy it came from
    (case, V, γ, K), plus the other worst-case columns of docs/audit.md."""
    df = check(df)
    rows = []
    for name, g in df.groupby("verifier", sort=False):
        worst = g.loc[g["lossless_error"].idxmax()]
        ok = bool(((g["lossless_error"] <= tol) & (g["mass_error"] <= tol)).all())
        rows.append({"verifier": name, "verdict": "lossless" if ok else "NOT lossless", "rows": len(g),
                     "toys": g["case"].nunique(), "max_lossless_error": float(worst["lossless_error"]),
                     "worst_case": worst["case"], "worst_vocab": int(worst["vocab"]),
                     "worst_gamma": int(worst["gamma"]), "worst_k": int(worst["k"]),
                     "max_first_token_error": float(g["first_token_error"].max()),
                     "max_mass_error": float(g["mass_error"].max()), "min_deficit": float(g["min_deficit"].min()),
                     "max_fallback_mass": float(g["fallback_mass"].max())})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def conclusion(table: pd.DataFrame) -> str:
    """One sentence: how many verifiers are lossless, and which are not (and on what)."""
    bad = table[table["verdict"] != "lossless"]
    n = len(table)
    if bad.empty:
        return f"All {n} verifiers are lossless: on every toy case the emitted tokens follow the target exactly."
    names = ", ".join(f"**{v}**" for v in bad["verifier"])
    return (f"{n - len(bad)} of {n} verifiers are lossless; {names} {'is' if len(bad) == 1 else 'are'} not "
            f"(worst lossless error {bad['max_lossless_error'].max():.1e}): use a lossless rule when the output "
            "must follow the target.")
