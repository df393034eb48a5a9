# Entry points: `make demo` (the main job on the embedded default), `make test`, and
# `make lint` (ruff check, ruff format --check, mypy; `.ci/run` runs it before the tests).
# Each creates .venv on first use: `demo` installs the project alone (its runtime
# dependencies, no dev tools); `test`, `lint`, `bench` and `mutate` add the `dev` extra and
# the benchmark (./benchmarks: the `bagel-data-bench` distribution, kept out of the wheel).
# To install into an environment you already train in (your own torch), see the README,
# "Installing into your training environment": none of this is needed there.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
# torch is pinned to the version the tests run on. Which build that is depends on the index
# pip uses for this platform: the CPU-only build where the index serves one (PyPI does for
# macOS and Windows; the PyTorch CPU index, TORCH_INDEX=https://download.pytorch.org/whl/cpu,
# does everywhere), otherwise the index's default build, which on PyPI for Linux x86-64 is a
# CUDA build with its multi-GB CUDA libraries. Empty: pip's configured index.
TORCH_INDEX ?=

.PHONY: install install-dev demo lint test test-ray bench mutate clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	@echo "installing into $(VENV): pip, torch, then the project; this takes a minute or two"
	$(BIN)/pip install --progress-bar on --upgrade pip
	# torch first, pinned (see TORCH_INDEX above), so that resolving the project's own
	# `torch>=2.2` finds it installed and installs no other torch.
	$(BIN)/pip install --progress-bar on torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install --progress-bar on -e .
	touch $(STAMP)

# The dev tools: pytest, hypothesis, ruff, mypy, the object-store fakes, ... (pyproject.toml),
# the benchmark package, whose tests are part of the suite, and the `compat` extra (decord),
# so that the conformance cases made with the reference's video reader run.
$(DEV_STAMP): $(STAMP) pyproject.toml benchmarks/pyproject.toml
	$(BIN)/pip install --progress-bar on -e '.[dev,compat]' -e ./benchmarks
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

demo: $(STAMP)
	$(BIN)/bagel-data demo

lint: $(DEV_STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks
	$(BIN)/mypy

# The suite runs on every core (pytest-xdist): each test builds its data in its own tmp_path.
test: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -n auto

# The Ray engine of `prepare` (tests/tools/test_prepare_ray.py, skipped without the extra).
test-ray: $(DEV_STAMP)
	$(BIN)/pip install -q -e '.[ray]'
	$(BIN)/python -m pytest -q tests/tools/test_prepare_ray.py tests/tools/test_prepare_engine.py

bench: $(DEV_STAMP)
	$(BIN)/bagel-data bench

# Mutation testing of every library module but cli/ and synthetic/ (slow; not in CI):
# see docs/testing.md. MODULES="packing/pack.py ..." narrows it.
mutate: $(DEV_STAMP)
	$(BIN)/python scripts/mutate.py $(MODULES)

clean:
	rm -rf $(VENV) demo_data bench_data
