"""Sweeps: the per-task table of a `python -m engine sweep` folder, a setting (drafter × policy) × task speedup
heatmap and the settings pooled over tasks. With no sweep of your own it opens on the bundled example
(app/example_sweep: the real sweep code over the tiny untrained pair)."""

import os
from datetime import datetime, timezone
from pathlib import Path

import streamlit as st

from app import downloads, site_map, sweep_plots
from engine.bench.sweep_grid import NO_DRAFTER, SUMMARY_NAME
from engine.bench.sweep_summary import load_sweep_summary, with_settings
from engine.metrics import ACCEPTANCE_RATE, ACCEPTED_PER_CALL, EMITTED_PER_CALL, LABELS

st.title(site_map.heading("sweeps"))
head = st.container()
st.caption("A sweep folder is what `python -m engine sweep GRID.toml --out DIR` writes (docs/sweeps.md): "
           "one trace per task and `summary.parquet`, one row per task.")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "app" / "example_sweep")
found = sorted(str(p.parent) for p in (REPO / "runs").glob(f"**/{SUMMARY_NAME}")) if (REPO / "runs").is_dir() else []
if (Path(EXAMPLE) / SUMMARY_NAME).is_file():
    found.append(EXAMPLE)
default = os.environ.get("SPECLAB_SWEEP_DIR") or (found[0] if found else "")
if default and default not in found:
    found.insert(0, default)
folder = st.selectbox("Sweep folder", found, index=found.index(default) if default else None,
                      accept_new_options=True, placeholder="path to a sweep folder",
                      format_func=lambda f: "bundled example (tiny untrained pair)" if f == EXAMPLE else f)
if not folder:
    st.info("No sweep folder yet. Try: `.venv/bin/python -m engine sweep-bench --make-tiny` then "
            "`.venv/bin/python -m engine sweep docs/examples/sweep-tiny.toml --out runs/sweep-tiny/out`.")
    st.stop()


@st.cache_data(show_spinner="Loading sweep summary…")
def _load(path: str, stamp: float):
    return load_sweep_summary(path)


p = Path(folder)
stamp = (p / SUMMARY_NAME).stat().st_mtime if (p / SUMMARY_NAME).is_file() else 0.0
try:
    df = _load(str(p), stamp)
except (FileNotFoundError, ValueError) as e:
    st.error(str(e))
    st.stop()
if df.empty:
    st.warning("This sweep has no finished tasks yet.")
    st.stop()

df = with_settings(df)  # summaries written before `drafters` existed get drafter = model
drafters = sorted(d for d in df["drafter"].unique() if d != NO_DRAFTER)
st.write(f"**{len(df)} tasks** · {df['policy'].nunique()} policies · {len(drafters)} "
         f"{'drafter' if len(drafters) == 1 else 'drafters'} ({', '.join(drafters) or 'none'}) · "
         f"{df['task'].nunique()} tasks · {int(df['new_tokens'].sum())} tokens")
facets = sweep_plots.facet_values(df)
view = df
if facets:
    cols = st.columns(len(facets))
    for col, (name, values) in zip(cols, facets.items()):
        pick = col.selectbox(name, values, key=f"sweep_{name}")
        view = view[view[name] == pick]

head.info(sweep_plots.conclusion(view) + (" *The bundled example's pair is random: run your own grid "
                                         "(docs/sweeps.md) for numbers that mean something.*" if folder == EXAMPLE else ""),
          icon=":material/lightbulb:")
st.plotly_chart(sweep_plots.speedup_heatmap(view), theme=None, width="stretch")
dtypes = ", ".join(map(str, sorted(view["dtype"].unique()))) if "dtype" in view else "?"
when = datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if stamp else "date unknown"
st.caption("Speedup = tokens/s ÷ tokens/s of the autoregressive task on the same prompts, pooled over shards "
           "(Σ tokens ÷ Σ decode time). Workers that share CPU cores slow each other: compare cells of one "
           f"sweep, not across sweeps run with different worker counts. Tokens/s here were measured by this sweep's "
           f"workers (summary written {when}; dtype {dtypes}).")
NUMBERS = {"tokens_per_s": st.column_config.NumberColumn("tokens/s", format="%.1f"),
           EMITTED_PER_CALL: st.column_config.NumberColumn(LABELS[EMITTED_PER_CALL], format="%.2f"),
           ACCEPTED_PER_CALL: st.column_config.NumberColumn(LABELS[ACCEPTED_PER_CALL], format="%.2f"),
           ACCEPTANCE_RATE: st.column_config.NumberColumn(LABELS[ACCEPTANCE_RATE], format="%.2f"),
           "speedup": st.column_config.NumberColumn("speedup", format="%.2f×")}
st.subheader("Per drafter and window setting")
st.caption("Every task of this slice pooled: drafter (`model` = the pair's draft model; `lookup` / `suffix` copy "
           "from the prompt and output, no draft model) × window policy, best speedup first.")
downloads.table(sweep_plots.setting_table(view), f"sweep-{p.name}-settings", "sweep_settings",
                column_config=NUMBERS)
st.subheader("Per setting and task")
downloads.table(sweep_plots.policy_task_table(view), f"sweep-{p.name}-policy-task", "sweep_table",
                column_config=NUMBERS)
with st.expander("Every task (one row per trace)"):
    downloads.table(view, f"sweep-{p.name}-tasks", "sweep_tasks")
