# Floe: the commands users and CI run. Every target does its own set-up.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= python3.11
PYTEST_ARGS ?=
# `make test` leaves out the tests marked slow: proofs that need minutes each (the operator kill
# storm, the 3-node Cassandra ring, ten pod kills, the long scaling run) or most of an hour (the
# 20-SIGKILL chaos run over 100,000 lines on 2 cores); `make test-all` runs them all.
TEST_MARKERS ?= not slow$(if $(filter 0,$(NODE) $(FLOE_NODE)), and not node,)
# The suite runs in two lanes on the one stack (tests/lanes.py). The parallel lane runs every test
# not marked `exclusive` on LANES pytest-xdist workers, each test with names of its own
# (--dist loadgroup): the tests of a one-holder resource (the node, the secured Cassandra node,
# Prometheus's rules) on one worker, a module's tests that share a module-scoped scenario on
# one worker in their order, the rest wherever a worker is free. pytest stays below 9: xdist
# 3.8 applies groups by renaming a test's id, which pytest 9 no longer reads
# (tests/unit/stack/test_lanes.py checks that groups hold). Then the serial lane runs the
# `exclusive` tests, which stop, pause or saturate what every test shares, one at a time.
# Both lanes always run, and the target fails if either failed; each writes JUnit XML under
# TEST_OUT, from which floe_stack.testbudget prints each lane's wall time and the 25 slowest tests.
# LANES=2: two workers, since the parallel lane passed three runs in a row on two (README's CI
# table); 4 workers ran a dozen Spark JVMs at once on 2 cores, slower than one. `make test
# LANES=1` runs the tests one after another.
LANES ?= 2
TEST_OUT ?= build/test
# `make test-fast WING=...`: a wing is a folder of tests/unit or tests/integration.
WINGS := $(sort $(notdir $(patsubst %/,%,$(dir $(wildcard tests/unit/*/__init__.py tests/integration/*/__init__.py)))))
export FLOE_CACHE ?= $(HOME)/.cache/floe
export FLOE_ROOT := $(CURDIR)
# The stack has a node (containerd, kubelet, kube-proxy and the images built here), so pods run
# for real. `make up NODE=0` (or FLOE_NODE=0) leaves it out, and `make test NODE=0` then
# deselects the tests marked node.
ifeq ($(NODE),0)
export FLOE_NODE := 0
endif

.PHONY: help venv lock up down status lint test test-all test-fast wing unit budget bench demo release clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

# The venv installs from the hash-pinned locks under requirements/ (see `make lock`): the build
# tools first, then every dependency with --require-hashes and no build isolation (so building
# pyspark's sdist fetches nothing unhashed), then Floe itself, editable, which has no hash.
$(BIN)/.installed: pyproject.toml requirements/build.lock requirements/dev.lock
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) is required (Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r requirements/build.lock
	$(BIN)/pip install -q --require-hashes --no-build-isolation -r requirements/dev.lock
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	@touch $@

venv: $(BIN)/.installed ## Create .venv with Floe and its dev tools

# The locks, with the sha256 of every file PyPI serves for each pinned version, for Python 3.11
# on Linux x86_64 (this machine and the images' Debian bookworm python3.11). Regenerate them after
# changing pyproject.toml's dependencies or requirements/build.in; tests/unit/stack/test_locks.py
# fails until the locks agree with pyproject.toml. The operator's lock leaves pyspark out, as its
# image does. UPGRADE=1 moves every pin to the newest allowed release.
UV_COMPILE = $(BIN)/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-unknown-linux-gnu --custom-compile-command 'make lock' $(if $(UPGRADE),--upgrade,)
lock: venv ## Regenerate the hash-pinned requirements/*.lock from pyproject.toml and requirements/build.in
	$(UV_COMPILE) requirements/build.in -o requirements/build.lock
	$(UV_COMPILE) pyproject.toml -o requirements/runtime.lock
	$(UV_COMPILE) pyproject.toml --extra dev -o requirements/dev.lock
	set -o pipefail; $(BIN)/python -P -c 'import tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; \
	print("\n".join(d for d in deps if not d.lower().startswith("pyspark")))' \
	| $(UV_COMPILE) - -o requirements/operator.lock

up: venv ## Build (first time) and start Kafka, Cassandra, Kubernetes, Helm, Spark's Kafka connector and Prometheus on loopback
	$(BIN)/floe-stack up

down: ## Stop every process `make up` started (by pid file)
	@if [ -x $(BIN)/floe-stack ]; then $(BIN)/floe-stack down; else echo "make: nothing to stop (no $(VENV))"; fi

status: venv ## Say what is up, with memory
	$(BIN)/floe-stack status

lint: venv ## ruff, mypy (strict), the import contracts of docs/architecture.md and promtool on the chart's alerts
	$(BIN)/ruff check .
	$(BIN)/mypy -p floe_stack -p floe_jobs -p floe_operator
	$(BIN)/lint-imports
	$(BIN)/python -m floe_stack.alertrules

# Pure and CPU-bound (the chart's tests run helm): one xdist worker per core unless told.
UNIT_WORKERS ?= auto
unit: venv ## Unit tests only (pure functions, no stack), one worker per core
	$(BIN)/pytest tests/unit -n $(UNIT_WORKERS) $(PYTEST_ARGS)

# run-lanes(marker expression or empty, test paths): the parallel lane, then the serial lane,
# then the budget; exit 5 (pytest found no test of a lane) is no failure.
and-marks = $(if $(1),($(1)) and $(2),$(2))
define run-lanes
	@mkdir -p $(TEST_OUT); rm -f $(TEST_OUT)/parallel.xml $(TEST_OUT)/serial.xml; failed=0; \
	echo "make: parallel lane ($(LANES) workers): $(2)"; \
	$(BIN)/pytest $(2) -n $(LANES) --dist loadgroup -m "$(call and-marks,$(1),not exclusive)" \
		--junitxml=$(TEST_OUT)/parallel.xml $(PYTEST_ARGS); rc=$$?; [ $$rc = 0 ] || [ $$rc = 5 ] || failed=1; \
	echo "make: serial lane (the exclusive tests, one at a time): $(2)"; \
	$(BIN)/pytest $(2) -p no:xdist -m "$(call and-marks,$(1),exclusive)" \
		--junitxml=$(TEST_OUT)/serial.xml $(PYTEST_ARGS); rc=$$?; [ $$rc = 0 ] || [ $$rc = 5 ] || failed=1; \
	$(BIN)/python -m floe_stack.testbudget $(TEST_OUT)/parallel.xml $(TEST_OUT)/serial.xml; \
	exit $$failed
endef

test: venv lint up ## Lint, then every test but the slow ones against the real local stack, in two lanes
	$(call run-lanes,$(TEST_MARKERS),tests)

test-all: venv lint up ## Every test, the slow chaos run included, in two lanes
	$(call run-lanes,,tests)

test-fast: wing venv up ## The unit and integration tests of one wing, slow ones left out, in two lanes: WING=runtime|operator|...
	$(call run-lanes,not slow$(if $(filter 0,$(NODE) $(FLOE_NODE)), and not node,),$(wildcard tests/unit/$(WING) tests/integration/$(WING)))

wing:
	@$(if $(filter-out 1,$(words $(filter $(WING),$(WINGS)))),echo "make: WING=<one of: $(WINGS)> (the folders of tests/unit and tests/integration)"; exit 2,true)

budget: ## Print the last run's lane times and slowest tests again (from $(TEST_OUT))
	@$(BIN)/python -m floe_stack.testbudget $(TEST_OUT)/parallel.xml $(TEST_OUT)/serial.xml

bench: venv up ## Benchmarks; JSON results under bench/results/
	@set -e; for b in tests/bench/*_bench.py; do echo "make: $$b"; $(BIN)/python $$b; done
	$(BIN)/python -m floe_stack.benchtable

demo: venv up ## Floe end to end: chart, operator, word-count StreamingApp, replicas, counts and lag
	@$(BIN)/python -m floe_stack.demo

# A release of this tree's version (pyproject.toml) under build/release/<version>/: the chart
# (.tgz, index.yaml, OCI layout), the job and operator images as OCI archives named as the chart
# and the examples expect, an SBOM of each and SHA256SUMS (docs/releasing.md). It builds helm and
# the images when they are missing, as `make up` does, and needs no running stack.
# REGISTRY=… names the images (and the chart's default operator repository) for another
# registry; CHART_URL=… is where the .tgz will be served, for index.yaml ({version} is replaced).
release: venv ## Build the release artifacts of this version under build/release/<version>/
	$(BIN)/python -m floe_stack.release $(if $(REGISTRY),--registry '$(REGISTRY)',) $(if $(CHART_URL),--chart-url '$(CHART_URL)',)

clean: ## Stop the stack and remove this checkout's data and runtime files (downloads and builds stay cached)
	@if [ -x $(BIN)/floe-stack ]; then $(BIN)/floe-stack clean; else rm -rf .floe; fi
