"""The Windows page's engine.offline.analysis calls, Streamlit-cached: every policy replayed over the
reference runs, the oracle ÷ best-fixed table, the confidence ceiling, the in-run cost model fitted from
the loaded decode traces, per-position acceptance and run-to-run variability. The analysis itself is
imported lazily (the other pages never pay for it).
"""

from __future__ import annotations

import streamlit as st

from app.traces import all_traces

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
