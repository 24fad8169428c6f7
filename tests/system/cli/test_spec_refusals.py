"""`python -m engine decode` refuses what engine.spec.RunSpec.check refuses, in one line, before a
model loads: the model paths here do not exist, so a refusal that came after loading would name
them instead. Run alone: python -m pytest tests/system/cli/test_spec_refusals.py -q
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
MISSING = "/nonexistent/speclab-model"


def decode_cli(tmp_path, *args: str) -> tuple[int, str, Path]:
    out = tmp_path / "t.jsonl"
    p = subprocess.run([sys.executable, "-m", "engine", "decode", "--target", MISSING, *args, "--out", str(out)],
                       capture_output=True, text=True, timeout=120, cwd=REPO)
    return p.returncode, p.stderr.strip(), out


def test_oracle_under_sampling_is_refused_before_a_model_loads(tmp_path):
    rc, err, out = decode_cli(tmp_path, "--draft", MISSING + "-draft", "--policy", "oracle", "--temperature", "0.7")
    assert rc == 2 and not out.exists()
    assert err.splitlines() == ["error: 'oracle' is defined for greedy decoding only (T = 0)"], err
    assert MISSING not in err  # nothing was loaded


@pytest.mark.parametrize("args, words", [
    (("--draft", "lookup", "--policy", "oracle"), "'oracle' replays a plain draft model; the model-free drafter is not one"),
    (("--draft", "d", "--policy", "oracle", "--verifier", "rbv", "--k", "2"),
     "'oracle' is the greedy hindsight window: use a K = 1 verifier"),
    (("--draft", "suffix", "--policy", "pacer"), "'pacer' reads draft hidden states; the suffix drafter has none"),
    (("--draft", "d", "--policy", "pacer:b=2,trim=1", "--temperature", "0.5"),
     "'pacer:b=2,trim=1' drops drafts by value, exact for greedy decoding only"),
    (("--draft", "d", "--k", "3"), "--k 3 needs a multi-draft verifier"),
    (("--draft", "lookup", "--verifier", "rbv", "--k", "2"), "--draft lookup proposes one block per step"),
    (("--draft", "d", "--draft-context", "-5"), "bad draft context 'ctx:-5'"),
    (("--draft", "lookup", "--draft-context", "64"), "--draft-context: a context window is for a draft model"),
    (("--draft", "d", "--policy", "oracle", "--draft-context", "64"), "'oracle' replays the draft on the whole prompt"),
])
def test_other_refusals_come_before_any_load(tmp_path, monkeypatch, capsys, args, words):
    """In process, with the loader replaced by one that fails the test if it is ever called."""
    import engine.models.load as load
    from engine.__main__ import main

    def no_load(*a, **k):
        raise AssertionError("a model was loaded before the spec was checked")

    monkeypatch.setattr(load, "load_model", no_load)
    out = tmp_path / "t.jsonl"
    assert main(["decode", "--target", MISSING, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {words}"), err
    assert not out.exists()
