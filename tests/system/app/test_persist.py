"""app.persist without Streamlit: kept uploads are written atomically, restored once per content, and a file
that no longer loads gives one line and stays as it is."""

from __future__ import annotations

import os

from app import persist


def test_save_restore_and_edit(tmp_path, monkeypatch):
    monkeypatch.setenv(persist.ENV, str(tmp_path / "up"))
    assert persist.folder() == tmp_path / "up"
    p = persist.save("../../etc/run.jsonl", b"one")  # only the file name is kept
    assert p == tmp_path / "up" / "run.jsonl" and p.read_bytes() == b"one"
    assert [x.name for x in persist.files()] == ["run.jsonl"]  # no leftover .part file
    calls, seen = [], {}

    def add(name, data):
        calls.append((name, data))
        return (f"uploaded: {name}", None) if data == b"one" else (None, f"{name}: line 1: not JSON")

    assert persist.restore(add, seen) == {} and calls == [("run.jsonl", b"one")]
    assert persist.restore(add, seen) == {} and len(calls) == 1  # unchanged: not read again
    p.write_bytes(b"two, longer")  # edited in place: read again, and now it fails
    os.utime(p, (1, 1))
    errs = persist.restore(add, seen)
    assert list(errs) == ["run.jsonl"] and "\n" not in errs["run.jsonl"]
    assert errs["run.jsonl"].startswith("Kept upload run.jsonl: line 1: not JSON")
    assert p.read_bytes() == b"two, longer"  # left as it is
    assert persist.restore(add, seen) == errs and len(calls) == 2  # still reported, not re-read
    persist.remove("run.jsonl")
    assert persist.files() == [] and persist.restore(add, seen) == {} and seen == {}


def test_unwritable_folder_keeps_the_session_working(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv(persist.ENV, str(blocker / "up"))  # a folder below a file cannot be made
    assert persist.save("a.jsonl", b"x") is None and persist.files() == []
