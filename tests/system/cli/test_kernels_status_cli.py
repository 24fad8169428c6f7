"""`python -m engine kernels --status`: which kernel path each weights path and each loaded model runs on here,
and why, without timing anything; a model on two weights paths gets one report per load."""

from engine.__main__ import main


def test_status_names_the_builds_the_paths_and_each_model(model_dirs, capsys):
    t, d, _ = model_dirs
    assert main(["kernels", "--status", "--model", str(t), "--model", str(d), "--dtype", "fp32"]) == 0
    out = capsys.readouterr().out
    for build in ("qgemm-avx512vnni", "qgemm-avx2", "bgemv"):
        assert build in out
    assert "OpenMP runtimes mapped" in out and "quantized" in out
    assert out.count("weights dense on cpu fp32: torch fp32") == 2  # one KernelReport per --model
    assert main(["kernels", "--status", "--model", str(t), "--dtype", "bf16", "--weights", "int8"]) == 0
    assert "weights int8 on cpu bf16" in capsys.readouterr().out


def test_model_without_status_is_refused_in_one_line(model_dirs, capsys):
    assert main(["kernels", "--model", str(model_dirs[0])]) != 0
    err = capsys.readouterr().err
    assert "--model goes with --status" in err and err.count("\n") == 1
