# neurarch-trace: the one entry point. `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: help install build serve test browser golden crawl bench fuzz accuracy bench-scale faults clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	@touch $@

# torch 2.13.0 is pinned exactly: pip takes the CPU wheel on disk (a range would pull a CUDA build).
$(TEST_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $@

install: $(STAMP) ## create .venv/ and install the project into it

build: $(STAMP) ## build the site from the committed snapshot into public/ (offline)
	$(BIN)/neurarch-trace build --out public $(BUILD_FLAGS)

serve: ## serve public/ on http://127.0.0.1:8000
	$(BIN)/python -m http.server 8000 --bind 127.0.0.1 --directory public

test: $(TEST_STAMP) browser ## run the test suite (installs torch CPU + transformers for the oracle, chromium)
	$(BIN)/python -m pytest -q

# tests/test_browser.py drives Debian's chromium headless over the DevTools protocol. Installed here
# when missing (apt-get as root, else sudo -n); if that is impossible the test skips and says why.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
browser: ## install chromium for the browser test when it is missing (apt-get)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { echo "installing chromium for tests/test_browser.py (apt-get)"; \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium could not be installed: tests/test_browser.py will be skipped"

golden: $(TEST_STAMP) ## regenerate the golden pages on purpose (review the diff!)
	UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q tests/test_site_golden.py

crawl: $(STAMP) ## refresh snapshot/ from the Hugging Face Hub (network)
	$(BIN)/neurarch-trace crawl

bench: $(TEST_STAMP) ## benchmarks (not tests): estimator vs transformers on meta; 1,000-model site build; no-change rebuild
	$(BIN)/python benchmarks/bench_estimator.py
	$(BIN)/python benchmarks/bench_site.py

fuzz: $(TEST_STAMP) ## long fuzz run: 10,000 mutated snapshot configs (FUZZ_EXAMPLES=N to change)
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-10000} $(BIN)/python -m pytest -q tests/test_fuzz.py --hypothesis-show-statistics

accuracy: $(TEST_STAMP) ## recompute the published accuracy figures from data/measurements/ and the estimator
	$(BIN)/python -m generator.accuracy

bench-scale: $(STAMP) ## scale benchmark: synthetic 1k/10k/100k-model snapshots, full + 1%-changed builds (SIZES="1000 10000" to shorten, SHARD_SIZE=N search shard size)
	$(BIN)/python benchmarks/bench_scale.py $(or $(SIZES),1000 10000 100000) $(if $(SHARD_SIZE),--shard-size $(SHARD_SIZE))

faults: $(TEST_STAMP) ## the crawl and build kill tests at more random points (FAULT_RUNS=N, default 100)
	FAULT_RUNS=$${FAULT_RUNS:-100} $(BIN)/python -m pytest -q -s tests/test_faults_crawl.py tests/test_faults_build.py

clean: ## remove build output
	rm -rf public .pytest_cache test-artifacts
