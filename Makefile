# kubeherd developer commands. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

UV_VERSION := 0.13.9
KUBEHERD_CACHE ?= $(HOME)/.cache/kubeherd
# uv from PATH if there is one, else a private copy in the cache (installed by `make tools`).
UV ?= $(or $(shell command -v uv 2>/dev/null),$(KUBEHERD_CACHE)/uv-$(UV_VERSION)/bin/uv)
RUN := $(UV) run --frozen
LOCALCLUSTER := PYTHONPATH=hack $(RUN) python -m localcluster
NODES ?= 3
export NODES
# REAL_NODE=1: cluster-up and run add a real node (kubelet, containerd; needs root).
REAL_NODE ?=
export REAL_NODE
# K8S_VERSION=1.34 (or v1.34.4): cluster-up and run start that pinned minor's control plane
# (hack/k8s/<minor>); empty: the newest. Passed to those two only, so no test tool follows it.
K8S_VERSION ?=

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(KUBEHERD_CACHE)/uv-$(UV_VERSION)/bin/uv:
	python3 -m venv $(KUBEHERD_CACHE)/uv-$(UV_VERSION)
	$(KUBEHERD_CACHE)/uv-$(UV_VERSION)/bin/pip install --quiet uv==$(UV_VERSION)

.PHONY: tools
tools: $(if $(shell command -v uv 2>/dev/null),,$(KUBEHERD_CACHE)/uv-$(UV_VERSION)/bin/uv) ## Install uv (into the cache) if it is not on PATH

.PHONY: deps
deps: tools ## Create .venv with the locked dependencies (uv.lock)
	$(UV) sync --frozen

.PHONY: lock
lock: tools ## Re-resolve dependencies into uv.lock after editing pyproject.toml
	$(UV) lock

.PHONY: bins
bins: deps ## Build (or find cached) etcd, kube-*, kubectl, kwok, helm, containerd, CNI from hack/*/go.mod
	$(LOCALCLUSTER) build

# The metrics tests run Prometheus and promtool: built before pytest starts, so that a cold
# build (minutes) never runs inside a test under pytest's per-test timeout.
.PHONY: monitoring-tools
monitoring-tools: deps ## Build (or find cached) prometheus and promtool from hack/prometheus/go.mod
	$(LOCALCLUSTER) monitoring-tools

# Every binary the tests run, built before pytest starts: a cold build (minutes) must never run
# inside a test under pytest's per-test timeout.
.PHONY: test-tools
test-tools: deps ## Build (or find cached) what `make test` runs: bins, kube-scheduler of every pinned minor, the oldest's control plane, prometheus
	$(LOCALCLUSTER) test-tools >/dev/null

# The real-node tests run these images: built before pytest starts (a cold operator image or Go
# build must never run inside a test under pytest's per-test timeout).
.PHONY: images
images: bins ## Build (or find cached) the real node's images: pause, testbox, scheduler, scheduler-plugin, operator
	PYTHONPATH=hack $(RUN) python -m localcluster.images --if-real-node

.PHONY: cluster-up
cluster-up: deps ## Start the local control plane with NODES fake nodes (K8S_VERSION=1.34: that minor; REAL_NODE=1: and a real node)
	$(LOCALCLUSTER) up $(if $(K8S_VERSION),--kubernetes-version=$(K8S_VERSION))

.PHONY: cluster-down
cluster-down: deps ## Stop every process cluster-up started and undo the real node's machine changes
	$(LOCALCLUSTER) down

.PHONY: cluster-status
cluster-status: deps ## Show which control-plane processes run
	$(LOCALCLUSTER) status

# The scheduler catalogs are derived from each Kubernetes minor pinned under hack/k8s by the Go
# program in hack/schedcatalog; tests/integration/test_catalogs.py fails when they drift.
.PHONY: catalogs
catalogs: deps ## Regenerate the scheduler catalogs (operator/kubeherd/scheduler/catalogs) from each pinned Kubernetes minor's source
	PYTHONPATH=hack $(RUN) python -m localcluster.catalogs

.PHONY: crds
crds: deps ## Regenerate crds/, the chart's copy and docs/reference.md from the pydantic models
	$(RUN) kubeherd crds customdaemonsets > crds/customdaemonsets.kubeherd.io.yaml
	$(RUN) kubeherd crds schedulerprofiles > crds/schedulerprofiles.kubeherd.io.yaml
	cp crds/*.yaml charts/kubeherd/files/crds/
	$(RUN) kubeherd reference > docs/reference.md

CLUSTER ?= local

.PHONY: run
run: deps ## Quickstart: local cluster (K8S_VERSION=1.34, REAL_NODE=1, CLUSTER=current), CRDs, RBAC, examples/, the operator
	@UV="$(UV)" CLUSTER="$(CLUSTER)" K8S_VERSION="$(K8S_VERSION)" bash hack/run.sh

IMAGE ?= kubeherd:$(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# Without a Docker engine, `make image` builds this one with buildah (hack/localcluster/images.py).
BUILDAH_IMAGE := localhost/kubeherd/kubeherd:dev

.PHONY: image
image: deps ## Build the operator image: IMAGE=... with Docker, else localhost/kubeherd/kubeherd:dev with buildah
	@if docker info >/dev/null 2>&1; then \
	  echo "docker build -t $(IMAGE) ."; \
	  docker build -t $(IMAGE) .; \
	else \
	  echo "No Docker engine (docker info failed): building $(BUILDAH_IMAGE) with buildah" >&2; \
	  PYTHONPATH=hack $(RUN) python -m localcluster.images --only operator \
	    | while read -r reference archive; do \
	        echo "$$reference is in the OCI archive $$archive"; \
	        echo "load it with: ctr -n k8s.io images import $$archive"; \
	      done; \
	fi

# Evaluated only by the targets that use it: the path of the helm binary `make bins` built.
HELM = $(shell $(LOCALCLUSTER) build 2>/dev/null | awk '$$1 == "helm" {print $$2}')

.PHONY: chart-lint
chart-lint: bins ## helm lint --strict and helm template of charts/kubeherd (make test runs them too)
	$(HELM) lint --strict charts/kubeherd
	$(HELM) template kubeherd charts/kubeherd --namespace kubeherd-system > /dev/null
	@echo "chart renders"

PROMTOOL = $(shell $(LOCALCLUSTER) monitoring-tools 2>/dev/null | awk '$$1 == "promtool" {print $$2}')

.PHONY: alerts
alerts: deps ## promtool check and test of the chart's alert rules (builds Prometheus once, cached)
	$(PROMTOOL) check rules charts/kubeherd/rules/kubeherd-alerts.yaml
	$(PROMTOOL) test rules tests/promtool/kubeherd-alerts.test.yaml

.PHONY: fmt
fmt: deps ## Format and auto-fix the Python code
	$(RUN) ruff format operator hack tests bench charts/kubeherd/files
	$(RUN) ruff check --fix operator hack tests bench charts/kubeherd/files

.PHONY: lint
lint: deps ## ruff (lint and format check), mypy --strict and the layer rules (import-linter)
	$(RUN) ruff check operator hack tests bench charts/kubeherd/files
	$(RUN) ruff format --check operator hack tests bench charts/kubeherd/files
	$(RUN) mypy
	PYTHONPATH=operator $(RUN) lint-imports --no-cache

.PHONY: unit
unit: lint ## Lint, then the unit tests only: no control plane, done in seconds
	$(RUN) pytest tests/unit $(PYTEST_ARGS)

.PHONY: test
test: lint test-tools images ## Lint, then every test against local control planes the tests start (and a real node)
	@# pytest exits 5 when it collected no tests: that must fail, not pass quietly.
	$(RUN) pytest $(PYTEST_ARGS) || { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

# make test-memory: the size of the real-node memory test run alone (make test runs 2000 x 5),
# and the local kube-scheduler's client QPS (its default binds about 50 pods a second).
MEMORY_NODES ?= 2000
MEMORY_DAEMONSETS ?= 5
MEMORY_SCHEDULER_QPS ?= 500

.PHONY: test-memory
test-memory: lint test-tools images ## The chart's default memory limit on the real node at MEMORY_NODES x MEMORY_DAEMONSETS
	KUBEHERD_MEMORY_TEST_NODES=$(MEMORY_NODES) KUBEHERD_MEMORY_TEST_DAEMONSETS=$(MEMORY_DAEMONSETS) \
	  KUBEHERD_REAL_SCHEDULER_QPS=$(MEMORY_SCHEDULER_QPS) $(RUN) pytest tests/realnode/test_operator_memory.py -s $(PYTEST_ARGS)

# make bench: arguments for `python -m bench`, e.g. BENCH_ARGS="--nodes 500 --runs 1 --only B1,B3".
BENCH_ARGS ?=

# The operator under benchmark runs from a virtualenv with its runtime dependencies only, as in
# the image (kept out of .venv: the test tools would add to its memory).
RUNTIME_VENV := .venv-runtime

.PHONY: bench
bench: bins ## Benchmarks vs the native DaemonSet (B1-B5, about 30 min); appends to docs/benchmarks.md
	UV_PROJECT_ENVIRONMENT=$(RUNTIME_VENV) $(UV) sync --frozen --no-default-groups --no-editable --reinstall-package kubeherd --quiet
	KUBEHERD_OPERATOR_PYTHON=$(CURDIR)/$(RUNTIME_VENV)/bin/python PYTHONPATH=hack:. $(RUN) python -m bench $(BENCH_ARGS)

# make bench-scrape: arguments for `python -m bench.scrape_lag`, e.g. SCRAPE_ARGS="--concurrency 0"
# (the loop's lag with no scraper) or "--daemonsets 1000 --concurrency 8".
SCRAPE_ARGS ?=

.PHONY: bench-scrape
bench-scrape: deps ## Event-loop lag while /metrics is scraped at 5,000 CustomDaemonSets (no cluster, 20 s)
	PYTHONPATH=. $(RUN) python -m bench.scrape_lag $(SCRAPE_ARGS)

# make bench-records: arguments for `python -m bench.pod_records`, e.g. RECORDS_ARGS="--nodes 5000".
RECORDS_ARGS ?=

.PHONY: bench-records
bench-records: deps ## Bytes per watched daemon pod, by structure (no cluster, seconds)
	PYTHONPATH=. $(RUN) python -m bench.pod_records $(RECORDS_ARGS)

# make bench-listing: arguments for `python -m bench.listing`, e.g. LISTING_ARGS="--pods 150000".
LISTING_ARGS ?=

.PHONY: bench-listing
bench-listing: bins ## Seconds to list the daemon pods, streamed vs in pages (own cluster, about 5 min)
	PYTHONPATH=hack:. $(RUN) python -m bench.listing $(LISTING_ARGS)

# make bench-flood: arguments for `python -m bench.scrape_flood`, e.g. FLOOD_ARGS="--runs 5" or
# "--arms none,prometheus,flood" or "--fillers 1000".
FLOOD_ARGS ?=

.PHONY: bench-flood
bench-flood: bins ## A 1000-node rollout with and without a /metrics scrape flood (about 20 min); appends to docs/benchmarks.md
	UV_PROJECT_ENVIRONMENT=$(RUNTIME_VENV) $(UV) sync --frozen --no-default-groups --no-editable --reinstall-package kubeherd --quiet
	KUBEHERD_OPERATOR_PYTHON=$(CURDIR)/$(RUNTIME_VENV)/bin/python PYTHONPATH=hack:. $(RUN) python -m bench.scrape_flood $(FLOOD_ARGS)

# make bench-refusals: arguments for `python -m bench.refusals`, e.g.
# REFUSALS_ARGS="--nodes 200 --window 30" or "--cases quota,webhook,policy".
REFUSALS_ARGS ?=

.PHONY: bench-refusals
bench-refusals: bins ## Pod creates refused by a quota, a webhook or a policy in a CustomDaemonSet's first minute (own cluster, about 6 min)
	UV_PROJECT_ENVIRONMENT=$(RUNTIME_VENV) $(UV) sync --frozen --no-default-groups --no-editable --reinstall-package kubeherd --quiet
	KUBEHERD_OPERATOR_PYTHON=$(CURDIR)/$(RUNTIME_VENV)/bin/python PYTHONPATH=hack:. $(RUN) python -m bench.refusals $(REFUSALS_ARGS)

# make test-kind: kind and its node image, as pytest-kind fetches them (override to taste).
KIND_VERSION ?= v0.29.0
KIND_NODE_IMAGE ?= kindest/node:v1.33.1
KIND_OPERATOR_IMAGE ?= kubeherd:test-kind
KUBECTL = $(shell $(LOCALCLUSTER) build 2>/dev/null | awk '$$1 == "kubectl" {print $$2}')

.PHONY: test-kind
test-kind: lint bins ## The end-to-end suite on a kind cluster from pytest-kind (needs Docker and internet)
	@docker info >/dev/null 2>&1 || { echo "make test-kind needs a running Docker engine (docker info failed)" >&2; exit 1; }
	$(MAKE) image IMAGE=$(KIND_OPERATOR_IMAGE)
	KIND_VERSION=$(KIND_VERSION) KUBEHERD_KIND_OPERATOR_IMAGE=$(KIND_OPERATOR_IMAGE) \
	  $(RUN) pytest tests/integration --on-kind --cluster-name=kubeherd-e2e \
	  --kind-image=$(KIND_NODE_IMAGE) --kind-kubectl-bin=$(KUBECTL) $(PYTEST_ARGS)

.PHONY: clean
clean: cluster-down ## Stop the cluster and remove .cluster/ and caches in the tree
	rm -rf .cluster .mypy_cache .ruff_cache .pytest_cache
