"""Grid sweeps on a local 2-CPU Ray instance with tiny model directories (built in tmp dirs)."""
import json
import os
import shutil
import signal
import threading
import time
from collections import Counter

import pytest

from engine.bench import sweep
from engine.bench.sweep_bench import make_tiny_models
from engine.trace.format import load_trace
from tests.sweep_grids import PROMPTS, grid_text, root, toml_value, write_grid  # noqa: F401  (root: a fixture)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")  # only the tests that start workers need it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def log_events(out, event):
    lines = [json.loads(x) for x in (out / sweep.LOG_NAME).read_text().splitlines()]
    return [x for x in lines if x["event"] == event]


def check_traces(out, tasks):
    files = sorted(p.name for p in (out / "traces").iterdir())
    assert files == sorted(f"{t.task_id}.jsonl" for t in tasks), "one trace per task, no leftover tmp files"
    for t in tasks:
        tr = load_trace(out / "traces" / f"{t.task_id}.jsonl")
        assert tr.complete and tr.header["sweep"]["task_id"] == t.task_id
        assert len(tr.requests) == len(t.prompts) and tr.header["policy"]["spec"] == (
            "autoregressive" if t.config["policy"] == "autoregressive" else t.config["policy"])


DRAFTERS = 'drafters = ["model", "lookup:n=4", { name = "suffix", params = { n = 8 } }]\n'
DRAFTER_POLICIES = ["autoregressive", "fixed:3", {"name": "matchlen", "params": {"factor": 1, "offset": 2, "max": 8}}]


# ------------------------------------------------------------------ on Ray


@pytest.fixture(scope="module")
def first_sweep(root, local_ray, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "sweep"
    grid = sweep.load_grid(write_grid(root, "grid.toml", grid_text(["autoregressive", "fixed:3"])))
    res = sweep.run_sweep(grid, out, workers=2, progress=False)
    return grid, out, res


def test_two_worker_sweep_completes(first_sweep):
    grid, out, res = first_sweep
    tasks = sweep.expand_grid(grid)
    assert res.ok and res.executed == res.tasks == 8 and res.workers == 2 and res.skipped == 0
    check_traces(out, tasks)
    written = log_events(out, "written")
    assert len({e["pid"] for e in written}) == 2, "both workers ran tasks"
    df = sweep.load_sweep_summary(out)
    assert len(df) == 8 and df["task_id"].is_unique
    assert set(df["task"]) == {"mt_bench", "qa", "translation"}
    ar = df[df["policy"] == "autoregressive"]
    assert (ar["mean_emitted_per_call_incl_bonus"] == 1.0).all() and (ar["speedup"] == 1.0).all()
    spec = df[df["policy"] == "fixed:3"]
    assert (spec["mean_emitted_per_call_incl_bonus"] > 1.0).all() and spec["speedup"].notna().all()
    assert ((spec["draft_acceptance_rate"] >= 0) & (spec["draft_acceptance_rate"] <= 1)).all()
    m = sweep.speedup_matrix(df)
    assert list(m.index) == ["fixed:3"] and sorted(m.columns) == ["mt_bench", "qa", "translation"]


def test_rerun_does_no_work(first_sweep):
    grid, out, _ = first_sweep
    before = {p.name: p.stat().st_mtime_ns for p in (out / "traces").iterdir()}
    res = sweep.run_sweep(grid, out, workers=2, progress=False)
    assert res.executed == 0 and res.skipped == 8 and res.workers == 0
    assert {p.name: p.stat().st_mtime_ns for p in (out / "traces").iterdir()} == before


def test_changed_grid_runs_only_new_tasks(first_sweep, root, tmp_path):
    grid, out, _ = first_sweep
    out2 = tmp_path / "sweep"
    shutil.copytree(out, out2)
    # One truncated trace (a run killed before the footer) is redone too.
    old = sweep.expand_grid(grid)
    victim = out2 / "traces" / f"{old[0].task_id}.jsonl"
    victim.write_text("\n".join(victim.read_text().splitlines()[:-1]) + "\n")
    grid2 = sweep.load_grid(write_grid(root, "grid2.toml", grid_text(["autoregressive", "fixed:3", "fixed:2"])))
    res = sweep.run_sweep(grid2, out2, workers=2, progress=False)
    assert res.ok and res.tasks == 12 and res.executed == 4 + 1 and res.skipped == 7
    check_traces(out2, sweep.expand_grid(grid2))
    ran = {e["task_id"] for e in log_events(out2, "written")} - {e["task_id"] for e in log_events(out, "written")}
    new = {t.task_id for t in sweep.expand_grid(grid2)} - {t.task_id for t in old}
    assert ran == new and len(sweep.load_sweep_summary(out2)) == 12


def test_killed_worker_task_is_retried_once(root, local_ray, tmp_path):
    grid = sweep.load_grid(write_grid(root, "kill.toml", grid_text(["fixed:3"], max_new_tokens=96)))
    out = tmp_path / "sweep"
    killed: dict = {}

    def kill_when_writing(ev):
        tmp = ev["tmp"]
        deadline = time.time() + 60
        while time.time() < deadline and not os.path.exists(tmp):
            time.sleep(0.002)
        if os.path.exists(tmp):  # the worker is mid-task: its trace is half written
            os.kill(ev["pid"], signal.SIGKILL)
            killed.update(ev)

    def on_event(event, ev):
        if event == "submit" and not killed.get("armed"):
            killed["armed"] = True
            threading.Thread(target=kill_when_writing, args=(ev,), daemon=True).start()

    res = sweep.run_sweep(grid, out, workers=2, progress=False, on_event=on_event)
    assert "pid" in killed, "the worker was killed mid-task"
    tasks = sweep.expand_grid(grid)
    assert res.ok and res.retried >= 1 and res.executed + res.present == len(tasks) == 4
    check_traces(out, tasks)
    died = log_events(out, "worker_died")
    assert [e["task_id"] for e in died] == [killed["task_id"]]
    written = Counter(e["task_id"] for e in log_events(out, "written"))
    assert written == Counter({t.task_id: 1 for t in tasks}), "every task written exactly once"
    redo = [e for e in log_events(out, "written") if e["task_id"] == killed["task_id"]]
    assert redo[0]["pid"] != killed["pid"] and redo[0]["attempt"] == 2
    assert len(sweep.load_sweep_summary(out)) == 4


def test_failing_task_is_reported_not_retried(root, local_ray, tmp_path):
    bad = '[[pairs]]\ntarget = "models/nonexistent"\ndtype = "fp32"\n'
    grid = sweep.load_grid(write_grid(root, "fail.toml", grid_text(["autoregressive"], extra_pairs=bad)
                                      .replace('file = "prompts.jsonl"', 'file = "prompts.jsonl"\nlimit = 1')))
    res = sweep.run_sweep(grid, tmp_path / "sweep", workers=1, progress=False)
    assert res.executed == 1 and len(res.failed) == 1 and res.retried == 0
    assert "cannot load target" in next(iter(res.failed.values()))


def test_model_free_drafters_sweep(root, local_ray, tmp_path):
    """A drafter × window grid on Ray: every model-free task runs on the target alone, is lossless at T = 0
    (the same tokens as the baseline on its shard), and the summary, the speedup matrix and the pooled
    table report speedup and emitted per call per drafter × policy."""
    from app import sweep_plots

    text = DRAFTERS + grid_text(DRAFTER_POLICIES, max_new_tokens=24).replace(
        'file = "prompts.jsonl"', 'file = "prompts.jsonl"\nlimit = 2')
    grid = sweep.load_grid(write_grid(root, "drafters.toml", text))
    out = tmp_path / "sweep"
    res = sweep.run_sweep(grid, out, workers=2, progress=False)
    tasks = sweep.expand_grid(grid)
    assert res.ok and res.executed == res.tasks == len(tasks) == 2 * 7
    check_traces(out, tasks)
    df = sweep.load_sweep_summary(out)
    free = df[~df["drafter"].isin(["none", "model"])]
    assert set(free["drafter"]) == {"lookup:n=4,ngram=2", "suffix:n=8,depth=32,p=0.1"} and len(free) == 8
    assert (free["draft"] == free["drafter"]).all() and free["speedup"].notna().all()
    assert (free["mean_emitted_per_call_incl_bonus"] >= 1.0).all() and free["drafted_tokens"].sum() > 0
    outputs = {}
    for t in tasks:
        tr = load_trace(out / "traces" / f"{t.task_id}.jsonl")
        outputs[t.task_id] = [tr.ends[k]["output_ids"] for k in sorted(tr.ends)]
        if t.config.get("drafter"):
            assert tr.header["draft"]["name"] == t.config["drafter"]
            assert all("drafter" in s["policy_fields"] for s in tr.steps)
    ar = {t.meta["shard_hash"]: outputs[t.task_id] for t in tasks if t.config["policy"] == "autoregressive"}
    assert all(outputs[t.task_id] == ar[t.meta["shard_hash"]] for t in tasks)  # greedy: lossless
    m = sweep.speedup_matrix(df)
    assert set(m.index) == {f"{d} · {p}" for d in ("model", "lookup:n=4,ngram=2", "suffix:n=8,depth=32,p=0.1")
                            for p in ("fixed:3", "matchlen:factor=1,offset=2,max=8")}
    table = sweep_plots.setting_table(df)
    assert len(table) == 7 and table["speedup"].notna().all()
    row = table.set_index("setting").loc["lookup:n=4,ngram=2 · fixed:3"]
    lk = free[(free["drafter"] == "lookup:n=4,ngram=2") & (free["policy"] == "fixed:3")]
    assert row["mean_emitted_per_call_incl_bonus"] == pytest.approx(lk["new_tokens"].sum() / lk["target_calls"].sum())
    assert sweep_plots.speedup_heatmap(df).to_dict()["layout"]["yaxis"]["title"]["text"] == "drafter · policy"
