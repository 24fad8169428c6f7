"""The three oracles of this lab and the confidence ceiling, each named once. Pages, tables and the
advice use these names.

REPLAY_ORACLE — "replay oracle": oracle (a) of engine.offline.replay on a greedy reference run. Every
    step drafts exactly the accepted run A(j) from its position (nothing rejected, A(j) = 0 is a plain
    target step), walked position by position over the reference's output and priced by a cost model.
    It is what the real hindsight oracle policy (engine.policies.oracle, the bench's `oracle` row)
    does, so a bench run checks it on the wall clock.
COST_OPTIMAL — "cost-optimal hindsight schedule": oracle (c), `cost_optimal_windows`. The same A(j),
    but each step's window w ≤ A(j) is chosen by dynamic programming to minimise the total cost of the
    whole output: where a wide verify costs more than its extra tokens return, it drafts less than the
    run. It is the fastest schedule any window policy could follow on that output, hence the one the
    advice (engine.offline.advise) measures what is left on the table against.
ACCEPTED_BOUND — "accepted-length bound": `accepted_length_bound`. The steps of a *recorded* run (a
    decode trace, imported ones included, or PACER's recorded fixed-window steps) each priced as if
    it had drafted exactly what it accepted: Σ emitted / Σ cost(accepted). It needs no reference, so it
    exists for any trace, but its step boundaries are the recording's and its accepted counts are
    censored at the recorded window.

CONFIDENCE_CEILING — "confidence ceiling" (not an oracle: it reads no outcome before it happens):
    `engine.offline.confidence_ceiling`. The best window rule that reads only the draft's confidence
    bin, given each bin's acceptance in hindsight (perfect calibration), chosen over a grid on all tasks
    together. The gap between it and the cost-optimal schedule is what the draft's confidence cannot
    tell; the gap between it and a real adaptive policy is what better calibration or rules could win.

Why they differ: the replay oracle drafts the whole run even where that is not worth its verify
cost, so under a verify cost that grows with the window the cost-optimal schedule beats it (they
agree under a flat verify); the accepted-length bound walks other steps — the recording's, whose
runs a fixed window cut short (so it is low for short fixed windows), over recorded steps sampled as
decoding situations rather than one output — and is priced by whichever cost model the page uses
(PACER's chart sweeps the draft cost down to 0, which lifts it above both). A figure is comparable
with another only under the same name and the same cost model.
"""

from __future__ import annotations

import pandas as pd

from engine.offline.costmodel import CostModel

REPLAY_ORACLE = "replay oracle"
COST_OPTIMAL = "cost-optimal hindsight schedule"
ACCEPTED_BOUND = "accepted-length bound"
CONFIDENCE_CEILING = "confidence ceiling"  # engine.offline.confidence_ceiling
# The replay specs behind the names (engine.offline.replay.parse_spec).
SPECS = {REPLAY_ORACLE: "oracle:a", COST_OPTIMAL: "oracle:c"}
NAME_OF_SPEC = {"oracle:a": REPLAY_ORACLE, "oracle:c": COST_OPTIMAL, "oracle:b": "until-mismatch oracle"}


def accepted_length_bound(steps: pd.DataFrame, cost: CostModel) -> float | None:
    """Σ emitted / Σ cost(accepted) over recorded steps (columns `accepted`, `emitted`), in units of
    an autoregressive step: the speedup had every step drafted exactly what it accepted (module doc).
    None without steps. Worked example: accepted [2, 0], emitted [3, 1], flat c = 0.5 → 4 / (2 + 1)."""
    if not len(steps):
        return None
    t = sum(cost.step(int(a)) for a in steps["accepted"])
    return float(steps["emitted"].sum()) * cost.v(0) / t
