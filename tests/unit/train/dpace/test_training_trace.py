"""D-PACE / DFlash / uniform position weights, the training-trace format, and a resumable smoke run."""
import json

import pytest
from engine.train.dpace.training_trace import TrainingTraceError, TrainingTraceWriter, load_training_trace


# ------------------------------------------------------------------ training traces


def _header(**kw):
    h = {"objective": "dpace", "alpha": 0.5, "gamma": None, "seed": 0, "block_size": 4, "steps": 10}
    h.update(kw)
    return h


def _write(path, lines):
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")


def good_records():
    log = {"type": "log", "step": 1, "loss": 1.0, "lr": 1e-3, "q": [0.5, 0.4, 0.3], "weight_share": [0.5, 0.3, 0.2],
           "surrogate": 0.9, "wall_s": 0.1}
    ev = {"type": "eval", "step": 1, "tau_offline": 1.5, "accept_by_pos": [0.5, 0.2, 0.1], "hist": [5, 3, 1, 1],
          "n_anchors": 10}
    return log, ev


def test_trace_roundtrip(tmp_path):
    log, ev = good_records()
    w = TrainingTraceWriter(tmp_path / "t.jsonl", _header())
    w.write(log)
    off = w.offset
    w.write(ev)
    w.close()
    t = load_training_trace(tmp_path / "t.jsonl")
    assert len(t.logs) == 1 and len(t.evals) == 1 and not t.complete
    # resume: truncate to the checkpoint offset, then append
    w = TrainingTraceWriter(tmp_path / "t.jsonl", None, resume_offset=off)
    w.write({"type": "footer", "final": {}})
    w.close()
    t = load_training_trace(tmp_path / "t.jsonl")
    assert len(t.evals) == 0 and t.complete


@pytest.mark.parametrize("mutate,line,field", [
    (lambda h, lg, ev: lg.update(q=[0.5, 0.4]), 2, "q"),
    (lambda h, lg, ev: lg.update(q=[0.5, 1.4, 0.3]), 2, "q[1]"),
    (lambda h, lg, ev: lg.update(loss="x"), 2, "loss"),
    (lambda h, lg, ev: lg.pop("surrogate"), 2, "surrogate"),
    (lambda h, lg, ev: ev.update(tau_offline=0.5), 3, "tau_offline"),
    (lambda h, lg, ev: ev.update(hist=[1, 2, 3, 4.5]), 3, "hist[3]"),
    (lambda h, lg, ev: h.update(objective="magic"), 1, "objective"),
    (lambda h, lg, ev: h.update(version=7), 1, "version"),
    (lambda h, lg, ev: ev.update(type="weird"), 3, "type"),
])
def test_trace_loader_rejects_malformed(tmp_path, mutate, line, field):
    log, ev = good_records()
    h = {"type": "header", "schema": "speclab.dpace_trace", "version": 1, **_header()}
    mutate(h, log, ev)
    _write(tmp_path / "bad.jsonl", [h, log, ev])
    with pytest.raises(TrainingTraceError) as e:
        load_training_trace(tmp_path / "bad.jsonl")
    msg = str(e.value)
    assert f"line {line}" in msg and f"'{field}'" in msg and "\n" not in msg


def test_trace_loader_rejects_bad_json_and_missing_header(tmp_path):
    _write(tmp_path / "a.jsonl", ['{"type": "log",'])
    with pytest.raises(TrainingTraceError, match="line 1: invalid JSON"):
        load_training_trace(tmp_path / "a.jsonl")
    log, _ = good_records()
    _write(tmp_path / "b.jsonl", [log])
    with pytest.raises(TrainingTraceError, match="line 1: field 'type'"):
        load_training_trace(tmp_path / "b.jsonl")


def test_trace_loader_reads_through_the_one_jsonl_reader(tmp_path):
    """engine.trace.parse with strict=True: a cut-off last line is refused (not dropped), binary data is
    named as such; both as TrainingTraceError."""
    log, ev = good_records()
    w = TrainingTraceWriter(tmp_path / "cut.jsonl", _header())
    w.write(log)
    w.write(ev)
    w.close()
    assert len(load_training_trace(tmp_path / "cut.jsonl").evals) == 1
    data = (tmp_path / "cut.jsonl").read_bytes()
    (tmp_path / "cut.jsonl").write_bytes(data[:-10])  # killed mid-line: the third line is cut
    with pytest.raises(TrainingTraceError, match="cut.jsonl: line 3: invalid JSON"):
        load_training_trace(tmp_path / "cut.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\x00\x01\x02")
    with pytest.raises(TrainingTraceError, match="binary data"):
        load_training_trace(tmp_path / "bin.jsonl")
