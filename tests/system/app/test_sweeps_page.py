"""Grid sweeps on a local 2-CPU Ray instance with tiny model directories (built in tmp dirs)."""

import pytest

from engine.bench import sweep
from tests.conftest import REPO


def test_speedup_plots_from_a_summary_table():
    import pandas as pd

    from app import sweep_plots

    df = synthetic_summary()
    assert df.loc[df["policy"] == "fixed:4", "speedup"].round(6).tolist() == [1.5, 1.5]
    fig = sweep_plots.speedup_heatmap(df).to_dict()
    assert fig["data"][0]["type"] == "heatmap" and fig["data"][0]["y"] == ["fixed:4"]
    table = sweep_plots.policy_task_table(df)
    assert table.set_index(["policy", "task"]).loc[("fixed:4", "qa"), "speedup"] == pytest.approx(1.5)
    assert sweep_plots.facet_values(df) == {}
    # A summary written before `drafters` existed: every drafted task used the draft model.
    old = df.drop(columns=["drafter", "setting"])
    assert sweep_plots.setting_table(old)[["setting", "drafter", "speedup"]].values.tolist() == [
        ["fixed:4", "model", pytest.approx(1.5)], ["autoregressive", "none", 1.0]]
    # Two drafters with one policy are two rows, never pooled.
    mixed = pd.concat([df, df[df["policy"] == "fixed:4"].assign(drafter="lookup:n=10,ngram=2", tokens_per_s=300.0,
                                                                 decode_ms=8 / 300 * 1e3)])
    rows = sweep_plots.setting_table(mixed).set_index("setting")["speedup"]
    assert rows.to_dict() == {"lookup:n=10,ngram=2 · fixed:4": pytest.approx(3.0), "model · fixed:4":
                              pytest.approx(1.5), "autoregressive": 1.0}


def synthetic_summary():
    import pandas as pd

    rows = []
    for policy, tps in (("autoregressive", 100.0), ("fixed:4", 150.0)):
        for task in ("qa", "rag"):
            rows.append({"task_id": f"{policy}-{task}", "pair": "p", "target": "t", "dtype": "fp32",
                         "policy": policy, "verifier": "token", "temperature": 0.0, "top_k": 0, "top_p": 1.0,
                         "seed": 0, "max_new_tokens": 8, "chat": True, "task": task, "shard_hash": task,
                         "prompts": 1, "new_tokens": 8, "decode_ms": 8 / tps * 1e3, "target_calls": 4,
                         "mean_accepted_per_call_excl_bonus": 0.5, "drafted_tokens": 4, "tokens_per_s": tps})
    return sweep.add_speedup(pd.DataFrame(rows))


def test_sweeps_page_renders_without_torch(tmp_path):
    import subprocess
    import sys

    synthetic_summary().to_parquet(tmp_path / sweep.SUMMARY_NAME, index=False)
    page = str(REPO / "app" / "pages" / "sweeps.py")
    code = f"""
import os, sys
os.environ["SPECLAB_SWEEP_DIR"] = {str(tmp_path)!r}
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({page!r}, default_timeout=120).run()
assert not at.exception, [e.value for e in at.exception]
assert len(at.get("plotly_chart")) == 1 and len(at.dataframe) == 3, "heatmap, settings, per task, every task"
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_sweeps_tables_link_every_speedup_to_its_row(app):
    """The bundled example sweep's three tables: every speculative setting's speedup links to a row of the
    Speedups page that prints it; the autoregressive baseline (1.00 by definition) links nowhere."""
    from app import reconcile_sources
    from tests.system.app.conftest import assert_linked, goto, table_with

    rows = reconcile_sources.rows()
    at = goto(app, "sweeps")
    settings, per_task = table_with(at, "tasks"), table_with(at, "task")
    every = table_with(at, "task_id")
    for table in (settings, per_task, every):
        spec = table.value["policy"] != "autoregressive"
        assert assert_linked(table, "speedup", rows) == spec.sum() > 0
        assert table.value.loc[~spec, "speedup"].isna().all()
    # the headline's figures (the best setting pooled, its worst and best task) link to their rows too
    import re
    from urllib.parse import parse_qs, urlparse

    figures = re.findall(r"\[(\d+\.\d\d)×\]\((speedups\?[^)]+)\)", at.info[0].value)
    assert len(figures) == 3, at.info[0].value
    for x, url in figures:
        q = parse_qs(urlparse(url).query)
        hit = rows[(rows["pair"] == q["pair"][0]) & (rows["row"] == q["row"][0])]
        assert len(hit) == 1 and f"{hit['speedup'].iloc[0]:.2f}" == x
    # the settings' rows are listed on the Speedups page (pooled over tasks), the cells only when linked
    listed = rows[rows["page"] == "Sweeps"]
    assert (listed["kind"] == "sweep").sum() == (settings.value["policy"] != "autoregressive").sum()
