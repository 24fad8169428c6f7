"""Window analysis: reference runs, the exact simulator (checked against real decode runs), the cost
model and closed forms (checked against the project notes' tables), the tables and the CLI."""
import json
import pytest
import torch
from engine.offline.analysis import load_reference
from engine.core.lm import HFModel
from engine.offline.reference import ReferenceConfig, build_reference
from engine.trace.reference_file import ReferenceFormatError, loads_reference
from tests.conftest import noisy_copy

from tests.conftest import REF_CATS as CATS, REF_N_NEW as N_NEW, REF_PROMPTS as PROMPTS


# ------------------------------------------------------------------ malformed reference files


def _lines(ref_path):
    return ref_path.read_bytes().split(b"\n")


def _corrupt(ref_path, line_no, edit):
    lines = _lines(ref_path)
    d = json.loads(lines[line_no - 1])
    edit(d)
    lines[line_no - 1] = json.dumps(d).encode()
    return b"\n".join(lines)


@pytest.mark.parametrize("line_no,edit,pattern", [
    (1, lambda d: d.update(schema="speclab.trace"), r"line 1: field 'schema'"),
    (1, lambda d: d.update(version=9), r"line 1: field 'version': unsupported version 9"),
    (1, lambda d: d.update(mode="beam"), r"line 1: field 'mode'"),
    (1, lambda d: d["timings"]["target_ms_by_tokens"].__setitem__(2, "fast"),
     r"line 1: field 'timings.target_ms_by_tokens\[2\]'"),
    (2, lambda d: d["accept_run"].__setitem__(0, d["accept_run"][0] + 1), r"line 2: field 'accept_run\[0\]'"),
    (2, lambda d: d["q_top"].__setitem__(3, 1.5), r"line 2: field 'q_top\[3\]': 1.5 outside"),
    (2, lambda d: d["entropy"].pop(), r"line 2: field 'entropy': has 39 entries, expected 40"),
    (3, lambda d: d["output_ids"].__setitem__(0, -4), r"line 3: field 'output_ids\[0\]': not a token id"),
    (3, lambda d: d.update(tails=d["tails"][1:]), r"line 3: field 'tails': no tail for mismatch position"),
    (3, lambda d: d.update(request_id=7), r"line 3: field 'request_id': expected 1, got 7"),
])
def test_malformed_reference_errors(ref_path, line_no, edit, pattern):
    with pytest.raises(ReferenceFormatError, match=pattern) as e:
        loads_reference(_corrupt(ref_path, line_no, edit), "ref.jsonl")
    assert "\n" not in str(e.value) and str(e.value).startswith("ref.jsonl: line")


def test_malformed_json_and_nan(ref_path):
    lines = _lines(ref_path)
    with pytest.raises(ReferenceFormatError, match=r"line 2: invalid JSON"):
        loads_reference(b"\n".join([lines[0], lines[1][:50]]), "ref.jsonl")
    with pytest.raises(ReferenceFormatError, match=r"line 2: invalid JSON"):
        loads_reference(b"\n".join([lines[0], lines[1].replace(b'"q_top": [', b'"q_top": [NaN, ', 1)]), "ref.jsonl")
    with pytest.raises(ReferenceFormatError, match="empty file"):
        loads_reference(b"", "ref.jsonl")
    r = loads_reference(b"\n".join(lines[:3]), "ref.jsonl")  # killed before the footer: loadable, flagged
    assert not r.complete and len(r.requests) == 2
