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


APP = REPO / "app"
PAGE_FILE = __import__("re").compile(r"^pages/\w+\.py$")


def test_the_app_pages_are_listed_once():
    """app/site_map.py is the one list of pages (it was kept by hand in main.py, Overview's directory,
    measure_pages and three test files). The pages on disk are exactly the listed ones; no other app or
    test file names a page file ("pages/x.py") or spells out the list as a literal (all pages but at most
    three, by key, title or heading: a test's chosen handful is a choice, not a copy); main.py builds the
    navigation from the list; each page takes its heading from it."""
    from app import site_map

    assert {p.stem for p in (APP / "pages").glob("*.py")} == set(site_map.BY_KEY)
    assert [p.key for p in site_map.PAGES if p.default] == ["overview"]
    assert len({p.title for p in site_map.PAGES}) == len(site_map.PAGES)
    names = ({p.key for p in site_map.PAGES} | {p.title for p in site_map.PAGES}
             | {p.heading for p in site_map.PAGES})
    copy = len(site_map.PAGES) - 3  # a literal naming this many pages is a copy of the list
    files = [p for p in [*APP.rglob("*.py"), *(REPO / "tests").rglob("*.py")] if p != APP / "site_map.py"]
    spelled, lists = [], []
    for path in files:
        tree = ast.parse(path.read_text())
        spelled += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and PAGE_FILE.match(n.value)]
        lists += [f"{path.relative_to(REPO)}:{line}" for line, strings in _literal_strings(path)
                  if len(names & set(strings)) >= copy]
        lists += [f"{path.relative_to(REPO)}:{n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Dict)
                  and len(names & {k.value for k in n.keys if isinstance(k, ast.Constant)}) >= copy]
    assert not spelled, f"a page file named outside app/site_map.py (use site_map.file(key)): {spelled}"
    assert not lists, f"a hand-kept copy of the page list: {lists}"
    main = (APP / "main.py").read_text()
    assert "site_map.PAGES" in main and "st.Page(p.file" in main
    for key in site_map.BY_KEY:
        calls = [n for n in ast.walk(ast.parse((APP / "pages" / f"{key}.py").read_text()))
                 if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "title"]
        assert len(calls) == 1 and ast.unparse(calls[0].args[0]) == f"site_map.heading('{key}')", key


def test_no_app_module_over_about_400_lines():
    """The app's modules stay one concept each (docs/app.md): ~400 lines at most, as the engine's."""
    from tests.unit.test_layout import MAX_LINES

    long = {str(p.relative_to(REPO)): n for p in APP.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these app modules (> {MAX_LINES} lines): {long}"


def test_no_app_module_shadows_an_installed_package():
    """Streamlit puts app/ first on sys.path, so app/<name>.py is what `import <name>` finds there: an app module
    named like a library (app/tokenizers.py once hid HF's tokenizers, and every model load on Live failed)."""
    import importlib.machinery
    import sys

    from pathlib import Path

    app_dir = REPO / "app"
    path = [p for p in sys.path if Path(p or ".").resolve() not in (app_dir, REPO)]
    clashes = []
    for f in sorted(app_dir.glob("*.py")):
        if f.stem == "__init__":
            continue
        spec = importlib.machinery.PathFinder.find_spec(f.stem, path)
        if spec is not None or f.stem in sys.builtin_module_names:
            clashes.append(f.name)
    assert not clashes, f"app modules named like installed packages: {clashes}"
