# neurarch-trace: the one entry point. `make help` lists the targets.
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: help install build serve test golden crawl bench fuzz clean

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

test: $(TEST_STAMP) ## run the test suite (installs torch CPU + transformers for the oracle)
	$(BIN)/python -m pytest -q

golden: $(TEST_STAMP) ## regenerate the golden pages on purpose (review the diff!)
	UPDATE_GOLDEN=1 $(BIN)/python -m pytest -q tests/test_site_golden.py

crawl: $(STAMP) ## refresh snapshot/ from the Hugging Face Hub (network)
	$(BIN)/neurarch-trace crawl

bench: $(TEST_STAMP) ## benchmarks (not tests): estimator speed against transformers on meta
	$(BIN)/python benchmarks/bench_estimator.py

fuzz: $(TEST_STAMP) ## long fuzz run: 10,000 mutated snapshot configs (FUZZ_EXAMPLES=N to change)
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-10000} $(BIN)/python -m pytest -q tests/test_fuzz.py --hypothesis-show-statistics

clean: ## remove build output
	rm -rf public .pytest_cache
