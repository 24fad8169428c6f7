#!/usr/bin/env bash
# Copy the peer runs into tests/fixtures/peers/: the vLLM record files as written, and their Prometheus
# scrapes (after the warm-up: *.before.prom; after the run: *.prom) cut to the counter families
# engine.interop.prometheus reads (HELP/TYPE lines kept), so the fixtures stay small.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
runs="${1:-${SPECLAB_PEERS:-$HOME/.cache/speclab/peers}/runs}"
dst="${2:-$here/../../tests/fixtures/peers}"
cache="${SPECLAB_CACHE:-$HOME/.cache/speclab}"
mkdir -p "$dst"
keep='vllm:(spec_decode_[a-z_]+|generation_tokens|prompt_tokens|request_success)(_total|_created)?[{ ]'
for f in "$runs"/vllm-*.jsonl; do
  [ -f "$f" ] || continue
  # model paths of this machine become bare model names (the folder names `make models` uses)
  sed "s#$cache/##g" "$f" > "$dst/$(basename "$f")"
  b="${f%.jsonl}"
  for p in "$b.before.prom" "$b.prom"; do
    [ -f "$p" ] && grep -E "^(# (HELP|TYPE) )?$keep" "$p" | grep -v '_created' | sed "s#$cache/##g" \
      > "$dst/$(basename "$p")" || true
  done
done
# llama.cpp: the response files and the llama-speculative-simple log (not the servers' own logs)
for f in "$runs"/llamacpp-*.jsonl "$runs"/llamacpp-speculative-simple-*.log; do
  [ -f "$f" ] && sed "s#$cache/##g" "$f" > "$dst/$(basename "$f")"
done
ls -la "$dst"
