# Floe: the commands users and CI run. Every target does its own set-up.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
BIN := $(VENV)/bin
PYTHON ?= python3.11
PYTEST_ARGS ?=
# `make test` leaves out tests marked slow (the 20-SIGKILL chaos run over 100,000 lines takes
# most of an hour on 2 cores) except the slow proofs marked `proof` (the operator kill storm and
# the 3-node Cassandra ring: minutes each); `make test-all` runs them all.
TEST_MARKERS ?= (not slow or proof)$(if $(filter 0,$(NODE) $(FLOE_NODE)), and not node,)
export FLOE_CACHE ?= $(HOME)/.cache/floe
export FLOE_ROOT := $(CURDIR)
# The stack has a node (containerd, kubelet, kube-proxy and the images built here), so pods run
# for real. `make up NODE=0` (or FLOE_NODE=0) leaves it out, and `make test NODE=0` then
# deselects the tests marked node.
ifeq ($(NODE),0)
export FLOE_NODE := 0
endif

.PHONY: help venv up down status lint test test-all unit bench demo clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) is required (Python 3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(BIN)/.installed ## Create .venv with Floe and its dev tools

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

unit: venv ## Unit tests only (pure functions, no stack)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

test: venv lint up ## Lint, then every test but the slow ones against the real local stack
	$(BIN)/pytest tests -m "$(TEST_MARKERS)" --durations=25 $(PYTEST_ARGS)

test-all: venv lint up ## Every test, the slow chaos run included
	$(BIN)/pytest tests $(PYTEST_ARGS)

bench: venv up ## Benchmarks; JSON results under bench/results/
	@set -e; for b in tests/bench/*_bench.py; do echo "make: $$b"; $(BIN)/python $$b; done
	$(BIN)/python -m floe_stack.benchtable

demo: venv up ## Floe end to end: chart, operator, word-count StreamingApp, replicas, counts and lag
	@$(BIN)/python -m floe_stack.demo

clean: ## Stop the stack and remove this checkout's data and runtime files (downloads and builds stay cached)
	@if [ -x $(BIN)/floe-stack ]; then $(BIN)/floe-stack clean; else rm -rf .floe; fi
