"""Building the C kernels (engine/kernels/qgemm.c, bf16_kernels.c, bf16_kernels_avx2.c): one table of builds, one compile command,
used by the install step (setup.py), by the first-use build into the user cache, and by the compile check.

    BUILDS                        build name → KernelBuild(source, CPU flags it needs, compiler flags)
    compile_library(b, out)       compile one build into the shared library `out` (raises OSError, one line)
    check_command(b, out)         the compile check's command (every build, any x86 CPU: tests and CI)
    tag(b) -> str                 sha256[:16] of the source, its headers and the flags: a build's identity
    installed(b) -> Path | None   the library the install step left beside the sources, if it is this source's
    library(b) -> (Path, how)     the installed library, else one built once into the cache ('cache')
    load_library(path, fns)       ctypes.CDLL with each entry's argument types
    cpu_flags() -> set[str]       the CPU's flags (/proc/cpuinfo)
    cpu_slug(name, flags) -> str  'AMD EPYC' + its flags → 'amd-epyc-avx512bf16': a CPU kind's file-name part
    this_cpu() -> str             that slug for this machine (experiments' {cpu}, roofline's default file)

Why built at install: compiling on first use ran inside the first model load (a Live page, a Ray worker),
and a wheel without the `.c` files fell back to torch without a word. `pip install .` and `pip install -e .`
now run `build_ext` (setup.py), which compiles every build here *whatever the CPU's flags* (the compiler
only needs to know the instructions, not run them), into `engine/kernels/_kernel_<build>_<tag><ext>`. At run
time the CPU's flags choose the build; the installed library is used when its tag matches the source in the
tree (an edited kernel is rebuilt into the cache, never a stale one loaded).

Why the tag is in the file name: two sources or two flag sets never share a library, and a library whose
source changed is simply not found (no timestamp guesswork).

OpenMP: `-fopenmp` links `libgomp.so.1`. torch's Linux wheel ships its own copy with the same soname
(torch/lib/libgomp.so.1) and loads it first, so the dynamic loader binds our library to torch's copy: one
OpenMP runtime and one thread pool in the process (`openmp_runtimes()` lists what is mapped; the
kernels' status prints it). This module imports only the standard library: setup.py loads it by path.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class KernelBuild:
    """One shared library: a C source compiled with ISA flags, run where the CPU has `needs`."""

    name: str  # the build's name: 'qgemm-amx', 'qgemm-avx512vnni', 'qgemm-avx2', 'bgemv', 'bgemv-avx2'
    source: str  # file name beside this module
    needs: tuple[str, ...]  # /proc/cpuinfo flags the code executes (checked at run time, not at build)
    cflags: tuple[str, ...]  # the ISA flags the compiler needs to emit that code

    @property
    def path(self) -> Path:
        return HERE / self.source


BUILDS = {b.name: b for b in (
    KernelBuild("qgemm-amx", "qgemm.c",
                ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "f16c", "fma", "amx_tile", "amx_int8"),
                ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mf16c", "-mfma", "-mamx-tile",
                 "-mamx-int8")),  # the VNNI build, and Q4_K / Q6_K on AMX int8 tiles (qgemm.c's __AMX_INT8__ part: qtiles.h)
    KernelBuild("qgemm-avx512vnni", "qgemm.c",
                ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "f16c", "fma"),
                ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mf16c", "-mfma")),
    KernelBuild("qgemm-avx2", "qgemm.c", ("avx2", "f16c", "fma"), ("-mavx2", "-mf16c", "-mfma")),
    KernelBuild("bgemv-amx", "bf16_kernels.c",
                ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "fma", "amx_tile", "amx_bf16"),
                ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma", "-mamx-tile",
                 "-mamx-bf16")),  # the products on AMX tiles, the rest as bgemv (bf16_kernels.c's __AMX_BF16__ part)
    KernelBuild("bgemv", "bf16_kernels.c", ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "fma"),
                ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma")),  # fma: attn_row.h
    KernelBuild("bgemv-avx2", "bf16_kernels_avx2.c", ("avx2", "fma"), ("-mavx2", "-mfma")),
)}
BASE_FLAGS = ("-O3", "-shared", "-fPIC", "-fopenmp")  # -fopenmp: the kernels split rows over OpenMP threads


def cpu_flags() -> set[str]:
    try:
        for line in open("/proc/cpuinfo", encoding="ascii", errors="ignore"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_slug(model_name: str, flags: set[str] | frozenset = frozenset()) -> str:
    """'AMD EPYC 9R14 96-Core Processor' → 'amd-epyc-9r14'; '' → 'unknown-cpu' (the default file name). With the
    CPU's flags, its vector class is appended ('-amx', '-avx512bf16', '-avx512', '-avx2'): virtual machines may
    report a bare 'AMD EPYC', and two such CPUs with different kernels must not share a file."""
    name = re.sub(r"\((R|TM|tm|r)\)", "", model_name)
    name = re.sub(r"\b(Processor|CPU|\d+-Core)\b.*$", "", name).strip() or "unknown cpu"
    name = re.sub(r"@.*$", "", name)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not flags:
        return slug
    isa = next((tag for tag, need in (("amx", "amx_tile"), ("avx512bf16", "avx512_bf16"), ("avx512", "avx512f"),
                                      ("avx2", "avx2")) if need in flags), "sse")
    return f"{slug}-{isa}"


def this_cpu() -> str:
    """This machine's cpu_slug, from /proc/cpuinfo's model name and flags (what lscpu prints as 'Model name')."""
    model = ""
    try:
        for line in open("/proc/cpuinfo", encoding="ascii", errors="ignore"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return cpu_slug(model, cpu_flags())


def cache_dir() -> Path:
    return Path(os.environ.get("SPECLAB_CACHE", Path.home() / ".cache" / "speclab")) / "kernels"


def tag(b: KernelBuild) -> str:
    """The build's identity: its source, the headers beside it and its flags (sha256, 16 hex digits)."""
    src = b.path.read_bytes() + b"".join(h.read_bytes() for h in sorted(b.path.parent.glob("*.h")))
    return hashlib.sha256(src + " ".join(b.cflags).encode()).hexdigest()[:16]


def module_name(b: KernelBuild) -> str:
    """The installed library's module name (setup.py's Extension name, without the package)."""
    return f"_kernel_{b.name.replace('-', '_')}_{tag(b)}"


def ext_suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def compile_command(b: KernelBuild, out: Path) -> list[str]:
    return [os.environ.get("CC", "cc"), *BASE_FLAGS, *b.cflags, "-o", str(out), str(b.path), "-lm"]


def compile_library(b: KernelBuild, out: Path) -> Path:
    """Compile build `b` into `out` (written whole: a temporary file, then renamed, so a concurrent reader
    never loads half a library). Raises OSError in one line."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    try:
        subprocess.run(compile_command(b, tmp), check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise OSError(f"no C compiler ({os.environ.get('CC', 'cc')}) found") from None
    except subprocess.CalledProcessError as e:
        raise OSError(f"compiling {b.source} ({b.name}) failed: {(e.stderr or '').strip().splitlines()[:1]}") from None
    os.replace(tmp, out)
    return out


def check_command(b: KernelBuild, out: Path) -> list[str]:
    """The compile check's command: the build's own ISA flags at -O0, to an object file. Quick (no
    optimiser), yet it fails on what a real build would (an intrinsic whose ISA flag is missing is an
    error at any -O), and it needs only a compiler that knows the instructions, not a CPU that runs them."""
    return [os.environ.get("CC", "cc"), "-O0", "-c", "-fPIC", "-fopenmp", *b.cflags, "-o", str(out), str(b.path)]


def installed(b: KernelBuild) -> Path | None:
    """The library `pip install` built for this very source (its tag in the name), else None."""
    p = HERE / (module_name(b) + ext_suffix())
    return p if p.is_file() else None


def library(b: KernelBuild) -> tuple[Path, str]:
    """(shared library, 'installed' | 'cache'): the install step's, else one compiled once into the cache
    (named by the tag, so it too is never stale). SPECLAB_KERNEL_BUILD=cache skips the installed one."""
    if os.environ.get("SPECLAB_KERNEL_BUILD") != "cache":
        p = installed(b)
        if p is not None:
            return p, "installed"
    out = cache_dir() / f"{b.name}-{tag(b)}.so"
    if not out.is_file():
        compile_library(b, out)
    return out, "cache"


def load_library(path: Path, functions: dict[str, list]) -> ctypes.CDLL:
    """The library at `path` with each function's argument types set (every kernel entry returns int)."""
    lib = ctypes.CDLL(str(path))
    for name, argtypes in functions.items():
        f = getattr(lib, name)
        f.restype = ctypes.c_int
        f.argtypes = argtypes
    return lib


def openmp_runtimes() -> list[str]:
    """The OpenMP runtime files mapped into this process (one is the healthy answer)."""
    try:
        maps = Path("/proc/self/maps").read_text(errors="ignore").splitlines()
    except OSError:
        return []
    names = ("libgomp", "libiomp", "libomp")
    return sorted({line.split()[-1] for line in maps if any(n in line.rsplit("/", 1)[-1] for n in names)})
