"""llama.cpp's build flags for this CPU, chosen by measurement (scripts/peers/install.sh calls `build`).

Why: `-DGGML_NATIVE=ON` compiles for `-march=native`. On an Intel Xeon with AMX that build's llama-server
died with SIGSEGV at "llama threadpool init", while a build with GGML_NATIVE=OFF and explicit AVX-512 flags
ran. So the install builds candidates in order and keeps the first whose llama-server passes a smoke check
(starts on a GGUF, answers /health, completes 2 tokens):

    native     -DGGML_NATIVE=ON
    explicit   -DGGML_NATIVE=OFF, and GGML_<ISA>=ON for each instruction set /proc/cpuinfo's flags support
               (ISA below: an option is ON only when every flag it compiles for is there), every other OFF
    no-amx     explicit without GGML_AMX_* — only on a CPU with AMX (the crash's suspect)
    avx2       explicit without AVX-512 and AMX — only on a CPU with AVX-512

A candidate that would build the same options as an earlier one is not tried again. Build directories
that already hold the binaries are smoke-checked first, as they are ("existing"). What was kept, and every
try with its outcome, goes to build/bin/speclab-build.json (`RECORD`), which `python -m engine peers`
prints and stores in its result (`describe`, `read_record`). Without a GGUF to check on, native is kept
unverified and the record says so.

Worked example: an AVX2-only AMD EPYC (flags … sse4_2 avx avx2 bmi2 fma f16c …) gives explicit =
GGML_SSE42 GGML_AVX GGML_AVX2 GGML_BMI2 GGML_FMA GGML_F16C ON and every AVX-512 / VNNI / AMX option OFF, and
no no-amx or avx2 candidate (each would be that same build): the ladder is native, explicit.

Standard library only: install.sh runs it with the Python outside the project's venv
(`PYTHONPATH=REPO python3.11 -m engine.bench.llama_build build …`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

RECORD = "speclab-build.json"
TARGETS = ("llama-server", "llama-speculative-simple", "llama-bench")
# GGML option → the /proc/cpuinfo flags it compiles for (ggml/src/ggml-cpu's -m flags), in ggml's order
ISA: dict[str, tuple[str, ...]] = {
    "GGML_SSE42": ("sse4_2",), "GGML_AVX": ("avx",), "GGML_AVX_VNNI": ("avx_vnni",), "GGML_AVX2": ("avx2",),
    "GGML_BMI2": ("bmi2",), "GGML_FMA": ("fma",), "GGML_F16C": ("f16c",),
    "GGML_AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "GGML_AVX512_VBMI": ("avx512vbmi",), "GGML_AVX512_VNNI": ("avx512_vnni",), "GGML_AVX512_BF16": ("avx512_bf16",),
    "GGML_AMX_TILE": ("amx_tile",), "GGML_AMX_INT8": ("amx_int8",), "GGML_AMX_BF16": ("amx_bf16",),
}
NEEDS = {"GGML_AVX512_VBMI": "GGML_AVX512", "GGML_AVX512_VNNI": "GGML_AVX512", "GGML_AVX512_BF16": "GGML_AVX512",
         "GGML_AMX_TILE": "GGML_AVX512", "GGML_AMX_INT8": "GGML_AMX_TILE", "GGML_AMX_BF16": "GGML_AMX_TILE"}


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The first `flags` line of /proc/cpuinfo text (every core of one machine lists the same)."""
    for line in cpuinfo.splitlines():
        key, _, val = line.partition(":")
        if key.strip() == "flags":
            return frozenset(val.split())
    return frozenset()


def explicit_options(flags: frozenset[str] | set[str], amx: bool = True, avx512: bool = True) -> dict[str, bool]:
    """Every GGML_<ISA> option, ON where the CPU has all its flags (and what it builds on), else OFF."""
    out: dict[str, bool] = {}
    for opt, need in ISA.items():
        on = all(f in flags for f in need) and (opt not in NEEDS or out[NEEDS[opt]])
        if opt.startswith("GGML_AMX") and not amx or opt.startswith("GGML_AVX512") and not avx512:
            on = False
        out[opt] = on
    return out


def cmake_args(options: dict[str, bool] | None) -> list[str]:
    """None → native; else GGML_NATIVE=OFF and every option spelled out."""
    if options is None:
        return ["-DGGML_NATIVE=ON"]
    return ["-DGGML_NATIVE=OFF", *(f"-D{k}={'ON' if v else 'OFF'}" for k, v in options.items())]


def candidates(flags: frozenset[str] | set[str]) -> list[tuple[str, list[str]]]:
    """The builds to try, in order (module docstring), without repeats."""
    out: list[tuple[str, list[str]]] = [("native", cmake_args(None))]
    for name, kw in (("explicit", {}), ("no-amx", {"amx": False}), ("avx2", {"amx": False, "avx512": False})):
        args = cmake_args(explicit_options(flags, **kw))
        if all(args != a for _, a in out):
            out.append((name, args))
    return out


def on_list(args: list[str]) -> str:
    """'native', or the ISA options a build turned on: 'AVX AVX2 AVX512 …'."""
    if "-DGGML_NATIVE=ON" in args:
        return "native (-march=native)"
    on = [a[len("-DGGML_"):-len("=ON")] for a in args if a.endswith("=ON") and a != "-DGGML_NATIVE=ON"]
    return "GGML_NATIVE=OFF, " + (" ".join(on) or "no SIMD options")


def existing_args(build_dir: Path) -> list[str] | None:
    """The GGML options of a configured build directory (its CMakeCache.txt), None when there is none."""
    cache = Path(build_dir) / "CMakeCache.txt"
    if not cache.is_file():
        return None
    vals = {}
    for line in cache.read_text(errors="replace").splitlines():
        name, _, val = line.partition("=")
        key = name.split(":")[0]
        if key == "GGML_NATIVE" or key in ISA:
            vals[key] = val.strip().upper() in ("ON", "1", "TRUE", "YES")
    if vals.get("GGML_NATIVE", True):
        return cmake_args(None)
    return cmake_args({k: vals.get(k, False) for k in ISA})


def signal_name(code: int) -> str:
    if code < 0:
        try:
            return f"{signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def last_line(log: Path) -> str:
    try:
        lines = [x.strip() for x in Path(log).read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def smoke_check(bin_dir: Path, gguf: Path, threads: int = 2, timeout_s: float = 180.0,
                log: Path | None = None) -> tuple[bool, str]:
    """llama-server on the GGUF: started, /health answered, 2 tokens completed, stopped. (ok, one line)."""
    exe = Path(bin_dir) / "llama-server"
    if not exe.is_file():
        return False, f"no {exe}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = Path(log or Path(bin_dir) / "speclab-smoke.log")
    url = f"http://127.0.0.1:{port}"
    with open(log, "w", encoding="utf-8") as f:
        p = subprocess.Popen([str(exe), "-m", str(gguf), "-t", str(threads), "-c", "256", "-np", "1", "--host",
                              "127.0.0.1", "--port", str(port), "--no-webui"], stdout=f, stderr=subprocess.STDOUT)
        try:
            t0 = time.monotonic()
            while True:
                if p.poll() is not None:
                    return False, f"llama-server died with {signal_name(p.returncode)} at start ({last_line(log)})"
                if time.monotonic() - t0 > timeout_s:
                    return False, f"llama-server not ready after {timeout_s:.0f} s ({last_line(log)})"
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    time.sleep(0.5)
            body = json.dumps({"prompt": "Hello", "n_predict": 2, "temperature": 0.0}).encode()
            req = urllib.request.Request(url + "/completion", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=timeout_s) as r:
                    n = json.loads(r.read()).get("tokens_predicted")
            except (OSError, ValueError) as e:
                code = p.poll()
                return False, (f"llama-server died with {signal_name(code)} on its first completion "
                               f"({last_line(log)})" if code is not None else f"completion failed: {e}")
            return True, f"llama-server started and completed {n} tokens on {Path(gguf).name}"
        finally:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


Run = Callable[[list[str]], int]
Smoke = Callable[[Path], "tuple[bool, str]"]


def _run(cmd: list[str]) -> int:
    return subprocess.run(cmd).returncode


def build(src: Path, flags: frozenset[str] | set[str], smoke: Smoke | None, run: Run = _run, jobs: int = 2,
          cpu: str = "", say: Callable[[str], None] = print) -> dict:
    """Build candidates into src/build until one passes `smoke(bin_dir)`; write and return the record.
    `smoke` None: no GGUF to check on — native is built and kept unverified. Raises RuntimeError (one line)
    when no candidate passes; the record of the tries is written all the same."""
    bdir = Path(src) / "build"
    bin_dir = bdir / "bin"
    tried: list[dict] = []
    todo = candidates(flags)
    have = existing_args(bdir)
    if have is not None and all((bin_dir / t).is_file() for t in TARGETS[:2]):
        todo.insert(0, ("existing", have))  # checked as it is before anything is rebuilt
    kept = None
    for name, args in todo:
        if name != "existing":
            if any(t["args"] == args and t["name"] == "existing" for t in tried):
                continue  # the existing build had these very options, and failed
            say(f"llama.cpp: building {name}: {on_list(args)}")
            shutil.rmtree(bdir, ignore_errors=True)  # a clean tree: cached objects of other flags must not link in
            if run(["cmake", "-S", str(src), "-B", str(bdir), "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF",
                    *args]) != 0 or run(["cmake", "--build", str(bdir), f"-j{jobs}", "--target", *TARGETS]) != 0:
                tried.append({"name": name, "args": args, "outcome": "build failed"})
                say(f"llama.cpp: {name} did not build")
                continue
        if smoke is None:
            tried.append({"name": name, "args": args, "outcome": "not checked: no GGUF to run on"})
            kept = tried[-1]
            break
        ok, detail = smoke(bin_dir)
        tried.append({"name": name, "args": args, "outcome": ("passed: " if ok else "failed: ") + detail})
        say(f"llama.cpp: {name} smoke check {'passed' if ok else 'failed'}: {detail}")
        if ok:
            kept = tried[-1]
            break
    record = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cpu": cpu,
              "kept": kept["name"] if kept else None, "cmake_args": kept["args"] if kept else None,
              "verified": bool(kept) and kept["outcome"].startswith("passed"), "tried": tried}
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if kept is None:
        raise RuntimeError("llama.cpp: no build passed its smoke check: "
                           + "; ".join(f"{t['name']} {t['outcome']}" for t in tried))
    return record


def read_record(bin_dir: Path | str) -> dict | None:
    """The build record next to the binaries, None when there is none or it does not parse."""
    try:
        d = json.loads((Path(bin_dir) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def describe(record: dict | None) -> str:
    """One line: which build was kept and why (what failed before it)."""
    if not record:
        return ("build not recorded (built before the install chose flags by measurement: "
                "`scripts/peers/install.sh llamacpp` checks and records it)")
    if not record.get("kept"):
        return "no build passed its smoke check: " + "; ".join(f"{t.get('name')} {t.get('outcome')}"
                                                               for t in record.get("tried") or [])
    kept = next((t for t in record.get("tried") or [] if t.get("name") == record["kept"]), {})
    before = [f"{t.get('name')} {t.get('outcome')}" for t in record.get("tried") or [] if t is not kept]
    return (f"{record['kept']} build ({on_list(record.get('cmake_args') or [])}), "
            + ("smoke check passed" if record.get("verified") else "unverified (no smoke check)")
            + (f"; before it: {'; '.join(before)}" if before else ""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.bench.llama_build", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build llama.cpp with the first flags whose llama-server passes a smoke check")
    b.add_argument("--src", required=True, help="the llama.cpp source tree (its build/ is replaced)")
    b.add_argument("--gguf", default=None, help="a small GGUF to smoke-check on (without it: native, unverified)")
    b.add_argument("--jobs", type=int, default=2)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--cpuinfo", default="/proc/cpuinfo")
    s = sub.add_parser("show", help="print the build record of a build/bin")
    s.add_argument("bin_dir")
    a = p.parse_args(argv)
    if a.cmd == "show":
        print(describe(read_record(a.bin_dir)))
        return 0
    text = Path(a.cpuinfo).read_text(errors="replace") if Path(a.cpuinfo).is_file() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "")
    gguf = Path(a.gguf) if a.gguf and Path(a.gguf).is_file() else None
    if gguf is None:
        print(f"llama.cpp: no GGUF at {a.gguf or '(none given)'}: the build is kept unverified", file=sys.stderr)
    smoke = (lambda d: smoke_check(d, gguf, a.threads)) if gguf else None
    try:
        r = build(Path(a.src), cpu_flags(text), smoke, jobs=a.jobs, cpu=model)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"llama.cpp: kept the {describe(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
