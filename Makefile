# streamstack task runner. `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required; set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --constraint constraints.txt --editable '.[dev]'
	@touch $(STAMP)

setup: $(STAMP) ## install Python packages (pinned), fetch Kafka, the Spark connector, Prometheus, PostgreSQL and Debezium, build the jobs' jar and the drivers' class archive
	$(BIN)/streamstack setup
	$(BIN)/python -m jobs.jvm.build
	$(BIN)/python -m streamstack.local.class_archive

up: setup ## run the local pipeline (PostgreSQL -> Debezium -> Kafka -> PySpark -> Kafka, Prometheus) with a live status; Ctrl-C stops it
	$(BIN)/streamstack local up

down: ## stop a local pipeline started with `streamstack local up --detach`
	$(BIN)/streamstack local down

status: ## show the local pipeline
	$(BIN)/streamstack local status

lint: $(STAMP) ## ruff (lint and format) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# helm and actionlint need Go and the standard library only, not the virtualenv: under `make --jobs=2` they
# build while pip installs, which leaves most of a core idle.
go-tools: ## build helm and actionlint with `go install` (part of setup-all)
	$(PYTHON) -m streamstack.runtimes --go-tools

setup-all: $(STAMP) go-tools ## setup, plus helm and actionlint (go install) and checkov for the Kubernetes-side checks
	$(BIN)/streamstack setup --kubernetes-tools
	$(BIN)/python -m jobs.jvm.build
	$(BIN)/python -m streamstack.local.class_archive

# Two pytest workers (2 cores): while one waits on a JVM, a broker or a watermark, the other runs; whole files
# per worker, so a module's fixtures (a local stack, a broker) start once.
test: ## set up and lint (two at once), then the whole test suite on real Kafka, Spark, Prometheus, helm and checkov
	$(MAKE) --jobs=2 setup-all lint
	$(BIN)/pytest -n 2 --dist loadfile --durations=25

dashboards: $(STAMP) ## regenerate the Grafana dashboards (monitoring/dashboards/generated/*.json) from code
	$(BIN)/python -m monitoring.dashboards.build

bench-jobs: setup ## the window job beside Spark's ceiling, textbook PySpark, Quix Streams and a plain consumer; PyFlink with BENCH_ARGS=--engines=...,flink
	$(BIN)/python -m scripts.bench_windows $(BENCH_ARGS)

bench-local: setup ## the local stack at its defaults, ~11 min: utilization, lag, alerts vs goals (BENCH_ARGS=flags)
	$(BIN)/python -m scripts.bench_local $(BENCH_ARGS)

bench-tables: setup ## user-enrichment's (or --job user-view's) batch duration at 10k, 100k and 1M users, ~7 min (BENCH_ARGS=flags)
	$(BIN)/python -m scripts.bench_tables $(BENCH_ARGS)

bench-stateful: setup ## view-bursts and order-state (flatMapGroupsWithState, Java): events/s and state bytes per key (BENCH_ARGS=flags)
	$(BIN)/python -m scripts.bench_stateful $(BENCH_ARGS)

bench-batch-cost: setup ## fixed cost per micro-batch, ~20 min: each lever alone and combined (BENCH_ARGS=flags)
	$(BIN)/python -m scripts.bench_batch_cost $(BENCH_ARGS)

bench-decode: setup ## decode micro-benchmark, 1-6 min: scan vs SQL decoder vs JVM decoder, µs/record (BENCH_ARGS=flags)
	$(BIN)/python -m scripts.bench_decode $(BENCH_ARGS)

bench-exporter: setup ## the lag exporter beside kafka_exporter (KAFKA_EXPORTER=binary) up to 50,000 partitions x 500 groups, 23-35 min (BENCH_ARGS=flags)
	$(BIN)/python -m scripts.bench_exporter --kafka-exporter "$(KAFKA_EXPORTER)" $(BENCH_ARGS)

lock: $(STAMP) ## re-pin every Python package after changing pyproject.toml
	$(BIN)/pip freeze --exclude-editable | grep -v '^streamstack' > constraints.txt

.PHONY: help setup setup-all go-tools up down status lint test lock dashboards
