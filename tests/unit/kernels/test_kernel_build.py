"""engine.kernels.kernel_build: every kernel build compiles on any x86 machine whatever its CPU flags (the
compile check CI runs), the installed library is found by its tag and a stale one never loaded."""

import platform
import shutil
import subprocess

import pytest

from engine.kernels import kernel_build as kb

needs_cc = pytest.mark.skipif(shutil.which(kb.compile_command(next(iter(kb.BUILDS.values())), kb.HERE)[0]) is None
                              or platform.machine() not in ("x86_64", "AMD64"),
                              reason="the kernels are x86 C and need a C compiler")


@needs_cc
@pytest.mark.slow  # ~10 s of compiler on 2 cores: `make test` (CI) runs it, `make test-quick` leaves it out
def test_every_build_compiles_whatever_this_cpu_runs(tmp_path):
    """All builds at once (AVX-512 ones too on an AVX2-only CPU): compiling needs the compiler's flags, not the
    CPU's. A compile error in any kernel fails here, on every machine."""
    procs = {name: subprocess.Popen(kb.check_command(b, tmp_path / f"{name}.o"), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for name, b in kb.BUILDS.items()}
    failed = {}
    for name, p in procs.items():
        _, err = p.communicate(timeout=300)
        if p.returncode != 0:
            failed[name] = err.strip().splitlines()[:3]
    assert not failed, failed
    assert sorted(p.name for p in tmp_path.glob("*.o")) == sorted(f"{n}.o" for n in kb.BUILDS)


def test_the_check_fails_on_a_kernel_that_cannot_compile(tmp_path, monkeypatch):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    (tmp_path / "broken.c").write_text("int f(void) { return undeclared; }\n")
    monkeypatch.setattr(kb, "HERE", tmp_path)
    b = kb.KernelBuild("broken", "broken.c", (), ())
    assert subprocess.run(kb.check_command(b, tmp_path / "x.o"), capture_output=True).returncode != 0
    with pytest.raises(OSError, match="compiling broken.c"):
        kb.compile_library(b, tmp_path / "x.so")


def test_the_installed_library_is_used_only_for_its_own_source(tmp_path, monkeypatch):
    for f in ("qgemm.c", "bf16_kernels.c", "bf16.h"):
        shutil.copy(kb.HERE / f, tmp_path / f)
    monkeypatch.setattr(kb, "HERE", tmp_path)
    monkeypatch.setenv("SPECLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECLAB_KERNEL_BUILD", raising=False)
    built = []

    def fake_compile(b, out):  # the cache build, without the compiler's minute
        built.append(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"")
        return out

    monkeypatch.setattr(kb, "compile_library", fake_compile)
    b = kb.BUILDS["bgemv"]
    lib = tmp_path / (kb.module_name(b) + kb.ext_suffix())
    lib.write_bytes(b"")  # what `pip install` leaves beside the source
    assert kb.installed(b) == lib and kb.library(b) == (lib, "installed") and not built
    monkeypatch.setenv("SPECLAB_KERNEL_BUILD", "cache")
    assert kb.library(b)[1] == "cache" and len(built) == 1
    monkeypatch.delenv("SPECLAB_KERNEL_BUILD")
    (tmp_path / "bf16.h").write_text((tmp_path / "bf16.h").read_text() + "\n/* edited */\n")
    assert kb.installed(b) is None  # the header changed: the installed library is not this source's
    path, how = kb.library(b)
    assert how == "cache" and path.name == f"bgemv-{kb.tag(b)}.so"


def test_one_table_names_every_c_source_and_the_setup_step_builds_them_all():
    sources = {p.name for p in kb.HERE.glob("*.c")}
    assert {b.source for b in kb.BUILDS.values()} == sources
    setup = (kb.HERE.parents[1] / "setup.py").read_text()
    assert "kernel_build.py" in setup and "BUILDS" in setup and "build_ext" in setup
    pyproject = (kb.HERE.parents[1] / "pyproject.toml").read_text()
    assert f'"engine.{kb.HERE.name}" = ["*.c", "*.h"]' in pyproject  # the sources travel with a wheel (the wheel's
    # contents: tests/system/repo/test_install_build.py)


def test_one_openmp_runtime_is_mapped_once_a_kernel_is_loaded():
    """torch's wheel ships libgomp.so.1 under the system soname, so our library binds to torch's copy: one
    OpenMP runtime, one thread pool (the GOMP_SPINCOUNT note in docs/architecture.md)."""
    import torch  # noqa: F401  (loads torch's OpenMP first, as every run does)

    from engine.kernels import dense_kernel, qkernel

    if qkernel.available() is not None and dense_kernel.available() is not None:
        pytest.skip(f"no kernel runs here: {qkernel.available()}")
    gomp = [p for p in kb.openmp_runtimes() if "gomp" in p.rsplit("/", 1)[-1]]
    assert len(gomp) <= 1, gomp
