"""The README's module table names every module of the package (issue: a table that drifts
from the tree misleads the first reader)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "bagel_data"


def _table_lines() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## How data flows", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("|")]


def _named(module: str, lines: list[str]) -> bool:
    """`a/b.py` is named as `a/b.py`, or on a row listing the package `a/` with `b`."""
    folder, _, stem = module.rpartition("/")
    for line in lines:
        if f"`{module}`" in line:
            return True
        if folder and f"`{folder}/`" in line and re.search(rf"`{re.escape(stem[:-3])}`", line):
            return True
    return False


def test_every_module_is_in_the_readme_table():
    lines = _table_lines()
    modules = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert len(modules) > 40
    missing = [module for module in modules if not _named(module, lines)]
    assert not missing, f"add these modules to README's 'How data flows' table: {missing}"


def test_the_layout_keeps_its_size_rules():
    """Issue 38's bounds: at most 13 modules at the package's top level (the rest live in the
    stage packages the README's table names) and no module over 320 lines."""
    top_level = sorted(path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert len(top_level) <= 13, f"{len(top_level)} top-level modules: {top_level}"
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > 320
    }
    assert not long, f"modules over 320 lines: {long}"
