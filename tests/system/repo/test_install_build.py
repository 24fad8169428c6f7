"""The install step builds the C kernels: setup.py's build_ext compiles every build of
engine/kernels/kernel_build.py into the package, under the names the run-time lookup expects (what
`pip install .` and `pip install -e .` run; the quick tier's compile check is tests/unit/kernels/test_kernel_build.py)."""

import platform
import shutil
import subprocess
import sys

import pytest

from engine.kernels import kernel_build as kb
from tests.conftest import REPO


@pytest.mark.skipif(shutil.which("cc") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="the kernels are x86 C and need a C compiler")
def test_build_ext_builds_every_kernel_where_the_run_looks(tmp_path):
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(tmp_path), "--build-temp",
                        str(tmp_path / "tmp")], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "not built" not in r.stderr, r.stderr[-2000:]
    built = {p.name for p in (tmp_path / "engine" / "kernels").glob("_kernel_*")}
    assert built == {kb.module_name(b) + kb.ext_suffix() for b in kb.BUILDS.values()}


@pytest.mark.skipif(shutil.which("cc") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="the kernels are x86 C and need a C compiler")
def test_a_non_editable_install_carries_the_sources_and_runs_the_installed_kernels(tmp_path):
    """`pip install .` (non-editable) installs a wheel: it must hold the kernel sources (package data, for the
    tag check and a first-use rebuild) and every built library, and the installed package — away from this
    checkout — must find its own libraries (`installed`, not the cache build)."""
    import os
    import zipfile

    src = tmp_path / "src"
    for name in ("engine", "app"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "_kernel_*"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("speclab-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {p.name for p in kb.HERE.glob("*.c")} | {p.name for p in kb.HERE.glob("*.h")}
    assert {f"engine/kernels/{s}" for s in sources} <= names, sorted(n for n in names if "kernels/" in n)
    built = {n.rsplit("/", 1)[1] for n in names if n.startswith("engine/kernels/_kernel_")}
    assert built == {kb.module_name(b) + kb.ext_suffix() for b in kb.BUILDS.values()}

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("from engine.kernels import kernel_build as kb, qkernel\n"
            "print(kb.HERE)\n"
            "print(all(kb.installed(b) is not None for b in kb.BUILDS.values()))\n"
            "print(qkernel.available() is None and qkernel.built())\n")
    env = {**os.environ, "PYTHONPATH": str(site), "SPECLAB_CACHE": str(tmp_path / "cache")}
    env.pop("SPECLAB_KERNEL_BUILD", None)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    here, every, qgemm = r.stdout.split("\n")[:3]
    assert here == str(site / "engine" / "kernels") and every == "True"
    assert qgemm in ("installed", "False")  # where our qgemm runs here, it is the installed library, never a rebuild
    assert not (tmp_path / "cache").exists()
