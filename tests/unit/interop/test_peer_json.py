"""The hardened JSON layer under the peer importers: what a report may hold, and detection's first record."""

import pytest

from engine.interop.peer_json import HEADER, PeerError, first_json, json_lines


def test_lines_lists_and_a_byte_order_mark():
    assert [d for _, d in json_lines(b'\xef\xbb\xbf{"a": 1}\r\n\n{"a": 2}\n', "f.jsonl", "records")] == [{"a": 1}, {"a": 2}]
    assert [w for w, _ in json_lines(b'[{"a": 1}, {"a": 2}]', "f.json", "records")] == ["f.json: record 0",
                                                                                         "f.json: record 1"]


@pytest.mark.parametrize("data,msg", [
    (b"", "empty file"), (b'{"a": NaN}', "invalid JSON"), (b'{"a": 1e400}', "invalid JSON"),
    (b'{"a": "\\ud800"}', "lone surrogate"), (b"\xff\xfe{}", "not UTF-8"), (b"\0\0\0", "binary data"),
    (b'{"a": ' * 5000 + b"1" + b"}" * 5000, "nested too deeply|deep"),
    (('{"type": "%s"}\n{"a": 1}\n{"type": "%s"}\n' % (HEADER, HEADER)).encode(), "a second"),
])
def test_refusals_are_one_line_naming_the_file(data, msg):
    with pytest.raises(PeerError, match=msg) as e:
        json_lines(data, "f.jsonl", "records")
    assert "\n" not in str(e.value) and str(e.value).startswith("f.jsonl")


def test_first_record_for_detection():
    big = b'{"x": "' + b"y" * (2 << 20) + b'"}\n{"z": 1}\n'
    assert first_json(big)["x"].startswith("yyy")  # a first record over 1 MiB is still found
    assert first_json(('{"type": "%s"}\n{"req": 1}\n' % HEADER).encode()) == {"req": 1}
    assert first_json(b'[{"req": 2}, {"req": 3}]') == {"req": 2}
    assert first_json(b"not json") is None
