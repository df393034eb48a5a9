# Entry points: `make demo` (the main job on the embedded default), `make test`, and
# `make lint` (ruff check, ruff format --check, mypy; `.ci/run` runs it before the tests).
# Each creates .venv and installs the project into it on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo lint test test-ray bench mutate clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	@echo "installing into $(VENV): pip, torch (CPU build), then the project; this takes a minute or two"
	$(BIN)/pip install --progress-bar on --upgrade pip
	# Pin the CPU build of torch before the project, so that no dependency pulls a
	# multi-GB CUDA build.
	$(BIN)/pip install --progress-bar on torch==2.13.0
	$(BIN)/pip install --progress-bar on -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/bagel-data demo

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The Ray engine of `prepare` (tests/tools/test_prepare_ray.py, skipped without the extra).
test-ray: $(STAMP)
	$(BIN)/pip install -q -e '.[ray]'
	$(BIN)/python -m pytest -q tests/tools/test_prepare_ray.py tests/tools/test_prepare_engine.py

bench: $(STAMP)
	$(BIN)/bagel-data bench

# Mutation testing of the core modules (slow; not in CI): see docs/testing.md.
mutate: $(STAMP)
	$(BIN)/python scripts/mutate.py $(MODULES)

clean:
	rm -rf $(VENV) demo_data bench_data
