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

COVERAGE_DIR := build/coverage

# One run: pytest under coverage.py (branch, subprocesses too: [tool.coverage] in
# pyproject.toml), then the table and the floors (the total's `fail_under` in pyproject,
# per-package ones in hack/coverage_floor.py). Fails if the tests or a floor fail.
.PHONY: test
test: $(STAMP) controlplane ## Run every test tier (unit, doctests, integration) measured; coverage table and floors
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

.PHONY: cluster-up
cluster-up: $(STAMP) controlplane ## Start a local control plane in the background; prints its kubeconfig
	@mkdir -p $(CLUSTER_DIR)
	@if [ -f $(CLUSTER_DIR)/pid ] && kill -0 $$(cat $(CLUSTER_DIR)/pid) 2>/dev/null; then \
		echo "already running: KUBECONFIG=$(CURDIR)/$(CLUSTER_DIR)/kubeconfig"; exit 0; fi
	@rm -f $(CLUSTER_DIR)/kubeconfig
	@nohup $(PY) -m runtime.testing.controlplane up --bin-dir "$$($(CONTROLPLANE_BUILD) --print-bin-dir)" \
		--kubeconfig-out $(CURDIR)/$(CLUSTER_DIR)/kubeconfig > $(CLUSTER_DIR)/log 2>&1 & echo $$! > $(CLUSTER_DIR)/pid
	@for i in $$(seq 1 600); do \
		grep -q '^KUBECONFIG=' $(CLUSTER_DIR)/log 2>/dev/null && break; \
		kill -0 $$(cat $(CLUSTER_DIR)/pid) 2>/dev/null || { cat $(CLUSTER_DIR)/log >&2; rm -f $(CLUSTER_DIR)/pid; exit 1; }; \
		sleep 0.1; done
	@grep -E '^(control plane|KUBECONFIG=)' $(CLUSTER_DIR)/log

.PHONY: cluster-down
cluster-down: ## Stop the local control plane started by cluster-up
	@if [ -f $(CLUSTER_DIR)/pid ]; then \
		pid=$$(cat $(CLUSTER_DIR)/pid); kill $$pid 2>/dev/null || true; \
		for i in $$(seq 1 300); do kill -0 $$pid 2>/dev/null || break; sleep 0.1; done; \
		rm -f $(CLUSTER_DIR)/pid; echo "control plane stopped"; \
	else echo "no control plane running"; fi

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
	if [ $$started = yes ]; then trap '$(MAKE) --no-print-directory cluster-down' EXIT; fi; \
	if [ -d config/crd/bases ]; then \
		"$$($(CONTROLPLANE_BUILD) --print-bin-dir)/kubectl" --kubeconfig $(CLUSTER_DIR)/kubeconfig \
			apply -f config/crd/bases >/dev/null && echo "CRDs installed"; \
	fi; \
	echo "running rayservice-manager against the local control plane (Ctrl-C to stop)"; \
	$(VENV)/bin/rayservice-manager --kubeconfig $(CURDIR)/$(CLUSTER_DIR)/kubeconfig $(MANAGER_FLAGS)

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) $(CLUSTER_DIR) .pytest_cache .mypy_cache .ruff_cache
