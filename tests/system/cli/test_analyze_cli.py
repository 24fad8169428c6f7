"""Window analysis: reference runs, the exact simulator (checked against real decode runs), the cost
model and closed forms (checked against the project notes' tables), the tables and the CLI."""

import argparse
import json
import pandas as pd
import pytest
import torch
from engine.offline.analysis import load_reference
from engine.core.lm import HFModel
from engine.offline.reference import ReferenceConfig, build_reference
from tests.conftest import noisy_copy

from tests.conftest import REF_CATS as CATS, REF_N_NEW as N_NEW, REF_PROMPTS as PROMPTS


def _cli(argv):
    from engine.cli.analysis import add_parser

    ap = argparse.ArgumentParser()
    add_parser(ap.add_subparsers(dest="cmd", required=True))
    a = ap.parse_args(argv)
    return a.func(a)


def test_cli_analyze_writes_tables(ref_path, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(["analyze", str(ref_path), "--costs", "measured,0.05,0.1@measured", "--gammas", "1-8",
                 "--policies", "heuristic;confidence:0.6", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "1.4x table" in text and "every simulated number is exact" in text
    assert "confidence ceiling" in text
    for name in ("window_table", "oracle_ratio", "policy_positions", "variability", "positions", "iid_theory",
                 "confidence_ceiling", "signals"):
        assert (out / f"{name}.csv").is_file()
        assert json.loads((out / f"{name}.json").read_text())["rows"]
    summary = json.loads((out / "summary.json").read_text())  # where and when, and where the timings came from
    assert summary["command"].startswith("python -m engine") and summary["date"].startswith("20")
    assert "cores" in summary["machine"] and summary["software"]["torch"]
    assert summary["references"][0]["source"].endswith(ref_path.name) and summary["references"][0]["software"]
    ot = pd.read_csv(out / "oracle_ratio.csv")
    assert {"c=0.05 flat", "c=0.1 measured-verify"} <= set(ot["cost"])


def test_cli_reference_end_to_end(tiny_target, sharp_draft, tmp_path, capsys):
    from tokenizers import Tokenizer, models as tm, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(63)} | {"[UNK]": 63}
    tk = Tokenizer(tm.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]")
    for name, m in (("t", tiny_target), ("d", sharp_draft)):
        m.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [" ".join(f"w{x}" for x in p)]})
                                 for i, (p, c) in enumerate(zip(PROMPTS, CATS))))
    ref_out = tmp_path / "r.jsonl"
    assert _cli(["reference", "--target", str(tmp_path / "t"), "--draft", str(tmp_path / "d"), "--prompts",
                 str(prompts), "--limit", "2", "--max-new-tokens", "12", "--dtype", "fp32", "--timing-repeats", "1",
                 "--out", str(ref_out)]) == 0
    r = load_reference(ref_out)
    assert len(r.requests) == 2 and r.requests[0]["prompt_ids"] == PROMPTS[0] and r.header["timings"]
    assert "python -m engine" in r.header["command"] and "wrote" in capsys.readouterr().out
    assert _cli(["analyze", str(ref_out), "--costs", "0.05"]) == 0
