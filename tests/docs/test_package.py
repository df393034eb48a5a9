"""What the installed package offers beyond its code: the PEP 561 marker in the wheel, an
`__all__` that names every lazy export (a star import or a type checker sees only those), and
a repository root holding only the project's own files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import bagel_data

REPO = Path(__file__).resolve().parents[2]
# The files the root may hold; anything else there (a pasted fragment, a scratch output) is a
# stray that belongs in docs/, benchmarks/ or nowhere.
ROOT_FILES = {".gitignore", "Makefile", "README.md", "pyproject.toml"}


def test_the_wheel_carries_py_typed():
    setuptools_config = pytest.importorskip("setuptools.config.pyprojecttoml")
    config = setuptools_config.read_configuration(REPO / "pyproject.toml")["tool"]["setuptools"]
    assert "py.typed" in config.get("package-data", {}).get("bagel_data", []), (
        "list py.typed under [tool.setuptools.package-data] bagel_data, or the wheel leaves it out"
    )
    assert (REPO / "src" / "bagel_data" / "py.typed").is_file()


def test_all_names_every_lazy_export_and_each_imports():
    lazy = set(bagel_data._EXPORTS)
    assert lazy == set(bagel_data.__all__), {
        "lazy but not in __all__": sorted(lazy - set(bagel_data.__all__)),
        "in __all__ but not lazy": sorted(set(bagel_data.__all__) - lazy),
    }
    for name in sorted(lazy):
        assert getattr(bagel_data, name) is not None, name
        assert name in dir(bagel_data)


def test_no_stray_file_at_the_repository_root():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    at_root = {path for path in listed.splitlines() if "/" not in path}
    assert at_root <= ROOT_FILES, f"stray file(s) at the repository root: {sorted(at_root - ROOT_FILES)}"


def test_committed_benchmark_results_are_the_current_ones():
    """One JSON per measurement, the current run: earlier runs' figures live in the docs'
    prose (docs/performance.md), not in `*_before` / `*_after` / dated files beside it."""
    stale = re.compile(r"_(before|after|final|old|new)\b|\d{4}-\d{2}-\d{2}")
    stems = [path.stem for path in (REPO / "benchmarks").glob("*.json")]
    assert stems, "benchmarks/ holds the committed results"
    assert not [stem for stem in stems if stale.search(stem)]
