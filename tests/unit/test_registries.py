"""Every registry has one source: the lists a developer extends are written once, and everything that lists
the same names derives from it (a second hand-kept copy would drift)."""

from __future__ import annotations

import ast

from tests.conftest import REPO

ENGINE = REPO / "engine"


def _literal_strings(path) -> list[tuple[int, tuple[str, ...]]]:
    """(line, strings) of every tuple / list / set literal of two or more strings in a file."""
    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, (ast.Tuple, ast.List, ast.Set)) and len(n.elts) >= 2 \
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts):
            out.append((n.lineno, tuple(e.value for e in n.elts)))
    return out


def test_importer_formats_come_from_the_readers_registry():
    """`python -m engine import FORMAT`'s choices are interop.formats.READERS (plus Spec-Bench's answer
    files), and no engine module outside interop/formats.py spells the peer formats out as a list."""
    from engine.cli.interop import peer_formats
    from engine.interop.formats import DESCRIPTIONS, EXAMPLES, READERS

    assert peer_formats() == tuple(READERS) and set(DESCRIPTIONS) == set(EXAMPLES) == set(READERS)
    import argparse

    from engine.cli import interop as cli

    sub = argparse.ArgumentParser().add_subparsers()
    cli.add_parser(sub)
    fmt = next(a for a in sub.choices["import"]._actions if a.dest == "format")
    assert list(fmt.choices) == ["specbench", *READERS]
    peers = set(READERS)
    copies = [(str(p.relative_to(REPO)), line) for p in ENGINE.rglob("*.py") if p.name != "formats.py"
              for line, strings in _literal_strings(p) if len(peers & set(strings)) >= 3]
    assert not copies, f"a hand-kept copy of the importer formats: {copies}"


def test_the_new_token_ceiling_is_written_once():
    """max_new_tokens' ceiling: engine.trace.check.MAX_NEW_TOKENS, read by DecodeConfig, RunSpec and the
    reference format (it was a literal in three places)."""
    import pytest

    from engine.decode import DecodeConfig
    from engine.spec import MAX_NEW_TOKENS as spec_max
    from engine.trace.check import MAX_NEW_TOKENS

    assert spec_max == MAX_NEW_TOKENS
    DecodeConfig(max_new_tokens=MAX_NEW_TOKENS)
    with pytest.raises(ValueError, match=f"\\[1, {MAX_NEW_TOKENS}\\]"):
        DecodeConfig(max_new_tokens=MAX_NEW_TOKENS + 1)
    literal = [str(p.relative_to(REPO)) for p in ENGINE.rglob("*.py") if "100_000" in p.read_text()
               and p.name != "check.py"]
    assert not literal, f"the ceiling written again: {literal}"
