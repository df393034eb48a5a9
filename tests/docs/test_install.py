"""The install the README promises: the core pulls no dev tool, the extras it names exist,
and `make demo` installs the core alone while `make test` adds `dev`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the suite runs there

ROOT = Path(__file__).resolve().parents[2]
DEV_TOOLS = {"pytest", "pytest-cov", "hypothesis", "ruff", "mypy", "moto", "matplotlib", "simplejpeg", "types-pyyaml"}


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_core_dependencies_hold_no_dev_tool_and_keep_torch_a_floor():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = names(project["dependencies"])
    assert not core & DEV_TOOLS, core & DEV_TOOLS
    assert {"torch", "torchdata", "av"} <= core
    torch = next(r for r in project["dependencies"] if r.startswith("torch") and not r.startswith("torchdata"))
    assert torch.startswith("torch>="), "a floor, never a pin: an installed CUDA torch must be kept"
    assert set(project["optional-dependencies"]) == {"dev", "ray", "plots", "bench", "compat"}
    assert {"pytest", "ruff", "mypy", "hypothesis"} <= names(project["optional-dependencies"]["dev"])


def test_readme_states_the_declared_minimum_versions_and_names_every_extra():
    readme = (ROOT / "README.md").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = dict(re.match(r"(torch|torchdata)>=([\d.]+)$", r).groups() for r in project["dependencies"]
                  if re.match(r"(torch|torchdata)>=", r))  # fmt: skip
    from bagel_data.packing.torch_support import MIN_TORCH, MIN_TORCHDATA

    assert floors == {"torch": MIN_TORCH, "torchdata": MIN_TORCHDATA}
    section = readme.split("## Installing into your training environment", 1)[1].split("\n## ", 1)[0]
    assert f"torch {MIN_TORCH} and torchdata {MIN_TORCHDATA}" in section
    for extra in project["optional-dependencies"]:
        assert f"| `{extra}` |" in section, extra


def test_make_demo_installs_the_core_and_make_test_the_dev_extra():
    makefile = (ROOT / "Makefile").read_text()
    core_recipe = makefile.split("$(STAMP): pyproject.toml", 1)[1].split("\n\n", 1)[0]
    assert "pip install --progress-bar on -e .\n" in core_recipe + "\n" and "[dev]" not in core_recipe
    assert re.search(r"^demo: \$\(STAMP\)$", makefile, re.M)
    assert re.search(r"^test: \$\(DEV_STAMP\)$", makefile, re.M) and re.search(
        r"^lint: \$\(DEV_STAMP\)$", makefile, re.M
    )
    assert "CPU-only build where the index serves one" in makefile
    # the conformance cases made with the reference's video reader run in CI
    assert "-e '.[dev,compat]'" in makefile.split("$(DEV_STAMP):", 1)[1].split("\n\n", 1)[0]
