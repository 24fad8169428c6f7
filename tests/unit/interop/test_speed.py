"""Spec-Bench answer files ⇄ traces (engine.interop.specbench), speed.py's metric (engine.interop.speed)
and the accepted-length bound (engine.interop.bounds)."""

import numpy as np
import pytest
from engine.interop import specbench, speed
from tests.specbench_answers import PLD, SPS, VANILLA, answer_file


def words(text: str) -> int:
    """Stand-in for speed.py's `len(tokenizer(turn).input_ids) - 1`: a BOS plus one id per word."""
    return len(["<s>"] + text.split()) - 1


def reference_speedup(method_rows, base_rows, task):
    """speed.py's formula, re-implemented from its source independently of engine.interop.speed."""
    mt = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]
    keep = (lambda c: True) if task == "overall" else (lambda c: c in mt) if task == "mt_bench" else (lambda c: c == task)
    speeds = [sum(r[3]) / sum(r[4]) for r in method_rows if keep(r[1])]
    speeds0 = [sum(words(t) for t in r[2]) / sum(r[4]) for r in base_rows if keep(r[1])]
    acc = [x for r in method_rows if keep(r[1]) for x in r[5]]
    return np.array(speeds).mean() / np.array(speeds0).mean(), np.array(speeds).mean(), np.mean(acc)


@pytest.mark.parametrize("rows", [SPS, PLD], ids=["sps", "pld"])
@pytest.mark.parametrize("task", ["overall", "mt_bench", "translation"])
def test_speedup_matches_speed_py(tmp_path, rows, task):
    method = specbench.read_answers(answer_file(tmp_path / "m.jsonl", rows, "m"))
    base = specbench.read_answers(answer_file(tmp_path / "b.jsonl", VANILLA, "vanilla"))
    got = speed.speed(method, base, words, task)
    want, tps, mean_acc = reference_speedup(rows, VANILLA, task)
    assert got["speedup"] == pytest.approx(want, rel=1e-12)
    assert got["tokens_per_s"] == pytest.approx(tps, rel=1e-12)
    assert got["mean_emitted_per_call_incl_bonus"] == pytest.approx(mean_acc, rel=1e-12)
