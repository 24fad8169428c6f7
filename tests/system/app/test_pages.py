"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations
import subprocess
import sys
from pathlib import Path
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import downloads, traces
from app.reconcile import link_figures
from tests.system.app.conftest import goto
from tests.conftest import MAIN, TIMEOUT


def synthetic_sweep(folder: Path) -> Path:
    """A sweep folder with only summary.parquet (what the Sweeps page reads): 2 policies × 2 tasks."""
    from engine.bench.sweep import SUMMARY_NAME, add_speedup

    rows = [{"task_id": f"{pol}-{task}", "pair": "p", "target": "t", "dtype": "fp32", "policy": pol,
             "verifier": "token", "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0, "max_new_tokens": 8,
             "chat": True, "task": task, "shard_hash": task, "prompts": 1, "new_tokens": 8,
             "decode_ms": 8 / tps * 1e3, "target_calls": 4, "mean_accepted_per_call_excl_bonus": 0.5, "drafted_tokens": 4,
             "mean_emitted_per_call_incl_bonus": 2.0, "draft_acceptance_rate": 0.5, "tokens_per_s": tps}
            for pol, tps in (("autoregressive", 100.0), ("fixed:4", 150.0)) for task in ("qa", "rag")]
    folder.mkdir(parents=True, exist_ok=True)
    add_speedup(pd.DataFrame(rows)).to_parquet(folder / SUMMARY_NAME, index=False)
    return folder


TORCH_FREE_MODULES = ("app.frames", "app.traces", "app.token_texts", "app.analyses", "app.result_files",
                      "app.plots", "app.tokens", "app.downloads", "app.audit_view", "app.multidraft_view",
                      "app.sweep_plots",
                      "app.dpace_plots", "engine.offline.analysis", "engine.offline.reference", "engine.offline.replay", "engine.bench.sweep",
                      "engine.trace.perfetto", "engine.trace.format", "engine.trace.prompts")


def test_page_modules_do_not_import_torch():
    """A fresh interpreter importing what the torch-free pages use must not load torch (seconds to import)."""
    code = f"import importlib, sys\nfor m in {TORCH_FREE_MODULES!r}: importlib.import_module(m)\n" \
           "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_pages_other_than_live_do_not_import_torch(trace_dir, tmp_path):
    """Only the Live page may pull torch in: every other page, Windows (engine.offline.analysis over reference
    runs), Sweeps, D-PACE and Audit included, runs in a fresh interpreter without it."""
    sweep = synthetic_sweep(tmp_path / "sweep")
    code = f"""
import os, sys
os.environ[{traces.TRACES_ENV!r}] = {str(trace_dir)!r}
os.environ["SPECLAB_SWEEP_DIR"] = {str(sweep)!r}
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({MAIN!r}, default_timeout={TIMEOUT}).run()
for page in ("replay", "compare", "upload", "overview", "windows", "sweeps", "dpace", "audit"):
    at.switch_page(f"pages/{{page}}.py").run()
    assert not at.exception, (page, [e.value for e in at.exception])
    assert page in ("upload", "overview") or len(at.get("plotly_chart")), page  # the page really drew
    assert "torch" not in sys.modules, page
print("torch" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


# ---------------------------------------------------------------- downloads, audit, multi-draft, examples


def test_every_table_has_its_csv_button(app, monkeypatch, tmp_path):
    """Each st.dataframe on every page comes with a '⬇ CSV' button carrying that same table."""
    made = []
    real = downloads.csv_button

    def spy(df, name, key, *where):
        made.append((key, name, df))
        return real(df, name, key, *where)

    monkeypatch.setattr(downloads, "csv_button", spy)
    monkeypatch.setenv("SPECLAB_SWEEP_DIR", str(synthetic_sweep(tmp_path / "sweep")))
    for page in ("replay", "windows", "compare", "sweeps", "dpace", "audit"):
        made.clear()
        at = goto(app, page)
        if page == "windows":  # one section a run: its tables sit in the oracle-ratio section
            made.clear()
            at.segmented_control(key="win_section").set_value("Oracle ÷ best fixed, per task").run()
        shown = [d.value for d in at.dataframe]
        buttons = [b for b in at.get("download_button") if b.proto.label == downloads.CSV_LABEL]
        assert shown and len(buttons) == len(shown) == len(made), page
        for df, (key, name, sent) in zip(shown, made):
            assert name and list(df.columns) == list(sent.columns) and len(df) == len(sent), (page, key)
            # a linked figure shows two decimals (its link text), the CSV the full value
            shown_f, sent_f = link_figures(df).reset_index(drop=True), link_figures(sent).reset_index(drop=True)
            for c in df.columns:  # a link column's blank (the AR row: nothing to link) may be 1.00 in the CSV
                if not shown_f[c].equals(df[c].reset_index(drop=True)):
                    sent_f.loc[shown_f[c].isna(), c] = None
            pd.testing.assert_frame_equal(shown_f, sent_f,
                                          check_dtype=False, check_exact=False, atol=0.0051)

