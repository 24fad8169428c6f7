#!/usr/bin/env bash
# vLLM runs behind tests/fixtures/peers/: the Qwen pair, greedy, 48 tokens, the six Spec-Bench dev
# prompts (one per task) of a speclab trace, one config at a time (2 threads), detailed per-request
# metrics and the Prometheus counters. Needs scripts/peers/install.sh vllm and `make models`.
# Usage: scripts/peers/run_vllm_fixtures.sh [PROMPTS_TRACE] [OUT_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
PEERS="${SPECLAB_PEERS:-$HOME/.cache/speclab/peers}"
CACHE="${SPECLAB_CACHE:-$HOME/.cache/speclab}"
prompts="${1:-$here/../../docs/results/bench-qwen-bf16/fixed-2-t0.jsonl}"
out="${2:-$PEERS/runs}"
threads="${THREADS:-2}"
mkdir -p "$out"
export OMP_NUM_THREADS="$threads" VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-auto}"
py="$PEERS/vllm/bin/python"
for cfg in ${CONFIGS:-draft:2 draft:4 ngram:4 ar:0}; do
  m="${cfg%%:*}"; k="${cfg##*:}"
  "$py" "$here/run_vllm.py" --target "$CACHE/qwen2.5-coder-1.5b" --draft "$CACHE/qwen2.5-coder-0.5b" \
      --method "$m" --k "$k" --prompts-from "$prompts" --max-tokens 48 --out "$out/vllm-$m-k$k.jsonl"
done
