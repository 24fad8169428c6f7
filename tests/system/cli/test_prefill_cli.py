"""`python -m engine prefill`: a prefill's ms per token by length, every arm of every model and weights path
interleaved, into a table and a result file that carries the machine, the versions, the bandwidth and the command;
a weights path it does not know is refused in one line before anything loads."""

import json

from engine.__main__ import main


def test_prefill_times_each_arm_and_records_the_run(model_dirs, tmp_path, capsys):
    t, _, _ = model_dirs
    out = tmp_path / "prefill.json"
    assert main(["prefill", "--model", str(t), "--weights", "dense", "--lengths", "3,9", "--repeats", "1",
                 "--dtype", "fp32", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| dense ms/token |" in table and "read bandwidth" in table
    d = json.loads(out.read_text())
    assert sorted((r["arm"], r["tokens"]) for r in d["rows"]) == [("dense", 3), ("dense", 9)]
    assert all(r["ms_per_token"] > 0 for r in d["rows"])
    assert d["command"].startswith("python -m engine") or "SPECLAB_" in d["command"]  # the line as typed (sys.argv)
    assert d["created"] and d["machine"] and d["software"]["torch"] and d["bandwidth"]["gb_per_s"] > 0


def test_an_unknown_weights_path_is_refused_in_one_line(model_dirs, capsys):
    assert main(["prefill", "--model", str(model_dirs[0]), "--weights", "dense,int3"]) != 0
    err = capsys.readouterr().err
    assert "int3" in err and err.count("\n") == 1
