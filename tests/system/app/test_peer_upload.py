"""Serving engines' reports through the Upload page (AppTest): recognised on the way in, listed with an
example of each format, diagnosed, rendered on every page; hostile reports are one-line errors that
leave the session's other traces alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import site_map, traces
from tests.aiperf_runs import ar_of
from tests.conftest import MAIN, TIMEOUT

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "peers"
LLAMA = {"content": "x", "stop_type": "limit", "timings": {"prompt_n": 40, "prompt_ms": 610.2, "predicted_n": 48,
                                                            "predicted_ms": 3480.5, "draft_n": 52, "draft_n_accepted": 29}}
SGLANG = {"text": "y", "meta_info": {"completion_tokens": 48, "spec_verify_ct": 21, "e2e_latency": 2.9}}


@pytest.fixture()
def app(tmp_path, monkeypatch):
    d = tmp_path / "traces"
    d.mkdir()
    monkeypatch.setenv(traces.TRACES_ENV, str(d))
    at = AppTest.from_file(MAIN, default_timeout=TIMEOUT).run()
    at.switch_page(site_map.file("upload")).run()
    assert not at.exception
    return at


def upload(at: AppTest, *files: tuple[str, bytes]) -> AppTest:
    at.file_uploader(key="upload_files").set_value([(n, b, "application/octet-stream") for n, b in files]).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_peer_reports_load_diagnose_and_render_everywhere(app):
    assert any("Formats this page takes" in e.label for e in app.expander)
    files = [(p.name, p.read_bytes()) for p in (FIX / "vllm-draft-k4.jsonl", FIX / "vllm-ngram-k4.jsonl",
                                                FIX / "vllm-draft-k2.prom")]
    files += [("llama.json", json.dumps([LLAMA]).encode()), ("sglang.jsonl", json.dumps(SGLANG).encode())]
    at = upload(app, *files)
    assert not at.error, [e.value for e in at.error]
    assert len([s for s in at.success if "Loaded" in s.value]) == 5
    assert "Diagnose a run" in [h.value for h in at.subheader]
    assert any("Token-Weighted Acceptance Length" in m.label for m in at.metric)  # named as AIPerf names them
    assert any("Acceptance Length (per-request mean)" in m.label for m in at.metric)
    # the diagnosis shows a file just uploaded (the last with drafts), not a bundled trace
    assert at.selectbox(key="peer_diag_trace").value == "uploaded: sglang.jsonl"
    for label in ("uploaded: vllm-draft-k4.jsonl", "uploaded: llama.json", "uploaded: vllm-draft-k2.prom"):
        at.selectbox(key="peer_diag_trace").set_value(label).run()
        assert not at.exception, (label, [e.value for e in at.exception])
    for page in ("overview", "compare", "windows", "sweeps", "audit"):
        at.switch_page(site_map.file(page)).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        if page == "windows" and any(c.key == "win_in_run_imported" for c in at.checkbox):
            # uploads stay out of the in-run cost model until the user opts in
            assert at.checkbox(key="win_in_run_imported").value is False
    at.switch_page(site_map.file("replay")).run()
    for name in ("vllm-draft-k4.jsonl", "llama.json", "sglang.jsonl"):
        at.session_state["replay_trace"] = f"uploaded: {name}"
        at.run()
        assert not at.exception, (name, [e.value for e in at.exception])
        assert at.query_params.get("trace") in (f"uploaded: {name}", [f"uploaded: {name}"])  # a copied link opens it
        assert not any("verifier None" in c.value for c in at.caption)


def test_hostile_reports_are_one_line_and_the_session_survives(app):
    good = (FIX / "vllm-draft-k2.jsonl").read_bytes()
    at = upload(app, ("good.jsonl", good))
    bad = [("cut.jsonl", good[: len(good) // 2]),
           ("nan.json", json.dumps(LLAMA).replace("610.2", "NaN").encode()),
           ("wrong.prom", b"vllm:spec_decode_num_drafts_total 3.0\n"),
           ("huge.json", json.dumps({**SGLANG, "meta_info": {"completion_tokens": 10 ** 30,
                                                            "spec_verify_ct": 2}}).encode()),
           ("notes.txt", b"nothing to see\n")]
    at = upload(app, ("good.jsonl", good), *bad)
    msgs = [e.value for e in at.error]
    assert len(msgs) == len(bad), msgs
    for (name, _), m in zip(bad, msgs):
        assert m.startswith(f"{name}: ") and "\n" not in m, m
    assert list(at.session_state[traces.UPLOADS]) == ["uploaded: good.jsonl"]  # nothing half-loaded, nothing lost


def test_new_formats_and_an_ar_baseline_give_times_ar_and_why_low(app):
    run = (FIX / "aiperf-vllm-k3.jsonl").read_bytes()
    at = upload(app, ("aiperf.jsonl", run), ("aiperf-ar.jsonl", ar_of(run, 2.0)),
                ("stats.log", (FIX / "llamacpp-stats.log").read_bytes()))
    assert not at.error, [e.value for e in at.error]
    at.selectbox(key="peer_diag_trace").set_value("uploaded: aiperf.jsonl").run()
    assert "Why is acceptance low?" in " ".join(m.value for m in at.markdown)
    at.selectbox(key="peer_diag_ar").set_value("uploaded: aiperf-ar.jsonl").run()
    assert not at.exception, [e.value for e in at.exception]
    x = next(m for m in at.metric if m.label == "×AR (measured)")
    assert x.value == "2.00×"
    assert any("basis" in c.value and "wall time" in c.value for c in at.caption)  # the basis is stated
    at.selectbox(key="peer_diag_trace").set_value("uploaded: stats.log").run()
    assert not at.exception, [e.value for e in at.exception]


def test_an_imported_run_beside_the_lab_s_runs_of_the_same_pair(app, tmp_path):
    import shutil

    import pandas as pd

    from engine.interop import formats
    from engine.interop.same_pair import beside_ours, rejection_rows
    from engine.trace.format import load_trace

    bundled = Path(__file__).resolve().parents[3] / "traces"
    for n in ("qwen-fixed-2-t0.jsonl", "qwen-oracle-t0.jsonl"):  # the lab's runs of the pair, in the app's folder
        shutil.copy(bundled / n, tmp_path / "traces" / n)
    vllm = (FIX / "vllm-draft-k2.jsonl").read_bytes()
    head = (FIX / "llamacpp-draft-k2.jsonl").read_text().splitlines()[0]  # names the pair; the record has totals only
    totals = f"{head}\n{json.dumps({**LLAMA, 'category': 'qa'})}\n".encode()
    at = upload(app, ("vllm-k2.jsonl", vllm), ("totals.jsonl", totals),
                ("spec.log", (FIX / "llamacpp-speculative-simple-k4.log").read_bytes()))
    at.selectbox(key="peer_diag_trace").set_value("uploaded: vllm-k2.jsonl").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Beside the lab's own runs of the same pair" in " ".join(m.value for m in at.markdown)
    table = next(d.value for d in at.dataframe if "mean acceptance length" in d.value.columns)
    want = pd.DataFrame(rejection_rows(beside_ours(formats.loads_peer(vllm, "v.jsonl"),
                                                   {"qwen-fixed-2-t0.jsonl": load_trace(bundled / "qwen-fixed-2-t0.jsonl")},
                                                   "uploaded: vllm-k2.jsonl")))
    assert list(table["run"]) == list(want["run"]) and list(table["task"]) == list(want["task"])
    assert table["1"].tolist() == pytest.approx(want["1"].tolist())  # the engine's figures, as computed
    assert set(table["task"]) > {"all"} and "qwen-fixed-2-t0.jsonl" in set(table["run"])
    assert any(c.value.startswith("Left out: qwen-oracle-t0.jsonl") for c in at.caption)
    at.selectbox(key="peer_diag_trace").set_value("uploaded: totals.jsonl").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(i.value.startswith("The imported run: totals only") for i in at.info)
    at.selectbox(key="peer_diag_trace").set_value("uploaded: spec.log").run()
    assert any(c.value.startswith("Nothing to compare: the file does not name both models") for c in at.caption)
