"""The engine's layout rules (docs/architecture.md), checked on the source so a regression fails here.

- no import cycle among module-level imports;
- offline/, verify/ and trace/ never import train/ (analysis must not need training code);
- engine/ never imports app/;
- no engine file over ~400 lines;
- one device synchronisation (engine/measure.py), one reduced-head implementation (engine/core/lm.py),
  and decode is the only code that talks to a window policy (drafters get a keep() callback).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.conftest import REPO

ENGINE = REPO / "engine"
MAX_LINES = 420  # "about 400": a docstring's worth of slack, no more


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ENGINE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def _import_nodes(tree: ast.Module, top_level_only: bool) -> list[ast.AST]:
    """Import statements; with top_level_only, those that run when the module is imported (not
    inside a function body: lazy imports cannot form an import-time cycle)."""
    out, stack = [], [(tree, False)]
    while stack:
        cur, in_def = stack.pop()
        for child in ast.iter_child_nodes(cur):
            inside = in_def or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not (top_level_only and inside):
                out.append(child)
            stack.append((child, inside))
    return out


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Absolute engine/app modules imported by `path` (`from engine.x import y` → engine.x, and
    engine.x.y when that is itself a module)."""
    mods = set(_sources())
    out: set[str] = set()
    for n in _import_nodes(ast.parse(path.read_text()), top_level_only):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif n.module and n.level == 0:
            out.add(n.module)
            out |= {f"{n.module}.{a.name}" for a in n.names if f"{n.module}.{a.name}" in mods}
    return {m for m in out if m.split(".")[0] in ("engine", "app")}


def _graph(top_level_only: bool = True) -> dict[str, set[str]]:
    src = _sources()
    g: dict[str, set[str]] = {}
    for name, path in src.items():
        # An edge to the module named; a package's __init__ counts only when names are taken from it
        # (a parent package is always initialised before its submodule, which needs nothing from it).
        g[name] = {m for m in _imports(path, top_level_only) if m in src} - {name}
    return g


def test_no_import_cycle():
    g = _graph(top_level_only=False)  # lazy imports too: a dependency cycle is one even when deferred
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("package", ["engine.offline", "engine.verify", "engine.trace"])
def test_analysis_side_never_imports_training(package):
    bad = {name: sorted(m for m in _imports(path, top_level_only=False) if m.startswith("engine.train"))
           for name, path in _sources().items() if name == package or name.startswith(package + ".")}
    assert not {k: v for k, v in bad.items() if v}


def test_engine_never_imports_app():
    bad = {name: sorted(m for m in _imports(path, top_level_only=False) if m.split(".")[0] == "app")
           for name, path in _sources().items()}
    assert not {k: v for k, v in bad.items() if v}


def test_no_engine_file_over_about_400_lines():
    long = {str(p.relative_to(ENGINE.parent)): n for p in ENGINE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these along concept lines: {long}"


def _files_containing(text: str) -> list[str]:
    return sorted(str(p.relative_to(ENGINE.parent)) for p in ENGINE.rglob("*.py") if text in p.read_text())


def test_one_device_synchronisation():
    assert _files_containing("torch.cuda.synchronize") == ["engine/measure.py"]


def test_reduced_head_and_cache_internals_live_in_the_lm_wrapper_only():
    assert set(_files_containing("_cache_kw")) <= {"engine/core/lm.py"}
    assert set(_files_containing("_sub_weight")) <= {"engine/core/lm.py"}


def test_only_decode_talks_to_a_policy():
    drafters = ENGINE / "drafters"
    offenders = sorted(str(p.relative_to(ENGINE.parent)) for p in drafters.rglob("*.py")
                       if "policy." in p.read_text() or "WindowPolicy" in p.read_text())
    assert not offenders
