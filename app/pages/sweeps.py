"""Sweeps: the per-task table of a `python -m engine sweep` folder, a setting (drafter × policy) × task speedup
heatmap and the settings pooled over tasks. With no sweep of your own it opens on the bundled example
(app/example_sweep: the real sweep code over the tiny untrained pair)."""

from datetime import datetime, timezone
from pathlib import Path

import streamlit as st

from app import downloads, reconcile, reconcile_sources, reconcile_tables, site_map, sweep_plots
from engine.bench.sweep_grid import NO_DRAFTER, SUMMARY_NAME
from engine.bench.sweep_summary import load_sweep_summary, with_settings
from engine.metrics import ACCEPTANCE_RATE, ACCEPTED_PER_CALL, EMITTED_PER_CALL, LABELS

st.title(site_map.heading("sweeps"))
head = st.container()
st.caption("A sweep folder is what `python -m engine sweep GRID.toml --out DIR` writes (docs/sweeps.md): "
           "one trace per task and `summary.parquet`, one row per task.")

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "app" / "example_sweep")
found, default = reconcile_sources.sweep_folders()  # runs/**/ then the example; the Speedups page has `default`'s rows
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

# Each speedup links to its row on the Speedups page, which reconciles the folder the page opens on.
known = reconcile_sources.sweep_frame(folder, stamp) if folder == default else None
key = reconcile_tables.slice_key(view, list(facets))
folder_id = reconcile_sources.sweep_name(folder)
pair = reconcile_tables.sweep_pair(view["target"].iloc[0], view["pair"].iloc[0] if "pair" in view else None)


def linked(table, ids, help: str):
    """`table` with its speedups as links (AR rows: the 1.00 baseline, no link) and the column's config."""
    ids = [None if pol == reconcile_tables.AUTOREGRESSIVE else i for i, pol in zip(ids, table["policy"])]
    cells = reconcile_tables.links(known, pair, ids, table["speedup"])
    return reconcile_tables.column(table, "speedup", cells, help)


def href(setting: str, task: str | None = None) -> str | None:
    """A figure of the headline as a link to its row (None: the folder is not reconciled, print it plain)."""
    row = reconcile_tables.sweep_id(folder_id, key, setting, task)
    hit = known is not None and ((known["pair"] == pair) & (known["row"] == row)).any()
    return reconcile.href(pair, row) if hit else None


head.info(sweep_plots.conclusion(view, link=href) + (" *The bundled example's pair is random: run your own grid "
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
settings = sweep_plots.setting_table(view)
shown, col = linked(settings, [reconcile_tables.sweep_id(folder_id, key, s) for s in settings["setting"]],
                    "tokens/s ÷ the autoregressive tasks' on the same prompts, every task pooled")
downloads.table(shown, f"sweep-{p.name}-settings", "sweep_settings", column_config=NUMBERS | {"speedup": col},
                csv=settings)
st.subheader("Per setting and task")
per_task = sweep_plots.policy_task_table(view)
shown, col = linked(per_task, [reconcile_tables.sweep_id(folder_id, key, s, t) for s, t in zip(per_task["setting"],
                                                                                          per_task["task"])],
                    "tokens/s ÷ the autoregressive task's on the same prompts")
downloads.table(shown, f"sweep-{p.name}-policy-task", "sweep_table", column_config=NUMBERS | {"speedup": col},
                csv=per_task)
with st.expander("Every task (one row per trace)"):
    shown, col = linked(view, [reconcile_tables.sweep_id(folder_id, "", t) for t in view["task_id"]],
                        "tokens/s ÷ the autoregressive task's on the same prompts (this trace's shard)")
    downloads.table(shown, f"sweep-{p.name}-tasks", "sweep_tasks", column_config={"speedup": col}, csv=view)
