"""The install step's one addition to pyproject.toml: compile the C kernels (engine/kernels/*.c) into the package.

Every build in engine/kernels/kernel_build.py (the one table of sources, CPU flags and compiler flags) is
declared as an extension module, so `pip install .`, `pip install -e .` and `python setup.py build_ext`
compile them all whatever this CPU runs (the run-time check picks the build). A build that cannot be
compiled here (no C compiler, no OpenMP) warns and is left to the first-use build or torch;
SPECLAB_REQUIRE_KERNELS=1 makes it an error.
"""

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_spec = importlib.util.spec_from_file_location("speclab_kernel_build",
                                               Path(__file__).resolve().parent / "engine" / "kernels" / "kernel_build.py")
kb = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = kb  # dataclasses look their module up
_spec.loader.exec_module(kb)
BY_EXTENSION = {f"engine.kernels.{kb.module_name(b)}": b for b in kb.BUILDS.values()}


class BuildKernels(build_ext):
    """Each extension is one kernel library, compiled by kernel_build's own command (the flags the
    first-use build uses), not as a Python extension module: ctypes loads it, nothing imports it."""

    def build_extension(self, ext):
        b = BY_EXTENSION[ext.name]
        out = Path(self.get_ext_fullpath(ext.name))
        try:
            kb.compile_library(b, out)
        except OSError as e:
            if os.environ.get("SPECLAB_REQUIRE_KERNELS"):
                raise SystemExit(f"error: speclab kernel {b.name}: {e}") from None
            print(f"warning: speclab kernel {b.name} not built ({e}); it is compiled on first use, else torch runs",
                  file=sys.stderr)


setup(ext_modules=[Extension(name, sources=[f"engine/kernels/{b.source}"]) for name, b in BY_EXTENSION.items()],
      cmdclass={"build_ext": BuildKernels})
