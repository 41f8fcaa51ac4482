# neurarch-trace: the one entry point. `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: help install build serve test lint browser golden crawl bench fuzz accuracy bench-scale faults clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# PYTHONWARNINGS=ignore hides setuptools' notes about the editable install (informational only); a
# failed install still prints its error and stops make.
PIP_INSTALL := PYTHONWARNINGS=ignore $(BIN)/pip install --quiet

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(PIP_INSTALL) --upgrade pip
	@echo "installing the project into $(VENV)/ (pip install -e .)"
	@$(PIP_INSTALL) -e .
	@touch $@

# torch 2.13.0 is pinned exactly. PyPI's torch 2.13.0 for Linux is the multi-GB CUDA build; the CPU build
# (all the tests need) comes from PyTorch's CPU index: make test TORCH_INDEX=https://download.pytorch.org/whl/cpu
# (or a CPU wheel pip already finds, as on the project's build machines).
TORCH_INDEX ?=
$(TEST_STAMP): $(STAMP) pyproject.toml
	@echo "installing the test extras (torch 2.13.0$(if $(TORCH_INDEX), from $(TORCH_INDEX)), transformers, ...)"
	@$(PIP_INSTALL) $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -e '.[test]'
	@touch $@

# The model pages' calculator runs the estimator in the browser with Pyodide, pinned exactly in package.json and
# package-lock.json (version and integrity): `npm ci` installs it into node_modules/, which the site build copies
# from. Without npm the build still works, and its summary says the calculator is missing.
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	@if command -v npm >/dev/null 2>&1; then echo "installing Pyodide for the calculator (npm ci)"; \
	  { npm ci --ignore-scripts --no-audit --no-fund --loglevel=error && touch $@; } || \
	  echo "npm ci failed: the site's calculator will not be built (pages keep their static figures)"; \
	else echo "npm is missing: the site's calculator will not be built (pages keep their static figures)"; fi

install: $(STAMP) $(NODE_STAMP) ## create .venv/ and install the project into it (and Pyodide, with npm ci)

build: $(STAMP) $(NODE_STAMP) ## build the site from the committed snapshot into public/ (offline)
	$(BIN)/neurarch-trace build --out public $(BUILD_FLAGS)

serve: ## serve public/ on http://127.0.0.1:8000
	$(BIN)/python -m http.server 8000 --bind 127.0.0.1 --directory public

test: $(TEST_STAMP) $(NODE_STAMP) browser ## run the test suite (installs torch 2.13.0 + transformers for the oracle; chromium via apt-get when it can)
	$(BIN)/python -m pytest -q

lint: $(TEST_STAMP) ## ruff (rules F, B, I, UP) and mypy over generator/ (settings in pyproject.toml)
	$(BIN)/ruff check generator
	$(BIN)/mypy

# tests/test_browser.py drives Debian's chromium headless over the DevTools protocol. When it is missing,
# `make browser` installs it with apt-get (as root, or with passwordless sudo); where that is not
# possible (no apt-get, no root, no network) it says so in one line and the test is skipped.
# NO_BROWSER=1 skips the install attempt.
browser: ## install chromium for the browser test when it is missing (apt-get, as root or sudo -n)
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ -n "$(NO_BROWSER)" ]; then echo "NO_BROWSER is set: tests/test_browser.py will be skipped"; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "chromium is missing and there is no apt-get: tests/test_browser.py will be skipped"; \
	elif [ "$$(id -u)" != 0 ] && ! sudo -n true >/dev/null 2>&1; then \
	  echo "chromium is missing and apt-get needs root (no passwordless sudo): tests/test_browser.py will be skipped"; \
	else echo "installing chromium for tests/test_browser.py (apt-get)"; \
	  { $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; } || \
	  echo "chromium could not be installed (apt-get failed): tests/test_browser.py will be skipped"; \
	fi

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
