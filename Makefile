# The verbs of this project. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

.PHONY: venv
venv: $(STAMP) ## Create .venv and install the project with its test and dev extras

.PHONY: test
test: $(STAMP) ## Run every test tier (unit tests and doctests)
	$(PY) -m pytest

.PHONY: lint
lint: $(STAMP) ## ruff, mypy (strict for runtime/) and the import-layering check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

.PHONY: bench
bench: $(STAMP) ## Run the benchmarks in hack/bench (each prints one JSON line last)
	$(PY) hack/bench/workqueue.py

.PHONY: run
run: $(STAMP) ## Run the operator (not yet: arrives with the Manager issue)
	@echo "make run: the rayservice-manager binary is not built yet (see the Manager issue)." >&2
	@exit 1

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
