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

CONTROLPLANE_BUILD := hack/controlplane/build.sh
CLUSTER_DIR := .cluster

.PHONY: controlplane
controlplane: ## Build (or reuse) etcd, kube-apiserver, ... from Go modules into ~/.cache
	@$(CONTROLPLANE_BUILD) >/dev/null

.PHONY: ray
ray: ## Install (or reuse) ray[serve] in its own venv under ~/.cache, for the real-Ray tests
	@hack/realray/install.sh >/dev/null

COVERAGE_DIR := build/coverage

# One run: pytest under coverage.py (branch, subprocesses too: [tool.coverage] in
# pyproject.toml), then the table and the floors (the total's `fail_under` in pyproject,
# per-package ones in hack/coverage_floor.py). Fails if the tests or a floor fail.
.PHONY: test
test: $(STAMP) controlplane ray ## Run every test tier (unit, doctests, integration) measured; coverage table and floors
	@rm -rf $(COVERAGE_DIR)
	@status=0; $(PY) -m coverage run -m pytest || status=$$?; \
	$(PY) -m coverage combine -q && \
	$(PY) -m coverage report || status=$$((status ? status : $$?)); \
	$(PY) -m coverage json -q -o $(COVERAGE_DIR)/coverage.json --fail-under=0 && \
	$(PY) hack/coverage_floor.py $(COVERAGE_DIR)/coverage.json || status=$$((status ? status : $$?)); \
	exit $$status

.PHONY: coverage
coverage: test ## The same run as `make test` (it prints the branch-coverage table and checks the floors)

.PHONY: test-unit
test-unit: $(STAMP) ## Only the fast tiers: unit tests and doctests (no server)
	$(PY) -m pytest tests/unit runtime controllers api

# `make cluster-up CLUSTER_DIR=/tmp/x` keeps a second one apart; hack/cluster.sh documents the rest.
CLUSTER_BIN_DIR ?=
CLUSTER_UP_TIMEOUT ?= 120
CLUSTER_DOWN_TIMEOUT ?= 30
CLUSTER_FLAGS ?=
CLUSTER_ENV = CLUSTER_DIR='$(abspath $(CLUSTER_DIR))' PY='$(abspath $(PY))' \
	CLUSTER_BIN_DIR='$(CLUSTER_BIN_DIR)' CLUSTER_UP_TIMEOUT='$(CLUSTER_UP_TIMEOUT)' \
	CLUSTER_DOWN_TIMEOUT='$(CLUSTER_DOWN_TIMEOUT)' CLUSTER_FLAGS='$(CLUSTER_FLAGS)'

.PHONY: cluster-up
cluster-up: $(STAMP) controlplane ## Start a local control plane in the background (stopped again if not ready in CLUSTER_UP_TIMEOUT s)
	@$(CLUSTER_ENV) hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop it; SIGKILL after CLUSTER_DOWN_TIMEOUT s; no process or pod network left
	@$(CLUSTER_ENV) hack/cluster.sh down

.PHONY: lint
lint: $(STAMP) ## ruff, mypy (strict: runtime/, api/, controllers/) and the import-layering check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) hack/gen_manifests.py --check
	$(PY) hack/gen_rbac_overlay.py --check

.PHONY: manifests
manifests: $(STAMP) ## Generate CRDs (from api/v1) and config/rbac/role.yaml (from controllers/rbac.py)
	$(PY) hack/gen_manifests.py
	$(PY) hack/gen_rbac_overlay.py

.PHONY: bench
bench: $(STAMP) controlplane ## Run the benchmarks in hack/bench (each prints one JSON line last)
	$(PY) hack/bench/workqueue.py
	$(PY) hack/bench/cache.py
	$(PY) hack/bench/raycluster.py --clusters $${BENCH_CLUSTERS:-200}
	$(PY) hack/bench/raysim.py

MANAGER_FLAGS ?= --metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081

.PHONY: run
run: $(STAMP) ## Run the operator: against $KUBECONFIG if set, else a local control plane (Ctrl-C stops both)
	@if [ -n "$$KUBECONFIG" ]; then \
		exec $(VENV)/bin/rayservice-manager --kubeconfig "$$KUBECONFIG" $(MANAGER_FLAGS); \
	fi; \
	started=no; \
	if ! { [ -f $(CLUSTER_DIR)/pid ] && kill -0 $$(cat $(CLUSTER_DIR)/pid) 2>/dev/null; }; then \
		$(MAKE) --no-print-directory cluster-up || exit 1; started=yes; \
	fi; \
	sim=; \
	trap 'if [ -n "$$sim" ]; then kill $$sim 2>/dev/null; wait $$sim 2>/dev/null; fi; \
		if [ $$started = yes ]; then $(MAKE) --no-print-directory cluster-down; fi' EXIT; \
	if [ -d config/crd/bases ]; then \
		"$$($(CONTROLPLANE_BUILD) --print-bin-dir)/kubectl" --kubeconfig $(CLUSTER_DIR)/kubeconfig \
			apply -f config/crd/bases >/dev/null && echo "CRDs installed"; \
	fi; \
	ns=$$(sed -n 's/^netns=//p' $(CLUSTER_DIR)/state 2>/dev/null | head -n 1); \
	if [ -n "$$ns" ]; then \
		$(PY) -m hack.raysim --kubeconfig $(abspath $(CLUSTER_DIR))/kubeconfig --netns "$$ns" \
			> $(CLUSTER_DIR)/raysim.log 2>&1 & sim=$$!; \
		echo "Ray simulator answering for head pods at their IPs (log: $(CLUSTER_DIR)/raysim.log)"; \
	fi; \
	echo "running rayservice-manager against the local control plane (Ctrl-C to stop)"; \
	$(VENV)/bin/rayservice-manager --kubeconfig $(abspath $(CLUSTER_DIR))/kubeconfig \
		--dashboard-address-mode pod-ip $(MANAGER_FLAGS)

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) $(CLUSTER_DIR) .pytest_cache .mypy_cache .ruff_cache
