"""The Streamlit app without a browser: every page through AppTest, plus the pure helpers behind them.

Pages run against small tiny-model traces generated once per module by `app.make_demo_traces` into a
temporary folder (SPECLAB_TRACES), so the assertions do not depend on whichever real traces sit in
traces/ — one test checks separately that every bundled file there loads. The Live page runs the
tiny random pair (SPECLAB_LIVE_MODELS=tiny). The browser-level checks live in test_app_browser.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from app import audit_view, data, downloads, plots, tokens
from engine.trace import load_trace

REPO = Path(__file__).resolve().parent.parent
MAIN = str(REPO / "app" / "main.py")
TIMEOUT = 120  # seconds per script run: the Live page imports torch on a busy 2-core machine


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    from app.make_demo_traces import main

    d = tmp_path_factory.mktemp("traces")
    assert main(["--out", str(d), "--max-new-tokens", "16", "--prompt-bytes", "12"]) == 0
    return d


@pytest.fixture()
def app(trace_dir, monkeypatch):
    monkeypatch.setenv(data.TRACES_ENV, str(trace_dir))
    monkeypatch.setenv("SPECLAB_LIVE_MODELS", "tiny")
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    assert not at.exception
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def broken_trace(trace_dir: Path) -> tuple[bytes, int]:
    """A valid trace with one step's `accepted` pushed past its window; returns (bytes, 1-based line)."""
    lines = (trace_dir / "demo-tiny-fixed4.jsonl").read_bytes().split(b"\n")
    i = next(k for k, ln in enumerate(lines) if b'"type": "step"' in ln)
    lines[i] = re.sub(rb'"accepted": \d+', b'"accepted": 99', lines[i], count=1)
    return b"\n".join(lines), i + 1


# ---------------------------------------------------------------- pages


def test_overview_cards(app):
    labels = [m.label for m in app.metric]
    n = len(data.bundled_paths(kind="trace"))
    assert n >= 7 and labels.count("tokens/s") == n and labels.count("emitted / call") == n
    assert any("traces loaded" in m.value for m in app.markdown)
    assert any("tiny-model demo" in i.value for i in app.info)
    # Every number on a card is the engine's own summary of that trace.
    e = data.all_traces()["demo-tiny-fixed4.jsonl"]
    assert str(e.info["summary"]["target_calls"]) in [m.value for m in app.metric]


def test_replay_slider_and_buttons_move_the_step(app):
    at = goto(app, "replay")
    assert at.selectbox(key="replay_trace").value == "demo-tiny-fixed4.jsonl"  # opens on the fixed baseline
    assert any(m.value.startswith("**Step 0 of") for m in at.markdown)
    at.slider(key="replay_step").set_value(3).run()
    assert any(m.value.startswith("**Step 3 of") for m in at.markdown)
    strip = next(m.value for m in at.markdown if "token-strip" in m.value)
    assert strip.count('class="current-step"') == 1 and "tok-accepted" in strip
    at.button(key="replay_play").click().run()
    assert at.session_state["replay_playing"] is True
    at.button(key="replay_play").click().run()
    assert at.session_state["replay_playing"] is False
    assert at.session_state["replay_step"] >= 3  # the play timer may have advanced it on a slow machine
    at.slider(key="replay_step").set_value(3).run()
    next_button = next(b for b in at.button if b.label == "Next")
    next_button.click().run()
    assert at.session_state["replay_step"] == 4
    assert len(at.get("plotly_chart")) >= 3  # timeline, heatmap, per-position rate
    figs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    timeline = next(f for f in figs if f["layout"]["title"]["text"] == "Tokens per verify call")
    assert {d["name"]: d["marker"]["color"] for d in timeline["data"] if d["type"] == "bar"} == {
        k: plots.COLORS[k] for k in ("accepted", "rejected", "correction", "bonus")}


def test_replay_switching_trace_resets_the_step(app):
    at = goto(app, "replay")
    at.slider(key="replay_step").set_value(2).run()
    at.selectbox(key="replay_trace").set_value("demo-tiny-heuristic.jsonl").run()
    assert at.session_state["replay_step"] == 0 and not at.exception
    assert any("heuristic" in c.value for c in at.caption)


def test_windows_page_uses_engine_analysis(app):
    at = goto(app, "windows")
    got = {m.label: m.value for m in at.metric}
    assert {"best fixed γ*", "oracle (a) speedup", "oracle ÷ best fixed"} <= set(got)
    before = got["speedup at γ*"]
    at.slider(key="win_c").set_value(0.3).run()
    assert not at.exception and {m.label: m.value for m in at.metric}["speedup at γ*"] != before
    titles = {json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")}
    assert {"Speedup vs window", "Cost of one speculative step", "Oracle ÷ best fixed window"} <= titles
    assert len(at.dataframe) >= 1
    at.segmented_control(key="win_task").set_value("qa").run()
    assert not at.exception


def test_windows_page_shows_pacer_ceiling(app):
    """The ceiling chart and table come from the bundled sweep result, share of the oracle per rule."""
    from app.data import PACER_SWEEP

    at = goto(app, "windows")
    titles = {json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")}
    assert "PACER vs the oracle as the draft gets cheaper" in titles
    at.segmented_control(key="win_ceil_split").set_value("greedy").run()
    assert not at.exception
    want = next(c for c in json.loads(PACER_SWEEP.read_text())["splits"]["greedy"]["ceiling"]
                if c["draft_cost_factor"] == 1.0)
    table = next(d.value for d in at.dataframe if "perfect pre-verifier" in d.value.columns)
    row = table[table["f"] == 1.0].iloc[0]
    assert row["perfect pre-verifier"] == pytest.approx(want["perfect_over_oracle"])
    assert row["best PACER"] == pytest.approx(want["pacer_over_oracle"]) and row["oracle"] == pytest.approx(1.0)


def test_windows_page_degrades_without_analysis(app, monkeypatch):
    monkeypatch.setitem(sys.modules, "engine.analysis", None)  # import now raises ImportError
    at = goto(app, "windows")
    assert any("Window analysis is unavailable" in w.value for w in at.warning)


def test_compare_page(app, trace_dir):
    at = goto(app, "compare")
    assert at.selectbox(key="cmp_a").value != at.selectbox(key="cmp_b").value
    assert any("target calls" in m.label for m in at.metric)
    table = at.dataframe[0].value
    # Every demo trace decodes the same prompts (one per Spec-Bench task, or the built-in fallback lines).
    n_prompts = len(load_trace(trace_dir / "demo-tiny-fixed4.jsonl").requests)
    assert len(table) == n_prompts and {"Δ calls", "Δ ms"} <= set(table.columns)
    at.slider(key="cmp_step").set_value(2).run()
    assert not at.exception


def test_malformed_upload_shows_one_line_error_and_nothing_else_breaks(app, trace_dir):
    at = goto(app, "upload")
    raw, line = broken_trace(trace_dir)
    at.file_uploader(key="upload_files").set_value(("broken.jsonl", raw, "application/json")).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "\n" not in errors[0]
    assert errors[0].startswith(f"broken.jsonl: line {line}: field 'accepted'")
    good = (trace_dir / "demo-tiny-heuristic.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(
        [("broken.jsonl", raw, "application/json"), ("mine.jsonl", good, "application/json")]).run()
    assert any("mine.jsonl" in s.value for s in at.success)
    for page in ("overview", "replay", "compare"):  # the upload is visible everywhere, the bad file nowhere
        goto(at, page)
    assert "uploaded: mine.jsonl" in at.selectbox(key="cmp_a").options
    assert not any("broken" in o for o in at.selectbox(key="cmp_a").options)


def test_parquet_upload(app, trace_dir, tmp_path):
    from engine.trace import load_trace, to_parquet

    pq = tmp_path / "t.parquet"
    to_parquet(load_trace(trace_dir / "demo-tiny-fixed2.jsonl"), pq)
    at = goto(app, "upload")
    at.file_uploader(key="upload_files").set_value(("t.parquet", pq.read_bytes(), "application/octet-stream")).run()
    assert not at.error and any("t.parquet" in s.value for s in at.success)
    at.file_uploader(key="upload_files").set_value(("junk.parquet", b"not parquet", "application/octet-stream")).run()
    assert len(at.error) == 1 and at.error[0].value.startswith("junk.parquet: not a readable Parquet file")


def test_reference_upload_reaches_windows(app, trace_dir):
    at = goto(app, "upload")
    ref = (trace_dir / "demo-tiny-reference.jsonl").read_bytes()
    at.file_uploader(key="upload_files").set_value(("my-ref.jsonl", ref, "application/json")).run()
    assert not at.error and any("1 reference runs" in m.value for m in at.subheader)
    bad = ref.replace(b'"mode": "greedy"', b'"mode": "fast"', 1)
    at.file_uploader(key="upload_files").set_value(("bad-ref.jsonl", bad, "application/json")).run()
    assert len(at.error) == 1 and at.error[0].value.startswith("bad-ref.jsonl: line 1")
    at = goto(at, "windows")
    assert "uploaded: my-ref.jsonl" in at.multiselect(key="win_refs").options


def test_live_page_decodes_side_by_side_and_opens_in_replay(app):
    at = goto(app, "live")
    assert any("tiny random demo models" in w.value for w in at.warning)
    at.number_input(key="live_max").set_value(8).run()
    at.button(key="live_run").click().run()
    assert not at.exception and not at.error
    assert [m.label for m in at.metric].count("target calls") == 2
    res = at.session_state["live_result"]
    assert res["state"] == "finished"
    from engine.trace import load_trace

    for side in ("A", "B"):
        t = load_trace(res["paths"][side])
        assert t.complete and t.summary["new_tokens"] == 8
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == [downloads.JSONL_LABEL, downloads.PARQUET_LABEL, downloads.PERFETTO_LABEL] * 2  # per side
    next(b for b in at.button if b.label == "Open A in Replay").click().run()
    assert not at.exception
    assert at.selectbox(key="replay_trace").value.startswith("live: live-A-")


def test_live_page_refuses_bad_input(app):
    at = goto(app, "live")
    at.text_area(key="live_text").set_value("   ").run()
    at.button(key="live_run").click().run()
    assert [e.value for e in at.error] == ["The prompt is empty: pick a question or type one."]
    at.text_area(key="live_text").set_value("hi").run()
    at.text_input(key="live_b").set_value("fixed:0").run()
    at.button(key="live_run").click().run()
    assert len(at.error) == 1 and at.error[0].value.startswith("Policy B:")


# ---------------------------------------------------------------- pure helpers


def test_add_trace_bytes_limits(monkeypatch):
    monkeypatch.setattr(data, "MAX_UPLOAD_MB", 0)
    label, err = data.add_trace_bytes("x.jsonl", b"{}")
    assert label is None and "exceeds the 0 MB upload limit" in err
    monkeypatch.setattr(data, "MAX_UPLOAD_MB", 50)
    assert "expected a .jsonl or .parquet" in data.add_trace_bytes("x.csv", b"a,b")[1]
    cfg = (REPO / ".streamlit" / "config.toml").read_text()
    assert f"maxUploadSize = {data.MAX_UPLOAD_MB}" in cfg  # the stated limit is the server's limit


def test_draft_fates_and_step_pieces():
    assert data.draft_fates(2, 4) == ["accepted", "accepted", "rejected", "pending"]
    assert data.draft_fates(3, 3) == ["accepted"] * 3
    step = {"draft_tokens": [5, 6, 7], "accepted": 1, "window": 3, "emitted_tokens": [5, 9], "bonus": None,
            "correction": 9, "q_draft": [0.9, 0.5, 0.4], "p_target": [0.8, 0.1, 0.3], "accept_probs": [1, 0.2, 0.7]}
    texts = {5: "a", 6: "<b>", 7: "c", 9: "d"}
    pieces = tokens.step_pieces(step, texts)
    assert [p[1] for p in pieces] == ["accepted", "rejected", "pending", "correction"]
    assert [p[1] for p in tokens.emitted_pieces(step, texts)] == ["accepted", "correction"]
    html = tokens.strip(pieces)
    assert "&lt;b&gt;" in html and "<b>" not in html  # token text is escaped
    assert plots.COLORS["rejected"] in html and "line-through" in html


def test_frames_and_describe(trace_dir):
    from engine.trace import load_trace

    t = load_trace(trace_dir / "demo-tiny-heuristic.jsonl")
    e = data.make_entry("x", "bundled", t)
    assert len(e.steps) == len(t.steps) and e.steps["emitted"].sum() == t.summary["new_tokens"]
    assert (e.steps["rejected"] == e.steps["window"] - e.steps["accepted"]).all()
    assert len(e.positions) == t.summary["drafted_tokens"]
    assert e.info["demo"] and e.info["policy"].startswith("heuristic") and "qa" in e.info["tasks"]
    req = data.requests_frame(t, e.steps)
    assert req["new_tokens"].sum() == t.summary["new_tokens"]


def test_figures_are_pure_and_share_the_palette(trace_dir):
    from engine.trace import load_trace

    e = data.make_entry("x", "bundled", load_trace(trace_dir / "demo-tiny-fixed4.jsonl"))
    one = e.steps[e.steps["request_id"] == 0]
    fig = plots.step_timeline(one, cursor=1).to_dict()
    assert any(s.get("type") == "line" for s in fig["layout"].get("shapes", []))  # the cursor
    heat = plots.position_heatmap(e.positions[e.positions["request_id"] == 0]).to_dict()
    assert heat["data"][0]["type"] == "heatmap" and heat["data"][0]["zmax"] == 1
    assert plots.policy_scores({}, 3) is None
    pf = plots.policy_scores({"scores": [0.9, 0.4, 0.2], "threshold": 0.5, "stop": "score"}, 3).to_dict()
    assert pf["data"][0]["y"] == (0.9, 0.4, 0.2) or list(pf["data"][0]["y"]) == [0.9, 0.4, 0.2]
    dist = pd.DataFrame({"policy": ["a", "a", "b"], "emitted": [1, 2, 3]})
    assert plots.accepted_distribution(dist, ecdf=True).to_dict()["data"][0]["type"] == "scatter"


def test_bundled_traces_all_load():
    """Whatever sits in traces/ (demo or real) must load, or the Overview reports it as broken."""
    paths = data.bundled_paths(REPO / "traces")
    assert paths, "traces/ should ship demo traces: python -m app.make_demo_traces"
    from engine.trace import load_trace

    for p in paths:
        load_trace(p)


def synthetic_sweep(folder: Path) -> Path:
    """A sweep folder with only summary.parquet (what the Sweeps page reads): 2 policies × 2 tasks."""
    from engine.sweep import SUMMARY_NAME, add_speedup

    rows = [{"task_id": f"{pol}-{task}", "pair": "p", "target": "t", "dtype": "fp32", "policy": pol,
             "verifier": "token", "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0, "max_new_tokens": 8,
             "chat": True, "task": task, "shard_hash": task, "prompts": 1, "new_tokens": 8,
             "decode_ms": 8 / tps * 1e3, "target_calls": 4, "accepted_per_call_excl_bonus": 0.5, "drafted_tokens": 4,
             "emitted_per_call_incl_bonus": 2.0, "acceptance_rate": 0.5, "tokens_per_s": tps}
            for pol, tps in (("autoregressive", 100.0), ("fixed:4", 150.0)) for task in ("qa", "rag")]
    folder.mkdir(parents=True, exist_ok=True)
    add_speedup(pd.DataFrame(rows)).to_parquet(folder / SUMMARY_NAME, index=False)
    return folder


TORCH_FREE_MODULES = ("app.data", "app.plots", "app.tokens", "app.downloads", "app.audit_view", "app.sweep_plots",
                      "app.dpace_plots", "engine.analysis", "engine.reference", "engine.simulate", "engine.sweep",
                      "engine.perfetto", "engine.trace", "engine.prompts")


def test_page_modules_do_not_import_torch():
    """A fresh interpreter importing what the torch-free pages use must not load torch (seconds to import)."""
    code = f"import importlib, sys\nfor m in {TORCH_FREE_MODULES!r}: importlib.import_module(m)\n" \
           "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_pages_other_than_live_do_not_import_torch(trace_dir, tmp_path):
    """Only the Live page may pull torch in: every other page, Windows (engine.analysis over reference
    runs), Sweeps, D-PACE and Audit included, runs in a fresh interpreter without it."""
    sweep = synthetic_sweep(tmp_path / "sweep")
    code = f"""
import os, sys
os.environ[{data.TRACES_ENV!r}] = {str(trace_dir)!r}
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


def test_live_run_waits_for_the_pair_lock(monkeypatch, tmp_path):
    """A second session must not decode on the shared models (and their KV caches) while one runs."""
    from app import live
    from engine.decode import DecodeConfig

    pair = live.demo_pair("tiny")
    ids, policies, err = live.check_inputs(pair, "hello", {"A": "fixed:2", "B": "autoregressive"}, 4)
    assert err is None and policies["B"] is None
    # Rules the decoder would refuse mid-run are refused up front, in one line.
    _, _, err = live.check_inputs(pair, "hello", {"A": "pacer:b=2,trim=1", "B": "fixed:2"}, 4, temperature=0.7)
    assert err.startswith("Policy A:") and "greedy decoding only" in err
    _, _, err = live.check_inputs(pair, "hello", {"A": "fixed:2", "B": "pacer"}, 4)
    assert err.startswith("Policy B:") and "576-dim" in err  # the bundled M_B belongs to the SmolLM2 draft
    monkeypatch.setattr(live, "LOCK_WAIT_S", 0.05)
    with pair.lock:  # another session is decoding
        with pytest.raises(TimeoutError, match="another session"):
            live.run_pair(pair, ids, "hello", {"A": "fixed:2", "B": "autoregressive"}, policies,
                          DecodeConfig(max_new_tokens=4), tmp_path, lambda *a: None)
    seen = []
    paths = live.run_pair(pair, ids, "hello", {"A": "fixed:2", "B": "autoregressive"}, policies,
                          DecodeConfig(max_new_tokens=4), tmp_path, lambda side, steps, done: seen.append(side))
    assert not pair.lock.locked() and set(seen) == {"A", "B"}
    from engine.trace import load_trace

    assert all(load_trace(p).complete for p in paths.values())


def test_replay_renders_pacer_style_policy_fields(app, trace_dir):
    """Whatever a policy logs is shown; per-block records with scores and thresholds get a chart."""
    lines = (trace_dir / "demo-tiny-fixed4.jsonl").read_text().split("\n")
    i = next(k for k, ln in enumerate(lines) if '"type": "step"' in ln)
    step = json.loads(lines[i])
    step["policy_fields"] = {"blocks": [
        {"block": 1, "tokens": [1, 2], "scores": [0.9, 0.7], "mean": 0.8, "t_before": 0.5, "t_after": 0.52,
         "decision": "continue"},
        {"block": 2, "tokens": [3, 4], "scores": [0.3, 0.2], "mean": 0.25, "t_before": 0.52, "t_after": 0.5,
         "decision": "stop"}], "stop": "pre_verify", "t0": 0.5}
    lines[i] = json.dumps(step)
    at = goto(app, "upload")
    at.file_uploader(key="upload_files").set_value(("pacer-like.jsonl", "\n".join(lines).encode(), "text/plain")).run()
    assert not at.error
    at.session_state["replay_trace"] = "uploaded: pacer-like.jsonl"
    at = goto(at, "replay")
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
    assert "Policy scores this step" in titles
    assert any(m.label == "stop reason" and "pre_verify" in m.value for m in at.metric)
    assert any("decision" in d.value.columns for d in at.dataframe)


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
        shown = [d.value for d in at.dataframe]
        buttons = [b for b in at.get("download_button") if b.proto.label == downloads.CSV_LABEL]
        assert shown and len(buttons) == len(shown) == len(made), page
        for df, (key, name, sent) in zip(shown, made):
            assert name and list(df.columns) == list(sent.columns) and len(df) == len(sent), (page, key)
            pd.testing.assert_frame_equal(df.reset_index(drop=True), sent.reset_index(drop=True), check_dtype=False)


def test_replay_offers_the_selected_trace_as_parquet_and_perfetto(app):
    at = goto(app, "replay")
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels[:2] == [downloads.PARQUET_LABEL, downloads.PERFETTO_LABEL]
    before = {b.proto.label: b.proto.deferred_file_id for b in at.get("download_button")}
    at.selectbox(key="replay_trace").set_value("demo-tiny-heuristic.jsonl").run()
    after = {b.proto.label: b.proto.deferred_file_id for b in at.get("download_button")}
    assert after[downloads.PARQUET_LABEL] and after[downloads.PARQUET_LABEL] != before[downloads.PARQUET_LABEL]


def draft_rows(html: str) -> list[dict]:
    """Parse app.tokens.multi_draft_html back into rows: draft index, chosen flag, token ids and fates."""
    rows = []
    for m in re.finditer(r'<div class="draft-row" data-draft="(\d+)" data-chosen="(true|false)"(.*?)</div>', html):
        spans = re.findall(r'<span class="tok-(\w+)"[^>]*>⟨(\d+)⟩</span>', m.group(3))
        rows.append({"draft": int(m.group(1)), "chosen": m.group(2) == "true",
                     "fates": [f for f, _ in spans], "ids": [int(t) for _, t in spans]})
    return rows


def multi_view(at: AppTest) -> list[dict]:
    html = [m.value for m in at.markdown if 'class="multi-draft"' in m.value]
    assert len(html) == 1
    return draft_rows(html[0])


def test_replay_shows_every_drafted_block_of_a_multi_draft_step(app, trace_dir):
    from engine.trace import load_trace

    name = "demo-tiny-rbv-k3-t07.jsonl"
    trace = load_trace(trace_dir / name)
    assert trace.header["verifier"] == "rbv" and trace.header["sampling"]["temperature"] == 0.7
    at = goto(app, "replay")
    at.selectbox(key="replay_trace").set_value(name).run()
    steps = [s for s in trace.steps if s["request_id"] == at.session_state["replay_req"]]
    k = min(2, len(steps) - 1)
    if len(steps) > 1:
        at.slider(key="replay_step").set_value(k).run()
    s = steps[k]
    rows = multi_view(at)
    assert len(rows) == len(s["all_drafts"]) == 3  # K strips
    chosen = [r for r in rows if r["chosen"]]
    assert len(chosen) == 1 and chosen[0]["draft"] == s["chosen"]
    n = s["window"]
    assert chosen[0]["ids"][:n] == s["draft_tokens"]  # the followed strip is the step's drafted block …
    assert chosen[0]["fates"][:n] == data.draft_fates(s["accepted"], n)  # … coloured by the verifier's outcome
    assert chosen[0]["ids"][n:] == s["emitted_tokens"][s["accepted"]:]  # then the correction / bonus
    for r in rows:
        if not r["chosen"]:
            assert r["ids"] == s["all_drafts"][r["draft"]] and set(r["fates"]) == {tokens.UNCHOSEN}


def test_multi_draft_view_follows_the_chosen_draft(app, trace_dir):
    """A step whose verifier followed draft 1 after rejecting: the star, the colours and the grey move with it."""
    lines = (trace_dir / "demo-tiny-rbv-k3-t07.jsonl").read_text().split("\n")
    i = next(j for j, ln in enumerate(lines) if '"type": "step"' in ln and '"request_id": 0' in ln)
    s = json.loads(lines[i])
    blocks = s["all_drafts"]
    blocks[0], blocks[1] = blocks[1], blocks[0]  # the followed block now sits at index 1
    s.update(chosen=1, accepted=1, emitted_tokens=[s["draft_tokens"][0], 7], correction=7, bonus=None,
             decisions=[1] + [0] * (s["window"] - 1))
    lines[i] = json.dumps(s)
    at = goto(app, "upload")
    at.file_uploader(key="upload_files").set_value(("md.jsonl", "\n".join(lines).encode(), "text/plain")).run()
    assert not at.error, [e.value for e in at.error]
    at.session_state["replay_trace"] = "uploaded: md.jsonl"
    at = goto(at, "replay")
    rows = multi_view(at)
    assert [r["chosen"] for r in rows] == [False, True, False]
    assert rows[1]["ids"] == s["draft_tokens"] + [7]
    assert rows[1]["fates"] == ["accepted", "rejected"] + ["pending"] * (s["window"] - 2) + ["correction"]
    assert rows[0]["ids"] == blocks[0] and set(rows[0]["fates"]) == {tokens.UNCHOSEN}


def test_multi_draft_rows_colour_only_the_chosen_block():
    step = {"all_drafts": [[1, 2], [3, 4]], "chosen": 1, "draft_tokens": [3, 4], "accepted": 2, "window": 2,
            "emitted_tokens": [3, 4, 5], "bonus": 5, "correction": None, "decisions": [0, 1],
            "q_draft": [0.5, 0.5], "p_target": [0.6, 0.6], "accept_probs": [1.0, 1.0]}
    texts = {i: f"<{i}>" for i in range(6)}
    rows = tokens.multi_draft_rows(step, texts)
    assert [r["chosen"] for r in rows] == [False, True]
    assert [p[1] for p in rows[1]["pieces"]] == ["accepted", "accepted", "bonus"]
    assert "coin ✗" in rows[1]["pieces"][0][2] and "coin ✓" in rows[1]["pieces"][1][2]  # BV: failed coin, accepted
    html = tokens.multi_draft_html(step, texts)
    assert "&lt;1&gt;" in html and "<1>" not in html and plots.COLORS["bonus"] in html
    assert html.count("★ followed") == 1 and html.count("○ not followed") == 1


def test_audit_page_shows_the_verdicts_of_the_csv(app, tmp_path):
    csv = REPO / "docs" / "results" / "audit.csv"
    at = goto(app, "audit")
    want = audit_view.verdicts(pd.read_csv(csv))
    pd.testing.assert_frame_equal(at.dataframe[0].value.reset_index(drop=True), want, check_dtype=False)
    not_ok = want.loc[want["verdict"] != "lossless", "verifier"].tolist()
    assert {m.label: m.value for m in at.metric}["NOT lossless"] == str(len(not_ok))
    assert len(at.warning) == len(not_ok) and all(any(n in w.value for w in at.warning) for n in not_ok)
    # One lossless row pushed to 1e-3 flips that verifier's verdict on the page.
    df = pd.read_csv(csv)
    i = df.index[df["verifier"] == "token"][0]
    df.loc[i, "lossless_error"] = 1e-3
    df.to_csv(tmp_path / "audit.csv", index=False)
    at.text_input(key="audit_csv").set_value(str(tmp_path / "audit.csv")).run()
    shown = at.dataframe[0].value.set_index("verifier")
    assert shown.at["token", "verdict"] == "NOT lossless" and shown.at["token", "worst_case"] == df.at[i, "case"]
    assert not at.exception
    at.text_input(key="audit_csv").set_value(str(tmp_path / "nope.csv")).run()
    assert len(at.error) == 1 and "no such audit file" in at.error[0].value


def test_example_prompts_cover_every_task_type():
    from engine.prompts import EXAMPLE_PROMPTS, MT_BENCH, task_of

    assert len(EXAMPLE_PROMPTS) == 6 and len({p.question_id for p in EXAMPLE_PROMPTS}) == 6
    cats = {p.category for p in EXAMPLE_PROMPTS}
    assert {"writing", "roleplay"} <= MT_BENCH and {"writing", "roleplay"} <= cats
    assert {task_of(c) for c in cats} >= {"mt_bench", "translation", "summarization", "math_reasoning"}
    assert cats & {"qa", "rag"}
    assert all(len(p.text) > 40 for p in EXAMPLE_PROMPTS)
    from app.live import DEV_QUESTIONS

    if DEV_QUESTIONS.is_file():  # written for the project, not copied from Spec-Bench
        bench = DEV_QUESTIONS.read_text()
        assert not any(p.text[:60] in bench for p in EXAMPLE_PROMPTS)


def test_live_works_without_the_spec_bench_file(app, monkeypatch, tmp_path):
    from app.demo_models import text_to_ids
    from engine.prompts import EXAMPLE_PROMPTS
    from engine.trace import load_trace

    monkeypatch.setenv("SPECLAB_SPEC_BENCH", str(tmp_path / "missing" / "questions_dev.jsonl"))
    at = goto(app, "live")
    options = at.selectbox(key="live_choice").options
    assert len(options) == 1 + len(EXAMPLE_PROMPTS)
    assert all(p.text[:60] in o for p, o in zip(EXAMPLE_PROMPTS, options[1:]))
    assert at.text_area(key="live_text").value == EXAMPLE_PROMPTS[0].text
    assert any("Spec-Bench questions not found" in c.value for c in at.caption)
    at.selectbox(key="live_choice").set_value(options[3]).run()
    assert at.text_area(key="live_text").value == EXAMPLE_PROMPTS[2].text
    at.number_input(key="live_max").set_value(6).run()
    at.button(key="live_run").click().run()
    assert not at.exception and not at.error
    res = at.session_state["live_result"]
    assert res["state"] == "finished"
    for side in ("A", "B"):
        t = load_trace(res["paths"][side])
        assert t.complete and t.requests[0]["prompt_text"] == EXAMPLE_PROMPTS[2].text
        assert t.requests[0]["prompt_ids"] == text_to_ids(EXAMPLE_PROMPTS[2].text) and t.summary["new_tokens"] == 6


def test_dpace_page_switches_between_bundled_results(app):
    """The D-PACE page offers every bundled results directory; each choice shows that directory's own
    summary (one row per objective, τ offline as in summary.json)."""
    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    at = goto(app, "dpace")
    radio = at.radio(key="dpace_which")
    present = [o for o in radio.options if o != "other directory…"]
    assert present, radio.options
    folders = {"SmolLM2": "dpace-smollm2", "B = 8": "dpace-b8"}
    for option in present:
        at = at.radio(key="dpace_which").set_value(option).run()
        assert not at.exception
        name = next((v for k, v in folders.items() if k in option), "dpace")
        summary = json.loads((results / name / "summary.json").read_text())["summary"]
        table = at.dataframe[0].value
        assert list(table["objective"]) == [r["label"] for r in summary], option
        assert table["τ offline"].round(3).tolist() == [round(r["tau_offline_mean"], 3) for r in summary]
