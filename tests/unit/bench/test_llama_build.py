"""llama.cpp's build flags chosen by measurement (engine.bench.llama_build), without building llama.cpp: the
options derived from /proc/cpuinfo flags of an AMX Xeon, an AVX-512 EPYC and an AVX2-only EPYC, the ladder
of candidates, the build loop with a fake cmake and a fake smoke check, the record and its line, and the smoke
check itself on stand-in llama-servers (one that dies with SIGSEGV at start, one that answers)."""

from __future__ import annotations

import json
import sys

import pytest

from engine.bench import llama_build as lb

COMMON = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall "
          "nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid pni pclmulqdq ssse3 fma cx16 "
          "pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch "
          "fsgsbase bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 "
          "xsaves")
# Intel Xeon (Sapphire Rapids): AVX-512 with VNNI / BF16 / VBMI, AVX-VNNI, AMX
XEON_AMX = (COMMON + " avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx_vnni avx512_bf16 wbnoinvd avx512vbmi "
            "umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme "
            "avx512_vpopcntdq la57 rdpid movdiri movdir64b serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 "
            "arch_capabilities")
# AMD EPYC (Genoa, Zen 4): AVX-512 with VNNI / BF16 / VBMI, no AVX-VNNI, no AMX
EPYC_512 = (COMMON + " cmp_legacy cr8_legacy sse4a misalignsse topoext perfctr_core avx512f avx512dq avx512ifma "
            "avx512cd avx512bw avx512vl avx512_bf16 clzero xsaveerptr rdpru avx512vbmi umip pku ospke avx512_vbmi2 "
            "gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm")
# AMD EPYC (Milan, Zen 3): AVX2 only
EPYC_AVX2 = COMMON + " cmp_legacy cr8_legacy sse4a misalignsse topoext perfctr_core clzero xsaveerptr rdpru vaes"


def cpuinfo(flags: str, model: str = "a CPU") -> str:
    core = f"processor\t: 0\nvendor_id\t: x\nmodel name\t: {model}\nflags\t\t: {flags}\nbogomips\t: 4000\n\n"
    return core + core.replace("processor\t: 0", "processor\t: 1")


def on(options: dict[str, bool]) -> set[str]:
    return {k for k, v in options.items() if v}


BASE = {"GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_FMA", "GGML_F16C"}
AVX512 = {"GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16"}
AMX = {"GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"}


@pytest.mark.parametrize("flags, want, ladder", [
    (XEON_AMX, BASE | AVX512 | AMX | {"GGML_AVX_VNNI"}, ["native", "explicit", "no-amx", "avx2"]),
    (EPYC_512, BASE | AVX512, ["native", "explicit", "avx2"]),  # no AMX: no-amx would be explicit again
    (EPYC_AVX2, BASE, ["native", "explicit"]),
])
def test_options_and_candidates_from_cpuinfo(flags, want, ladder):
    f = lb.cpu_flags(cpuinfo(flags))
    assert f == frozenset(flags.split())
    opts = lb.explicit_options(f)
    assert set(opts) == set(lb.ISA) and on(opts) == want  # every option spelled out, ON exactly where supported
    c = lb.candidates(f)
    assert [n for n, _ in c] == ladder
    assert c[0][1] == ["-DGGML_NATIVE=ON"]
    args = dict(c)["explicit"]
    assert args[0] == "-DGGML_NATIVE=OFF" and len(args) == 1 + len(lb.ISA)
    assert {a[2:-3] for a in args if a.endswith("=ON")} == want
    if "no-amx" in ladder:
        assert not any(a.startswith("-DGGML_AMX") and a.endswith("=ON") for a in dict(c)["no-amx"])
        assert "-DGGML_AVX512=ON" in dict(c)["no-amx"]
    if "avx2" in ladder:
        assert {a[2:-3] for a in dict(c)["avx2"] if a.endswith("=ON")} == BASE | ({"GGML_AVX_VNNI"} & want)


def test_an_option_is_on_only_with_every_flag_it_compiles_for():
    knl = frozenset((COMMON + " avx512f avx512cd avx512er avx512pf avx512_vnni amx_tile").split())  # no bw/dq/vl
    opts = lb.explicit_options(knl)
    assert not opts["GGML_AVX512"] and not opts["GGML_AVX512_VNNI"] and not opts["GGML_AMX_TILE"]
    assert lb.cpu_flags("processor : 0\n") == frozenset() and on(lb.explicit_options(frozenset())) == set()
    assert lb.on_list(["-DGGML_NATIVE=ON"]).startswith("native")
    assert lb.on_list(lb.cmake_args(lb.explicit_options(frozenset(EPYC_AVX2.split())))) == \
        "GGML_NATIVE=OFF, SSE42 AVX AVX2 BMI2 FMA F16C"


class Cmake:
    """A stand-in for cmake: records configure and build commands; a build writes the binaries (empty files)."""

    def __init__(self, fail_build: tuple[str, ...] = ()):
        self.calls: list[list[str]] = []
        self.fail_build, self.configured = fail_build, None

    def __call__(self, cmd: list[str]) -> int:
        self.calls.append(cmd)
        if "-S" in cmd:
            self.configured = [a for a in cmd if a.startswith("-DGGML")]
            bdir = cmd[cmd.index("-B") + 1]
            from pathlib import Path

            Path(bdir).mkdir(parents=True, exist_ok=True)
            (Path(bdir) / "CMakeCache.txt").write_text("".join(f"{a[2:].split('=')[0]}:BOOL={a.split('=')[1]}\n"
                                                               for a in self.configured))
            return 0
        if lb.on_list(self.configured) in self.fail_build:
            return 2
        from pathlib import Path

        b = Path(cmd[cmd.index("--build") + 1]) / "bin"
        b.mkdir(parents=True, exist_ok=True)
        for t in lb.TARGETS:
            (b / t).write_text(json.dumps(self.configured))
        return 0


def smoke_failing(*bad: str):
    """Fails (as the AMX Xeon's native build did) when the built binaries carry one of these option sets."""
    def smoke(bin_dir):
        args = json.loads((bin_dir / "llama-server").read_text())
        if lb.on_list(args) in bad or any(lb.on_list(args).startswith(b) for b in bad):
            return False, "llama-server died with SIGSEGV (signal 11) at start (llama threadpool init, n_threads = 2)"
        return True, "llama-server started and completed 2 tokens on d.gguf"
    return smoke


def test_a_native_build_that_crashes_is_replaced_by_explicit_flags_and_recorded(tmp_path):
    cm, said = Cmake(), []
    r = lb.build(tmp_path, lb.cpu_flags(cpuinfo(XEON_AMX)), smoke_failing("native"), run=cm, cpu="Xeon",
                 say=said.append)
    assert r["kept"] == "explicit" and r["verified"] and r["cmake_args"][0] == "-DGGML_NATIVE=OFF"
    assert [t["name"] for t in r["tried"]] == ["native", "explicit"]
    assert r["tried"][0]["outcome"].startswith("failed: llama-server died with SIGSEGV")
    configs = [c for c in cm.calls if "-S" in c]
    assert configs[0][-1] == "-DGGML_NATIVE=ON" and "-DGGML_AMX_TILE=ON" in configs[1]
    assert lb.read_record(tmp_path / "build" / "bin") == r  # next to the binaries
    line = lb.describe(r)
    assert line.startswith("explicit build (GGML_NATIVE=OFF, SSE42 AVX") and "smoke check passed" in line
    assert "before it: native failed: llama-server died with SIGSEGV" in line and "\n" not in line


def test_the_ladder_goes_on_past_amx_and_a_build_that_fails(tmp_path):
    flags = frozenset(XEON_AMX.split())
    cm = Cmake(fail_build=(lb.on_list(lb.cmake_args(lb.explicit_options(flags, amx=False))),))
    r = lb.build(tmp_path, flags, smoke_failing("native", lb.on_list(lb.cmake_args(lb.explicit_options(flags)))),
                 run=cm, say=lambda s: None)
    assert [(t["name"], t["outcome"].split(":")[0]) for t in r["tried"]] == [
        ("native", "failed"), ("explicit", "failed"), ("no-amx", "build failed"), ("avx2", "passed")]
    assert r["kept"] == "avx2" and "-DGGML_AVX512=OFF" in r["cmake_args"]


def test_an_existing_build_that_passes_is_kept_without_rebuilding(tmp_path):
    flags = frozenset(EPYC_AVX2.split())
    lb.build(tmp_path, flags, smoke_failing(), run=Cmake(), say=lambda s: None)
    (tmp_path / "build" / "bin" / lb.RECORD).unlink()  # an install from before records existed
    cm = Cmake()
    r = lb.build(tmp_path, flags, smoke_failing(), run=cm, say=lambda s: None)
    assert cm.calls == [] and r["kept"] == "existing" and r["cmake_args"] == ["-DGGML_NATIVE=ON"]
    # an existing native build that crashes is not rebuilt as native again
    cm = Cmake()
    r = lb.build(tmp_path, flags, smoke_failing("native"), run=cm, say=lambda s: None)
    assert [t["name"] for t in r["tried"]] == ["existing", "explicit"] and r["kept"] == "explicit"
    assert len([c for c in cm.calls if "-S" in c]) == 1


def test_no_build_passing_is_one_line_and_still_recorded(tmp_path):
    with pytest.raises(RuntimeError, match=r"^llama\.cpp: no build passed its smoke check: native failed"):
        lb.build(tmp_path, frozenset(EPYC_AVX2.split()), smoke_failing("native", "GGML_NATIVE=OFF"), run=Cmake(),
                 say=lambda s: None)
    r = lb.read_record(tmp_path / "build" / "bin")
    assert r["kept"] is None and len(r["tried"]) == 2
    assert lb.describe(r).startswith("no build passed its smoke check")


def test_without_a_gguf_native_is_kept_unverified_and_said(tmp_path):
    r = lb.build(tmp_path, frozenset(EPYC_512.split()), None, run=Cmake(), say=lambda s: None)
    assert r["kept"] == "native" and r["verified"] is False and "no GGUF" in r["tried"][0]["outcome"]
    assert "unverified" in lb.describe(r)
    assert "not recorded" in lb.describe(None) and lb.read_record(tmp_path / "nowhere") is None
    (tmp_path / "build" / "bin" / lb.RECORD).write_text("{not json")
    assert lb.read_record(tmp_path / "build" / "bin") is None


def test_existing_args_read_the_cmake_cache(tmp_path):
    assert lb.existing_args(tmp_path) is None
    (tmp_path / "CMakeCache.txt").write_text("GGML_NATIVE:BOOL=OFF\nGGML_AVX2:BOOL=ON\nGGML_AVX:BOOL=ON\nOTHER:BOOL=ON\n")
    args = lb.existing_args(tmp_path)
    assert args[0] == "-DGGML_NATIVE=OFF" and {a for a in args if a.endswith("=ON")} == {"-DGGML_AVX=ON", "-DGGML_AVX2=ON"}


SEGV = "import os, signal, sys\nprint('I cmn init: llama threadpool init, n_threads = 2', flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)\n"
SERVES = r'''
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
a = sys.argv[1:]
class H(BaseHTTPRequestHandler):
    def log_message(self, *x): pass
    def reply(self, d):
        self.send_response(200); self.send_header("Content-Type", "application/json"); self.end_headers()
        self.wfile.write(json.dumps(d).encode())
    def do_GET(self): self.reply({"status": "ok"})
    def do_POST(self):
        q = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reply({"content": "hi", "tokens_predicted": q["n_predict"]})
HTTPServer(("127.0.0.1", int(a[a.index("--port") + 1])), H).serve_forever()
'''


def _server(tmp_path, script):
    (tmp_path / "server.py").write_text(script)
    exe = tmp_path / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {tmp_path / "server.py"} "$@"\n')
    exe.chmod(0o755)
    return tmp_path


def test_smoke_check_on_stand_in_servers(tmp_path):
    gguf = tmp_path / "d.gguf"
    gguf.write_bytes(b"")
    ok, line = lb.smoke_check(_server(tmp_path, SEGV), gguf, timeout_s=30)
    assert not ok and line.startswith("llama-server died with SIGSEGV (signal 11) at start") and \
        "llama threadpool init" in line and "\n" not in line
    ok, line = lb.smoke_check(_server(tmp_path, SERVES), gguf, timeout_s=30)
    assert ok and line == "llama-server started and completed 2 tokens on d.gguf"
    assert lb.smoke_check(tmp_path / "none", gguf) == (False, f"no {tmp_path / 'none' / 'llama-server'}")


def test_runs_on_the_standard_library_alone(tmp_path):
    """install.sh runs it with a Python outside the project's venv: no site-packages (-S), the repo on the path."""
    import os
    import subprocess
    from pathlib import Path

    repo = Path(lb.__file__).resolve().parents[2]
    (tmp_path / lb.RECORD).write_text(json.dumps({"kept": "explicit", "cmake_args": ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON"],
                                                  "verified": True, "tried": [{"name": "explicit", "outcome": "passed: ok"}]}))
    out = subprocess.run([sys.executable, "-S", "-m", "engine.bench.llama_build", "show", str(tmp_path)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(repo)}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "explicit build (GGML_NATIVE=OFF, AVX2), smoke check passed"
