"""Provisioning of the optional Qwen pair on synthetic part wheels made here (no 1.6 GB download):
order, hashes and the header-implied size are checked, and a failure leaves nothing a load trusts."""
import subprocess
import sys
import pytest
from tests.conftest import REPO


@pytest.mark.parametrize("cmd", ["decode", "bench", "costs"])
def test_cli_names_the_missing_model_and_the_fix(tmp_path, cmd):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    args = {"decode": ["decode", "--target", "qwen2.5-coder-1.5b", "--draft", "qwen2.5-coder-0.5b",
                       "--prompts", str(prompts), "--out", str(tmp_path / "t.jsonl")],
            "bench": ["bench", "--target", "qwen2.5-coder-1.5b", "--draft", "qwen2.5-coder-0.5b",
                      "--prompts", str(prompts), "--configs", "ar,fixed:2", "--temperatures", "0"],
            "costs": ["costs", "--target", "qwen2.5-coder-1.5b", "--draft", "qwen2.5-coder-0.5b"]}[cmd]
    env = {**__import__("os").environ, "SPECLAB_CACHE": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert lines[-1].startswith("error: model qwen2.5-coder-1.5b is not installed: run `make models`"), r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "t.jsonl").exists()
