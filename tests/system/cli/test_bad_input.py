"""Bad input outside the trace loader: each refused in one line, and nothing half-written.

Out-of-range decode parameters (γ, K, L = --max-new-tokens, T, top-p, thresholds, limits), an
unreadable prompts file, a sweep grid with unknown keys, a full disk or a refused path while a trace
is written (what was flushed still loads), mismatched tokenizers and wrong model paths."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

import engine.trace.format as trace_mod
from engine.__main__ import main
from engine.decode import DecodeConfig
from engine.policies.base import parse_policy
from engine.run import Request, run_requests
from engine.trace.format import TraceWriteError, TraceWriter, load_trace
from tests.conftest import REPO

PROMPTS = REPO / "docs" / "examples" / "prompts-tiny.jsonl"


def decode_cli(tmp_path, capsys, *extra: str) -> str:
    """Run `decode` with a target that does not exist: a flag error must come first, alone."""
    out = tmp_path / "never.jsonl"
    rc = main(["decode", "--target", str(tmp_path / "no-model"), "--prompts", str(PROMPTS), "--out", str(out),
               *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and not out.exists(), (rc, err)
    return err


@pytest.mark.parametrize("flags,expect", [
    (("--draft", "d", "--policy", "fixed:0"), "max window must be an integer in [1, 64], got 0"),
    (("--draft", "d", "--policy", "fixed:4.5"), "max window must be an integer in [1, 64], got 4.5"),  # ran before
    (("--draft", "d", "--policy", "fixed:99"), "max window"),
    (("--draft", "d", "--verifier", "rrs", "--k", "0"), "--k must be an integer in [1, 16], got 0"),
    (("--draft", "d", "--verifier", "rrs", "--k", "99"), "--k must be an integer in [1, 16], got 99"),
    (("--k", "3",), "--k 3 needs a draft model"),
    (("--max-new-tokens", "0"), "--max-new-tokens must be an integer in [1, 100000], got 0"),
    (("--temperature", "-1"), "--temperature must be in [0, 100], got -1.0"),
    (("--temperature", "nan"), "--temperature must be in [0, 100], got nan"),
    (("--top-p", "1.5"), "--top-p must be in (0, 1], got 1.5"),
    (("--top-p", "0"), "--top-p must be in (0, 1], got 0.0"),
    (("--top-k", "-2"), "--top-k must be an integer"),
    (("--draft", "d", "--policy", "confidence:1.5"), "confidence threshold must be in [0, 1], got 1.5"),
    (("--draft", "d", "--policy", "cumulative:0"), "cumulative threshold must be in (0, 1)"),
    (("--draft", "d", "--policy", "entropy:-1"), "entropy threshold must be > 0"),
    (("--draft", "d", "--policy", "heuristic:2.5"), "heuristic start must be an integer"),
    (("--limit", "-3"), "--limit must be an integer in [1, 1e+07], got -3"),  # silently decoded 1 prompt before
    (("--per-task", "0"), "--per-task must be an integer"),
    (("--threads", "0"), "--threads must be an integer"),
    (("--threads", "4096"), "--threads must be an integer in [1, "),  # more threads than this machine's cores
    (("--weights", "int3"), "unknown weights path 'int3'; choose from dense, quantized, int8, int4"),
])
def test_out_of_range_parameters_fail_first_in_one_line(tmp_path, capsys, flags, expect):
    err = decode_cli(tmp_path, capsys, *flags)
    assert expect in err, err


@pytest.mark.parametrize("command,flags,expect", [
    ("bench", ("--weights", "dense,dense"), "--weights 'dense,dense': name each path once"),
    ("bench", ("--weights", "dense,fast"), "--weights: unknown weights path 'fast'"),
    ("costs", ("--weights", "int4", "--threads", "4096"), "--threads 4096 is more than this machine's"),
])
def test_weights_and_threads_refused_before_any_load(tmp_path, capsys, command, flags, expect):
    rc = main([command, "--target", str(tmp_path / "no-model"), *flags])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and expect in err and "\n" not in err, err


def test_wrong_model_path_is_one_line(tmp_path, capsys):
    err = decode_cli(tmp_path, capsys)
    assert "no-model" in err and "not a model directory" in err


def test_unreadable_prompts_files(tmp_path, capsys, monkeypatch):
    from engine.trace.prompts import load_prompts

    with pytest.raises(ValueError, match="is not a file"):
        load_prompts(tmp_path)
    binary = tmp_path / "p.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match=r"^prompts file p.jsonl: not UTF-8 text \(byte 0\)$"):
        load_prompts(binary)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ValueError, match="deep.jsonl: line 1: invalid JSON"):
        load_prompts(deep)
    with pytest.raises(ValueError, match="limit must be a positive integer, got -3"):
        load_prompts(PROMPTS, limit=-3)
    ok = tmp_path / "ok.jsonl"
    ok.write_text(PROMPTS.read_text())

    def denied(self):
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(ValueError, match=r"^prompts file ok.jsonl: cannot read \(Permission denied\)$"):
        load_prompts(ok)
    monkeypatch.undo()
    out = tmp_path / "never.jsonl"
    assert main(["decode", "--target", "x", "--prompts", str(binary), "--out", str(out)]) == 2
    assert "not UTF-8" in capsys.readouterr().err and not out.exists()


def test_sweep_grid_with_unknown_keys(tmp_path):
    from engine.bench import sweep

    (tmp_path / "p.jsonl").write_text(PROMPTS.read_text())
    base = 'policies = ["autoregressive"]\n[[pairs]]\ntarget = "t"\n{pair}[[prompts]]\nfile = "p.jsonl"\n{prompts}'
    for extra, where in ((("typo = 1\n", ""), "unknown keys ['typo']"), (("", "per_catgory = 1\n"), "[[prompts]]"),
                         (("dtpye = \"fp32\"\n", ""), "[[pairs]]")):
        f = tmp_path / "g.toml"
        f.write_text(("top_p_x = 1\n" if where.startswith("unknown") else "") + base.format(pair=extra[0],
                                                                                           prompts=extra[1]))
        with pytest.raises(ValueError) as e:
            sweep.expand_grid(sweep.load_grid(f))
        assert "unknown keys" in str(e.value) and "\n" not in str(e.value), str(e.value)


class FullDisk:
    """A text file that accepts `budget` characters, then writes half of the next line and fails."""

    def __init__(self, f, budget: int) -> None:
        self.f, self.budget, self.closed = f, budget, False

    def write(self, s: str) -> int:
        if len(s) > self.budget:
            self.f.write(s[: len(s) // 2])
            self.f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")
        self.budget -= len(s)
        return self.f.write(s)

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.closed = True
        self.f.close()


def test_disk_full_mid_trace_leaves_a_loadable_prefix(pair, tmp_path, monkeypatch):
    target, draft = pair
    path = tmp_path / "full.jsonl"
    real_open = open
    monkeypatch.setattr(trace_mod, "open", lambda p, *a, **k: FullDisk(real_open(p, *a, **k), 6000),
                        raising=False)
    with pytest.raises(TraceWriteError) as e:
        run_requests(target, draft, parse_policy("fixed:2"), DecodeConfig(max_new_tokens=40),
                     [Request([1, 2, 3]), Request([4, 5])], path, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("cannot write trace full.jsonl: No space left on device")
    monkeypatch.undo()
    t = load_trace(path)  # everything up to the last complete line, the half line dropped
    assert not t.complete and t.steps and any("cut off" in w for w in t.warnings)
    lines = path.read_text().split("\n")
    assert len(t.steps) == sum('"type": "step"' in ln for ln in lines[:-1])


def test_unwritable_trace_path_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TraceWriteError, match="^cannot write trace .*file/sub/t.jsonl: "):
        TraceWriter(blocker / "sub" / "t.jsonl", {})
    with pytest.raises(TraceWriteError, match="^cannot write trace"):
        TraceWriter(tmp_path, {})  # a directory


def test_mismatched_tokenizers_are_refused(pair):
    from engine.models.load import check_pair

    target, draft = pair

    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    with pytest.raises(ValueError, match=r"draft tokenizer \(2 tokens\) differs from the target's \(2 tokens\) on 1"):
        check_pair(target, draft, Tok({"a": 0, "b": 1}), Tok({"a": 0, "c": 1}))

    class Small:
        vocab_size = 7

    with pytest.raises(ValueError, match="draft vocabulary \\(7 tokens\\) differs"):
        check_pair(target, Small())


def test_cli_refuses_a_trace_it_cannot_write(tmp_path, capsys, monkeypatch):
    """The writer's error reaches the command line as one line (TraceWriteError is a ValueError)."""
    from engine import __main__ as cli
    from engine.cli import decode as decode_cli

    def boom(a):
        TraceWriter(tmp_path, {})

    monkeypatch.setattr(decode_cli, "cmd_decode", boom)
    assert cli.main(["decode", "--target", "t", "--prompts", str(PROMPTS), "--out", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot write trace") and "\n" not in err
    json.dumps(err)


def test_threads_auto_takes_the_free_cores_and_a_word_is_refused(monkeypatch, capsys):
    import engine.bench.cores as cores
    from engine.cli.common import thread_count

    monkeypatch.setattr(cores, "busy_cores", lambda: {"ok": False, "busy": {"cpu1": 0.9},
                                                      "shares": {"cpu0": 0.0, "cpu1": 0.9}})
    assert thread_count("auto") == 1 and thread_count("2") == 2
    with pytest.raises(SystemExit):
        main(["decode", "--prompt", "x", "--threads", "two"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--threads takes a whole number or 'auto', got 'two'" in err
