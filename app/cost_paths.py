"""The verify curve and draft cost of each weights path (dense, quantized), as `python -m engine costs
--weights dense,quantized` measured them: for the Windows page's cost model and its Cost tab.

    path_timings(target, draft) -> {weights: timings}   the latest costs-*.json of that pair that
                                                        recorded per-path blocks (most threads measured)
    curve_frame(timings_by_path) -> DataFrame           k, path, t(k)/t(1) (monotone fit), c

Why it matters: on the quantized path a forward of k tokens costs nearly k times one (its kernels are
compute-bound), where the dense path's is nearly flat to k = 8 — so the same acceptance buys a
different window, and speculation can lose on one path and win on the other.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from app.result_files import RESULTS


def path_timings(target: str, draft: str, results: Path = RESULTS) -> dict[str, dict]:
    """{weights: timings} of the newest costs result for this pair with per-path blocks ({} if none)."""
    from engine.interop.diagnose import pair_cost_results

    best: tuple[str, dict[str, dict]] | None = None
    for created, blocks, _ in pair_cost_results(target, draft, results):
        blocks = [b for b in blocks if "weights" in b]
        if not blocks:
            continue
        most = max(b["threads"] for b in blocks)
        found = {b["weights"]: b["timings"] for b in blocks if b["threads"] == most}
        if best is None or created > best[0]:
            best = (created, found)
    return best[1] if best else {}


def curve_frame(timings_by_path: dict[str, dict]) -> pd.DataFrame:
    """One row per (path, k): the verify cost t(k)/t(1) as the cost model prices it, and c."""
    from engine.offline.costmodel import CostModel

    rows = []
    for w, t in timings_by_path.items():
        cm = CostModel.from_timings(t)
        for k in range(1, len(t["target_ms_by_tokens"]) + 1):
            rows.append({"path": w, "k": k, "t(k)/t(1)": cm.v(k - 1), "c": cm.c,
                         "t(1) ms": float(t["target_ms_by_tokens"][0])})
    return pd.DataFrame(rows, columns=["path", "k", "t(k)/t(1)", "c", "t(1) ms"])


def cost_models(timings_by_path: dict[str, dict]) -> dict[str, object]:
    """{weights: CostModel} for the Windows page's cost-model choice."""
    from engine.offline.costmodel import CostModel

    return {w: CostModel.from_timings(t) for w, t in timings_by_path.items()}
