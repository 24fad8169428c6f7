"""engine.interop.formats: every listed example is detected as its own format and imports as a trace."""

import pytest

from engine.interop import formats
from engine.interop.peer import PeerError


@pytest.mark.parametrize("fmt", sorted(formats.EXAMPLES))
def test_every_example_is_detected_as_its_format(fmt):
    text = formats.EXAMPLES[fmt].replace("\n… one line per position", "")
    assert formats.detect(text.encode()) == fmt
    assert fmt in formats.DESCRIPTIONS


def test_the_vllm_example_imports_with_its_reported_figures():
    t = formats.loads_peer(formats.EXAMPLES["vllm"].encode(), "example.jsonl")
    spec = [s for s in t.steps if s.get("window")]  # the prompt's own call drafts nothing
    assert len(spec) == 1 and spec[0]["accepted"] == 1 and spec[0]["window"] == 2


def test_not_a_peer_file_is_none_and_an_unknown_format_is_one_line():
    assert formats.detect(b'{"type": "header", "schema": "speclab.trace"}') is None
    assert formats.detect(b"hello world") is None
    with pytest.raises(PeerError, match="unknown format 'tgi'"):
        formats.records("tgi", b"{}", "x.jsonl")
