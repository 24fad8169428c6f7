"""Export and report of a finished head run: the model card and the training report say what was measured."""

import json

import pytest

from engine.train.eagle import train as T
from tests.unit.train.eagle.test_train import _cfg, toy  # noqa: F401  (toy: the module's feature fixture)


def test_export_and_report_of_a_finished_run(toy, tmp_path):
    from engine.train.eagle.report import export, report

    d, tdir = toy
    f = T.train(_cfg(d, tdir, tag="ex", epochs=0.5), progress=False)
    out = export(d / "runs" / "ex", tmp_path / "models" / "eagle-toy")
    card = (out / "README.md").read_text()
    assert f"{f['tau']:.3f}" in card and "python -m engine eagle train" in card and "--tag ex" in card
    assert json.loads((out / "config.json").read_text())["schema"] == "speclab.eagle_head"
    res = json.loads(report([str(d / "runs" / "ex")], tmp_path / "r.json", "cmd").read_text())
    row = res["rows"][0]
    assert row["run"] == "ex" and row["tau"] == round(f["tau"], 4) and row["curve"][0]["positions"] == 0
    assert res["command"] == "cmd" and res["software"]["torch"]
    with pytest.raises(FileNotFoundError, match="has not finished"):
        export(tmp_path, tmp_path / "x")
