"""engine.trace.jsonio.atomic_path: a failed write leaves the old file and no temporary behind."""

import pytest

from engine.trace.jsonio import atomic_path, write_json_atomic


def test_atomic_path_replaces_on_success_and_keeps_old_on_failure(tmp_path):
    p = tmp_path / "sub" / "r.json"
    write_json_atomic({"a": 1}, p)
    assert p.read_text().replace(" ", "").replace("\n", "") == '{"a":1}'
    with pytest.raises(RuntimeError):
        with atomic_path(p) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert '"a"' in p.read_text()
    assert [x.name for x in p.parent.iterdir()] == ["r.json"]
    with atomic_path(p) as tmp:
        tmp.write_text("new")
    assert p.read_text() == "new"
