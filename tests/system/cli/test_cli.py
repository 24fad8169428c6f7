"""The CLI end to end on tiny local model directories (with a real tokenizer built offline)."""

import json

import pytest

from engine.__main__ import main
from engine.trace.format import load_trace
from tests.conftest import WORDS, save_with_tokenizer, tiny_llama


def test_decode_then_validate(model_dirs, tmp_path, capsys):
    t, d, prompts = model_dirs
    out = tmp_path / "trace.jsonl"
    rc = main(["decode", "--target", str(t), "--draft", str(d), "--policy", "fixed:3", "--prompts", str(prompts),
               "--max-new-tokens", "12", "--dtype", "fp32", "--out", str(out)])
    assert rc == 0
    tr = load_trace(out)
    assert tr.complete and len(tr.requests) == 2 and tr.header["policy"]["spec"] == "fixed:3"
    assert tr.requests[0]["category"] == "writing" and tr.requests[0]["prompt_text"] == "w1 w2 w3 w4"
    assert tr.header["target"]["dtype"] == "float32"
    capsys.readouterr()
    assert main(["validate", str(out)]) == 0
    text = capsys.readouterr().out
    assert "OK" in text and "mean emitted per call (incl. bonus)" in text
    pq = tmp_path / "trace.parquet"
    assert main(["export", str(out), str(pq)]) == 0 and load_trace(pq).footer == tr.footer


def test_autoregressive_cli(model_dirs, tmp_path):
    t, _, prompts = model_dirs
    out = tmp_path / "ar.jsonl"
    assert main(["decode", "--target", str(t), "--prompts", str(prompts), "--max-new-tokens", "5",
                 "--out", str(out)]) == 0
    s = load_trace(out).summary
    assert s["mean_emitted_per_call_incl_bonus"] == 1.0 and s["target_calls"] == 10


def test_validate_reports_first_error(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header", "schema": "speclab.trace", "version": 9}\n')
    assert main(["validate", str(bad)]) == 1
    assert "INVALID" in capsys.readouterr().out


@pytest.mark.parametrize("args,msg", [
    (["--target", "/nonexistent/model"], "not a model directory"),
    (["--policy", "bogus:3"], "unknown policy 'bogus'"),
    (["--policy", "fixed:0"], "max window must be an integer in"),
    (["--temperature", "-2"], "temperature must be in"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be an integer in"),
])
def test_bad_input_one_line_error(model_dirs, tmp_path, capsys, args, msg):
    t, d, prompts = model_dirs
    base = {"--target": str(t), "--draft": str(d), "--prompts": str(prompts), "--out": str(tmp_path / "x.jsonl")}
    for k, v in zip(args[::2], args[1::2]):
        base[k] = v
    argv = ["decode"] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "x.jsonl").exists()


def test_mismatched_tokenizers_refused(model_dirs, tmp_path, capsys):
    t, _, prompts = model_dirs
    other = save_with_tokenizer(tiny_llama(5, vocab=80), tmp_path / "other", vocab=WORDS + [f"x{i}" for i in range(16)])
    assert main(["decode", "--target", str(t), "--draft", str(other), "--prompts", str(prompts),
                 "--out", str(tmp_path / "y.jsonl")]) == 2
    assert "draft vocabulary (80 tokens) differs from the target's (64 tokens)" in capsys.readouterr().err


def test_multidraft_decode_cli(model_dirs, tmp_path):
    t, d, prompts = model_dirs
    out = tmp_path / "rbv.jsonl"
    assert main(["decode", "--target", str(t), "--draft", str(d), "--policy", "fixed:3", "--verifier", "rbv",
                 "--k", "2", "--temperature", "0.8", "--prompts", str(prompts), "--max-new-tokens", "10",
                 "--dtype", "fp32", "--out", str(out)]) == 0
    tr = load_trace(out)
    assert tr.header["verifier"] == "rbv" and all(len(s["all_drafts"]) == 2 for s in tr.steps if s["window"])
    assert main(["decode", "--target", str(t), "--draft", str(d), "--k", "2", "--prompts", str(prompts),
                 "--out", str(tmp_path / "z.jsonl")]) == 2


def test_costs_command_solves_the_acceptance_each_window_needs(model_dirs, tmp_path, capsys):
    """`costs` measures c and v(γ) and, per γ, the α at which E[emitted]/cost(γ) reaches each speedup."""
    from engine.offline.costmodel import CostModel, expected_emitted

    t, d, _ = model_dirs
    out, md = tmp_path / "costs.json", tmp_path / "bench.md"
    assert main(["costs", "--target", str(t), "--draft", str(d), "--dtype", "fp32", "--threads", "1",
                 "--max-window", "4", "--repeats", "2", "--speedups", "1,1.3", "--out", str(out),
                 "--markdown", str(md)]) == 0
    res = json.loads(out.read_text())
    block = res["by_threads"][0]
    cm = CostModel.from_timings(block["timings"])
    assert block["c"] == pytest.approx(cm.c)
    assert [r["gamma"] for r in block["rows"]] == [1, 2, 3, 4]
    for r in block["rows"]:
        cost = r["gamma"] * cm.c + cm.v(r["gamma"])
        assert r["cost"] == pytest.approx(cost) and r["ceiling"] == pytest.approx((r["gamma"] + 1) / cost)
        for s in (1.0, 1.3):
            a = r[f"alpha_for_{s:g}x"]
            if a is None or a != a:  # NaN: unreachable even at α → 1
                assert r["ceiling"] < s
            elif a > 0:
                assert expected_emitted(a, r["gamma"]) / cost == pytest.approx(s, rel=1e-6)
    assert "α for 1.3x" in capsys.readouterr().out and "what acceptance" in md.read_text()


def test_costs_command_rejects_bad_settings(model_dirs, capsys):
    t, d, _ = model_dirs
    assert main(["costs", "--target", str(t), "--draft", str(d), "--threads", "0"]) != 0
    err = capsys.readouterr().err
    assert "--threads must be positive" in err and len(err.strip().splitlines()) == 1


def test_every_command_has_help_with_one_spelling_per_flag():
    """`python -m engine COMMAND --help` builds for every command; old spellings parse but are not listed."""
    from engine.__main__ import build_parser

    ap = build_parser()
    sub = next(a for a in ap._actions if a.dest == "cmd")
    assert {"decode", "validate", "export", "bench", "multibench", "audit", "sweep", "sweep-bench", "step-probe",
            "gpu-check", "loadbench", "costs", "reference", "analyze", "pacer", "dpace", "import", "models"} <= set(
        sub.choices)
    for name, p in sub.choices.items():
        text = p.format_help()
        assert "--per-category" not in text and "--temps " not in text, name
    a = ap.parse_args(["bench", "--per-category", "3", "--temperatures", "0"])
    assert a.per_task == 3
    a = ap.parse_args(["multibench", "--temps", "0.4", "--per-category", "2"])
    assert a.temperatures == "0.4" and a.per_task == 2
    assert a.out is None  # multibench never writes into docs/results/ unless asked
    a = ap.parse_args(["decode", "--target", "t", "--out", "o.jsonl"])
    from engine.paths import SPEC_BENCH_DEV

    assert a.prompts == str(SPEC_BENCH_DEV) and a.per_task is None


def test_multibench_takes_verifier_names_and_old_aliases():
    from engine.__main__ import build_parser
    from engine.bench.audit import audit_verifiers
    from engine.bench.multibench import METHODS
    from engine.cli.multibench import _config

    ap = build_parser()
    cfg = _config(ap.parse_args(["multibench", "--methods", "sd,bv,gbv,rbv", "--ks", "1,2", "--ls", "4"]))
    assert cfg.methods == ("token", "block", "spectr-gbv-published", "rbv")
    assert cfg.configs() == ["token:1:4", "block:1:4", "spectr-gbv-published:1:4", "spectr-gbv-published:2:4",
                             "rbv:2:4"]
    assert set(METHODS) <= set(audit_verifiers())  # every method is a registered verifier's name
    with pytest.raises(ValueError, match="unknown method"):
        _config(ap.parse_args(["multibench", "--methods", "sd,nope"]))


def test_one_metric_vocabulary():
    """Every result's per-call figures carry the trace summary's names; legacy names are read back."""
    from engine.metrics import ACCEPTANCE_RATE, ACCEPTED_PER_CALL, EMITTED_PER_CALL, canonical_row, rates

    r = rates(new_tokens=20, target_calls=8, accepted=12, drafted=16)
    assert r == {EMITTED_PER_CALL: 2.5, ACCEPTED_PER_CALL: 1.5, ACCEPTANCE_RATE: 0.75}
    assert rates(5, 5, 0, None)[ACCEPTANCE_RATE] is None  # nothing drafted (autoregressive): no rate
    old = {"emitted_per_call_incl_bonus": 2.0, "acceptance_rate": 0.5, "block_efficiency": 9.0, "x": 1}
    assert canonical_row(old) == {EMITTED_PER_CALL: 2.0, ACCEPTANCE_RATE: 0.5, "x": 1}
    assert canonical_row({"accepted_per_call": 1.0}) == {ACCEPTED_PER_CALL: 1.0}


def test_paired_multibench_records_its_machine_and_keeps_it_on_rerender(model_dirs, tmp_path, capsys):
    """The JSON names the machine and versions that produced it; re-rendering elsewhere keeps that machine."""
    t, d, prompts = model_dirs
    out, md = tmp_path / "paired.json", tmp_path / "bench.md"
    assert main(["multibench", "--paired", "--target", str(t), "--draft", str(d), "--dtype", "fp32",
                 "--threads", "1", "--prompts", str(prompts), "--per-task", "1", "--max-new-tokens", "4",
                 "--temperatures", "0.7", "--ks", "1,2", "--ls", "2", "--machine", "box A, flags: avx2",
                 "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["machine"] == "box A, flags: avx2" and {"torch", "transformers"} <= set(res["versions"])
    assert res["rows"] and res["command"]
    capsys.readouterr()
    assert main(["multibench", "--paired", "--from-json", str(out), "--markdown", str(md)]) == 0
    assert "box A, flags: avx2" in md.read_text()


def test_the_recorded_command_line_survives_a_copy_and_paste(monkeypatch):
    """Empty values and spaces are shell-quoted: `--vllm ''` must not swallow the next flag when re-run."""
    import shlex

    from engine.cli.common import KERNEL_SWITCHES, command_line

    argv = ["engine", "peers", "--speclab-quantized", "", "--vllm", "ar,draft:2", "--note", "two words"]
    monkeypatch.setattr("sys.argv", argv)
    for k in KERNEL_SWITCHES:
        monkeypatch.delenv(k, raising=False)
    line = command_line()
    assert shlex.split(line)[3:] == argv[1:]
    # a kernel switch set in the environment goes in front, so the line re-runs the same kernels
    monkeypatch.setenv("SPECLAB_QTILES", "1")
    assert shlex.split(command_line())[:4] == ["SPECLAB_QTILES=1", "python", "-m", "engine"]
    # the panel product switched off, and torch's GEMMs capped (a stand-in for another CPU): both in front too
    monkeypatch.setenv("SPECLAB_QPANEL", "0")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")
    assert shlex.split(command_line())[:5] == ["SPECLAB_QTILES=1", "SPECLAB_QPANEL=0",
                                               "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16", "python", "-m"]
