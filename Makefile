# Two entry points: `make demo` (the main job on the embedded default) and `make test`.
# Both create .venv and install the project into it on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-ray bench mutate clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch ships on this machine's disk; install it first so that
	# no dependency pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/bagel-data demo

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
