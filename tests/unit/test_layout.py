"""The engine's layout rules (docs/architecture.md), checked on the source so a regression fails here.

- no import cycle among module-level imports;
- offline/, verify/ and trace/ never import train/ (analysis must not need training code);
- engine/ never imports app/;
- no engine file over ~400 lines;
- one device synchronisation (engine/measure.py), one reduced-head implementation (engine/core/lm.py),
  and decode is the only code that talks to a window policy (drafters get a keep() callback);
- the floors go one way (FLOORS, docs/architecture.md "Floors"): a module imports only from lower floors;
- the tests mirror the tree (tests/README.md): every engine module with logic has its unit test file
  tests/unit/<package>/test_<module>.py (UNIT_TEST_EXEMPT says why the others have none), and no test
  file sits at tests/ top level.
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
    # An import check, deferred imports included: a drafter sees only the policy interface's types
    # (DraftInfo), never a policy module (PACER's block rule is Pacer.keep_block, reached via Keep).
    imports = {str(p.relative_to(ENGINE.parent)): _imports(p, top_level_only=False) for p in drafters.rglob("*.py")}
    reaching = {f: sorted(m for m in mods if m.startswith("engine.policies") and m != "engine.policies.base")
                for f, mods in imports.items()}
    assert not {f: m for f, m in reaching.items() if m}
    assert any("engine.policies.base" in mods for mods in imports.values())  # the check sees imports at all


def test_decode_calls_declared_protocol_methods_only():
    """No optional-attribute probes in the decode loop: targets, drafters and policies are typed seams."""
    src = (ENGINE / "decode.py").read_text()
    assert src.count("getattr") + src.count("hasattr") == 0


def test_native_code_lives_in_the_kernels_package():
    """engine/core/ split into kernels < core < models: the C, its loading through ctypes and the one switch
    that routes a model onto it sit in engine/kernels/ and nowhere else; the decode primitives stay in core/."""
    native = sorted(str(p.relative_to(ENGINE)) for ext in ("*.c", "*.h") for p in ENGINE.rglob(ext))
    assert native and all(n.startswith("kernels/") for n in native), native
    loaders = sorted(str(p.relative_to(ENGINE)) for p in ENGINE.rglob("*.py")
                     if "import ctypes" in p.read_text() or "ctypes.CDLL" in p.read_text())
    assert loaders and all(f.startswith("kernels/") for f in loaders), loaders
    assert (ENGINE / "kernels" / "accelerate.py").is_file() and (ENGINE / "models" / "load.py").is_file()
    moved = {"accelerate", "kernel_build", "dense_kernel", "qkernel", "quant", "fast_layer", "rowwise_attention",
             "load", "pair_weights", "provision", "smollm", "vocab_subset", "tiny", "gguf_types", "sharegpt"}
    assert not moved & {p.stem for p in (ENGINE / "core").glob("*.py")}


# Modules that may parse JSON line by line themselves; every other reader of a JSONL file goes through
# engine/trace/parse.py (parse_jsonl / read_jsonl: one set of refusals, one wording), each with the reason.
OWN_JSONL_LOOPS = {
    "engine/trace/parse.py": "the one JSONL reader",
    "engine/trace/jsonl.py": "its fast chunked path; falls back to parse_jsonl, same records and refusals",
    "engine/trace/parquet.py": "JSON text inside Parquet columns, through parse.py's own _loads",
    "engine/bench/peer_engines.py": "a peer process's protocol lines on a pipe, not a file",
    "engine/interop/peer_json.py": "open: a serving engine's JSON or JSONL with PeerError wording (to move onto parse_jsonl)",
    "engine/interop/specbench.py": "open: Spec-Bench answer files with SpecBenchError wording (to move onto parse_jsonl)",
}


def _json_loads_of_a_line(path: Path) -> list[int]:
    """Lines where `path` calls json.loads / orjson.loads / _loads on a line of text (`line`, `raw`, a slice or
    .decode() of one) inside a loop: a hand-written JSONL reader."""
    hits: list[int] = []

    def is_line(a: ast.AST) -> bool:
        if isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute):
            a = a.func.value  # raw.decode("utf-8")
        if isinstance(a, ast.Subscript):
            a = a.value  # line[len(PREFIX):]
        return isinstance(a, ast.Name) and a.id in ("line", "raw", "ln", "l")

    def walk(node: ast.AST, in_loop: bool) -> None:
        for c in ast.iter_child_nodes(node):
            loop = (in_loop or isinstance(c, (ast.For, ast.While, ast.comprehension))) and not isinstance(
                c, (ast.FunctionDef, ast.AsyncFunctionDef))
            f = getattr(c, "func", None)
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if in_loop and isinstance(c, ast.Call) and name in ("loads", "_loads") and c.args and is_line(c.args[0]):
                hits.append(c.lineno)
            walk(c, loop)

    walk(ast.parse(path.read_text()), False)
    return hits


def test_one_jsonl_reader():
    found = {str(p.relative_to(REPO)): n for p in ENGINE.rglob("*.py") if (n := _json_loads_of_a_line(p))}
    stray = {f: n for f, n in found.items() if f not in OWN_JSONL_LOOPS}
    assert not stray, f"read JSONL through engine.trace.parse.read_jsonl / parse_jsonl: {stray}"
    assert "engine/trace/parse.py" in found  # the check sees a JSONL loop at all


# ------------------------------------------------------------------ floors

# Lowest first. A module may import from a lower floor and from its own package (or itself), never
# from a higher floor or from another package on its own floor. Imports inside `if __name__ ==
# "__main__":` (the `python -m engine.x.y` shims that forward to engine/__main__.py) run only as a
# script, so they are not edges. A new package or top-level module goes on a floor here.
FLOORS: list[tuple[str, ...]] = [
    ("engine", "paths", "config", "metrics", "measure", "cost"),  # leaf modules: constants, flags, formulas, timing, step costs
    ("trace",),             # the record format: readers, writers, the one atomic write
    ("kernels",),           # how a linear or attention computes: our C kernels, their build, quantized layers, accelerate()
    ("core",),              # decode primitives: the LM wrapper, KV cache, sampling, tree attention, the Target protocol
    ("models",),            # model loading: by name, pair weights, provisioning, GGUF types, tokenizer-side data
    ("verify",),            # acceptance rules
    ("policies",),          # window policies (the oracle is handed its look-ahead by run/)
    ("drafters",),          # proposers; take a keep() callback, import only the policy base
    ("decode",),            # the loop
    ("hindsight",),         # greedy look-ahead by running the loop: the oracle's, the references'
    ("run", "spec"),        # requests through the loop, traces written; the run specification
    ("offline",),           # replay, cost model, advice
    ("interop",),           # other tools' files in and out; their runs diagnosed with the cost model
    ("bench",),             # timed runs, sweeps, audits
    ("train",),             # training drafters and PACER's M_B
    ("experiment", "results"),  # recipes as data and the results page rendered from their JSON
    ("cli",),               # argparse front ends
    ("__main__",),          # `python -m engine`
]


def _unit(module: str) -> str:
    """The floor unit of a module: its engine package (engine.core.lm → core) or top-level module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _is_main_guard(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return (isinstance(node, ast.If) and isinstance(t, ast.Compare) and isinstance(t.left, ast.Name)
            and t.left.id == "__name__" and any(isinstance(c, ast.Constant) and c.value == "__main__"
                                                for c in t.comparators))


def _imports_outside_main_guard(path: Path) -> set[str]:
    """Every engine module `path` imports (lazy ones too), except under `if __name__ == "__main__":`."""
    tree = ast.parse(path.read_text())
    tree.body = [n for n in tree.body if not _is_main_guard(n)]
    mods = set(_sources())
    out: set[str] = set()
    for n in _import_nodes(tree, top_level_only=False):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif n.module and n.level == 0:
            out.add(n.module)
            out |= {f"{n.module}.{a.name}" for a in n.names if f"{n.module}.{a.name}" in mods}
    return {m for m in out if m in mods}


def test_every_engine_package_is_on_one_floor():
    floor_of = [u for floor in FLOORS for u in floor]
    assert len(floor_of) == len(set(floor_of)), "a unit is on two floors"
    missing = sorted({_unit(m) for m in _sources()} - set(floor_of))
    assert not missing, f"put these on a floor in FLOORS (tests/unit/test_layout.py): {missing}"


def test_floors_go_one_way():
    level = {u: i for i, floor in enumerate(FLOORS) for u in floor}
    up = []
    for name, path in _sources().items():
        a = _unit(name)
        for m in sorted(_imports_outside_main_guard(path) - {name}):
            b = _unit(m)
            if a != b and level.get(b, -1) >= level.get(a, len(FLOORS)):
                up.append(f"{name} -> {m}")
    assert not up, f"imports that run up (or sideways) the floors {[f[0] for f in FLOORS]}: {up}"


# ------------------------------------------------------------------ the library and the lab

# The library is what a user imports to trace a decode: the floors up to run/spec (and the leaf modules,
# engine.cost among them). The lab stands on it: analysis, other tools' files, benchmarks, training,
# recipes, results and the command line. The floors already order them; these tests name the cut.
LIBRARY_TOP = ("run", "spec")
LIBRARY = {u for floor in FLOORS[:FLOORS.index(LIBRARY_TOP) + 1] for u in floor}
LAB = {u for floor in FLOORS[FLOORS.index(LIBRARY_TOP) + 1:] for u in floor}


def _library_modules() -> dict[str, Path]:
    return {m: p for m, p in _sources().items() if _unit(m) in LIBRARY}


def test_the_lab_is_every_floor_above_run_and_spec():
    assert LAB == {"offline", "interop", "bench", "train", "experiment", "results", "cli", "__main__"}
    assert "cost" in LIBRARY and "core" in LIBRARY and not LIBRARY & LAB
    assert {"kernels", "models"} <= LIBRARY  # engine/core/ split into kernels < core < models, all library


def test_the_library_never_imports_the_lab():
    """Walks every library module's imports (deferred ones too): none reaches offline/, interop/, bench/,
    train/, experiment, results or cli/."""
    bad = {m: sorted(i for i in _imports_outside_main_guard(p) if _unit(i) in LAB)
           for m, p in _library_modules().items()}
    bad = {m: i for m, i in bad.items() if i}
    assert not bad, f"the library imports the lab: {bad}"
    assert len(_library_modules()) > 50  # the walk sees the library


def test_replay_and_the_policies_probe_no_optional_attributes():
    """Seams are typed (WindowPolicy.price_with, replay.OwnSteps, RequestContext.book): no getattr/hasattr."""
    files = [ENGINE / "offline" / "replay.py", *sorted((ENGINE / "policies").glob("*.py"))]
    counts = {str(f.relative_to(REPO)): f.read_text().count("getattr") + f.read_text().count("hasattr")
              for f in files}
    assert not {f: n for f, n in counts.items() if n}, counts


ARCHITECTURE = REPO / "docs" / "architecture.md"


def test_architecture_names_every_library_module():
    """docs/architecture.md names every library module by its file (`core/lm.py`, `decode.py`, …), so the map
    cannot fall behind the library."""
    text = ARCHITECTURE.read_text()
    missing = []
    for m, p in _library_modules().items():
        rel = p.relative_to(ENGINE)
        if p.name == "__init__.py" and rel.parent != Path("."):
            continue  # a package is named by its folder's modules
        short = str(rel) if len(rel.parts) == 1 else f"{rel.parent.name}/{rel.name}"
        if short not in text and rel.name not in text:
            missing.append(str(rel))
    assert not missing, f"name these library modules in docs/architecture.md: {missing}"


# ------------------------------------------------------------------ the tests mirror the tree

TESTS = REPO / "tests"
UNIT = TESTS / "unit"
COVERED = "tested in "  # reason prefix: the module's behaviour is asserted in these unit/system files

# Engine modules without their own tests/unit/<package>/test_<module>.py, each with the reason.
# engine/cli/ and engine/__main__.py are exempt as a whole: argparse front ends, run through main([...])
# in tests/system/cli/. Package __init__ files are exempt (re-exports and docstrings).
UNIT_TEST_EXEMPT: dict[str, str] = {
    "engine.paths": "constants only (repository paths)",
    "engine.kernels.block_codecs": COVERED + "tests/unit/kernels/test_q4k.py, test_q50_q80.py, test_q6k.py (each layout "
                                   "against gguf-py's de-quantiser, the regrouped Q5_0 and back)",
    "engine.offline.oracles": "the three oracle names and the accepted-length bound: tested with advise, tests/unit/offline/test_advise.py",
    "engine.config": COVERED + "tests/system/train/test_dpace.py (flags from dataclasses) and every CLI test",
    "engine.metrics": COVERED + "tests/system/cli/test_cli.py (the one metric vocabulary) and every bench test",
    "engine.run": COVERED + "tests/unit/trace/test_format.py and tests/unit/offline/ (requests → traces)",
    "engine.models.load": COVERED + "tests/unit/models/test_provision.py and tests/unit/test_decode.py",
    "engine.models.smollm": "loads the real SmolLM2 pair: tests/system/smollm/test_smollm.py",
    "engine.models.tiny": "test fixtures' own builders (tests/conftest.py); the byte target in tests/unit/drafters/test_block.py",
    "engine.drafters.base": "the drafter protocol (no logic beyond the keep() callback shape)",
    "engine.drafters.block_model": COVERED + "tests/unit/drafters/test_block.py (mask, leakage, forward equality)",
    "engine.drafters.copier": COVERED + "tests/unit/drafters/test_lookup.py and test_suffix.py (the shared copier)",
    "engine.drafters.factory": COVERED + "tests/unit/drafters/test_block.py and tests/system/cli/ (spec → drafter)",
    "engine.offline.pacer_sweep": COVERED + "tests/unit/offline/test_steps.py and tests/system/cli/test_pacer_cli.py",
    "engine.policies.base": COVERED + "tests/unit/policies/ (parse_policy, DraftInfo in every policy test)",
    "engine.trace.assemble": COVERED + "tests/unit/trace/test_jsonl.py and test_fuzz.py (build_trace)",
    "engine.trace.check": COVERED + "tests/unit/trace/test_fuzz.py and test_format.py (per-record rules)",
    "engine.trace.chunks": COVERED + "tests/unit/trace/test_jsonl.py (chunked gathering)",
    "engine.trace.fields": "field-name constants only",
    "engine.trace.loadbench": COVERED + "tests/unit/trace/test_jsonl.py (a timing harness of the loader)",
    "engine.trace.model": "the Trace dataclass: tested in tests/unit/trace/test_format.py",
    "engine.trace.parquet": COVERED + "tests/unit/trace/test_format.py (parquet round trip)",
    "engine.trace.parse": COVERED + "tests/unit/trace/test_jsonl.py and test_fuzz.py",
    "engine.trace.prompts": COVERED + "tests/system/cli/ and tests/system/app/test_live_page.py (prompt files)",
    "engine.trace.read": COVERED + "tests/unit/offline/test_copy_source.py (trace reading for replay)",
    "engine.trace.screen": COVERED + "tests/unit/trace/test_jsonl.py and test_fuzz.py (vectorised screen)",
    "engine.bench.audit_report": COVERED + "tests/system/cli/test_audit_cli.py (the markdown report)",
    "engine.bench.gpu_check": COVERED + "tests/system/bench/test_gpu_check.py (runs the command)",
    "engine.bench.multibench_report": COVERED + "tests/unit/bench/test_multibench.py",
    "engine.bench.paired_report": COVERED + "tests/unit/bench/test_paired.py",
    "engine.bench.runner": COVERED + "tests/unit/bench/test_bench.py and tests/system/bench/test_bench_cli.py",
    "engine.bench.sweep": COVERED + "tests/unit/bench/test_sweep_grid.py and tests/system/sweep/ (Ray)",
    "engine.bench.sweep_bench": COVERED + "tests/system/sweep/test_sweep.py (tiny models for sweeps)",
    "engine.bench.sweep_summary": COVERED + "tests/system/sweep/test_sweep.py and tests/system/app/test_sweeps_page.py",
    "engine.bench.sweep_worker": "a Ray worker: tests/system/sweep/test_sweep.py (killed and failing tasks)",
    "engine.train.dpace.eval": "training: tests/system/train/test_dpace.py",
    "engine.train.dpace.export": "writes a model bundle: tests/system/train/test_dpace.py and the committed bundle's tests",
    "engine.train.dpace.features": "training: tests/system/train/test_dpace.py",
    "engine.train.dpace.fit": "training: tests/system/train/test_dpace.py (run, resume)",
    "engine.train.dpace.report": "training: tests/system/train/test_dpace.py",
    "engine.train.dpace.targets": "training: tests/system/train/test_dpace.py",
    "engine.train.dpace.tiny_target": "trains a model: tests/system/train/test_dpace.py",
    "engine.train.draft.batches": "reads ShareGPT through the wheel: tests/system/smollm/test_smollm.py",
    "engine.train.draft.evaluate": "training: tests/system/smollm/test_smollm.py",
    "engine.train.draft.fit": "training: tests/system/smollm/test_smollm.py (resume equals uninterrupted)",
    "engine.train.draft.gen": "training data from the real target: tests/system/smollm/test_smollm.py",
    "engine.train.draft.model": "the draft's save/load: tests/system/smollm/test_smollm.py",
}


def _unit_test_file(module: str) -> Path:
    parts = module.split(".")[1:]
    return UNIT.joinpath(*parts[:-1], f"test_{parts[-1]}.py")


def _modules_needing_a_unit_test() -> list[str]:
    return sorted(m for m, p in _sources().items()
                  if p.name not in ("__init__.py", "__main__.py") and not m.startswith("engine.cli."))


def test_every_engine_module_with_logic_has_a_unit_test_file():
    missing = [m for m in _modules_needing_a_unit_test()
               if m not in UNIT_TEST_EXEMPT and not _unit_test_file(m).is_file()]
    assert not missing, ("add tests/unit/<package>/test_<module>.py (or an UNIT_TEST_EXEMPT entry with the reason): "
                         f"{[str(_unit_test_file(m).relative_to(REPO)) for m in missing]}")


def test_exemptions_are_live():
    """An exemption for a module that is gone, or that now has its unit test file, is dropped."""
    mods = set(_modules_needing_a_unit_test())
    stale = sorted(m for m in UNIT_TEST_EXEMPT if m not in mods or _unit_test_file(m).is_file())
    assert not stale, f"drop these UNIT_TEST_EXEMPT entries: {stale}"


def test_unit_test_files_mirror_an_engine_module():
    """tests/unit/<package>/ holds only engine packages, so `find tests/unit -path '*policies*'` is the answer."""
    packages = {p.relative_to(ENGINE) for p in ENGINE.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    stray = sorted(str(d.relative_to(REPO)) for d in UNIT.rglob("*")
                   if d.is_dir() and d.name != "__pycache__" and d.relative_to(UNIT) not in packages)
    assert not stray, f"tests/unit/ folders must be engine packages: {stray}"


def test_no_stray_test_file_at_the_tests_top_level():
    stray = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not stray, f"move these into tests/unit/<package>/ or tests/system/<area>/: {stray}"


def test_every_test_folder_is_a_package():
    """tests/ and its folders are packages (tests/README.md): test modules import as tests.unit.core.test_lm,
    so two folders may each hold a test_fit.py."""
    dirs = {p.parent for p in TESTS.rglob("test_*.py")}
    dirs |= {d for x in list(dirs) for d in x.relative_to(TESTS).parents for d in [TESTS / d]}
    missing = sorted(str(d.relative_to(REPO)) for d in dirs if not (d / "__init__.py").is_file())
    assert not missing, f"add an empty __init__.py to: {missing}"
