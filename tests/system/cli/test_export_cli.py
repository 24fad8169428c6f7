"""Downloads and exports without a browser: Perfetto step timings (engine.trace.perfetto and the export CLI),
trace Parquet bytes that load back, and table CSV bytes that read back as the same table
(app.downloads). Runs on the bundled traces in traces/; no torch."""

from __future__ import annotations
import json
from engine.trace.perfetto import to_perfetto
from engine.trace.format import load_trace
from tests.conftest import REPO



def test_export_cli_picks_the_format_by_suffix(tmp_path, capsys):
    from engine.__main__ import main

    src = REPO / "traces" / "demo-tiny-fixed2.jsonl"
    out = tmp_path / "run.perfetto.json"
    assert main(["export", str(src), str(out)]) == 0
    assert json.loads(out.read_text()) == json.loads(json.dumps(to_perfetto(load_trace(src))))
    pq = tmp_path / "run.parquet"
    assert main(["export", str(src), str(pq)]) == 0 and load_trace(pq).steps == load_trace(src).steps
    assert main(["export", str(src), str(tmp_path / "run.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: run.txt: export writes Parquet (.parquet)")
    assert main(["export", str(tmp_path / "missing.jsonl"), str(out)]) == 2
    assert "no such trace file" in capsys.readouterr().err
