# Two entry points: `make demo` (the main job on the embedded default) and `make test`.
# Both create .venv and install the project into it on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

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

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/bagel-data bench

clean:
	rm -rf $(VENV) demo_data bench_data
