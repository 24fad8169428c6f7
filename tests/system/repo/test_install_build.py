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
