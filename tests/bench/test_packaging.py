"""The library's wheel holds no benchmark code: the packages setuptools puts in it (found as
pyproject.toml tells it to) are `bagel_data` and its subpackages, none of them the benchmark,
and the benchmark is a distribution of its own (benchmarks/pyproject.toml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import setuptools

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the suite runs there

ROOT = Path(__file__).resolve().parents[2]


def wheel_packages(root: Path) -> list[str]:
    """The packages `pip wheel` would put in the library's wheel: what its find rule finds."""
    setup = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(setup) <= {"packages", "package-data"}, (
        "a second way into the wheel (package-dir, data files): check it here"
    )
    # package data: the typing marker alone, inside bagel_data (tests/docs/test_package.py)
    assert setup.get("package-data", {}) in ({}, {"bagel_data": ["py.typed"]})
    find = dict(setup["packages"]["find"])
    where = find.pop("where", ["."])
    return sorted(package for folder in where for package in setuptools.find_packages(str(root / folder), **find))


def test_the_wheel_holds_bagel_data_alone():
    packages = wheel_packages(ROOT)
    assert "bagel_data" in packages and "bagel_data.families" in packages
    outside = [p for p in packages if p != "bagel_data" and not p.startswith("bagel_data.")]
    assert not outside, f"not the library, yet in its wheel: {outside}"
    assert not [p for p in packages if "bench" in p], packages


def test_the_library_reaches_the_benchmark_only_where_the_cli_mounts_it():
    library = ROOT / "src" / "bagel_data"
    importing = sorted(
        str(path.relative_to(library))
        for path in library.rglob("*.py")
        if re.search(r"^\s*(from|import) bagel_bench\b", path.read_text(), flags=re.MULTILINE)
    )
    assert importing == ["cli/main.py"], importing


def test_the_benchmark_is_a_distribution_of_its_own_needing_the_bench_extra():
    bench = tomllib.loads((ROOT / "benchmarks" / "pyproject.toml").read_text())
    assert bench["project"]["name"] != "bagel-data"
    assert bench["tool"]["setuptools"]["packages"] == ["bagel_bench"]
    assert bench["project"]["dependencies"] == ["bagel-data[bench]"]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("moto") for requirement in extras["bench"])
    assert "bench" in extras["dev"][0]  # the suite runs the benchmark's tests


def test_a_find_rule_reaching_the_benchmark_is_caught(tmp_path):
    """The check above sees the benchmark when a find rule reaches it (it is not vacuous)."""
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.packages.find]\nwhere = ["src", "benchmarks"]\n')
    for package in ("src/bagel_data", "benchmarks/bagel_bench"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text("")
    assert wheel_packages(tmp_path) == ["bagel_bench", "bagel_data"]
