"""The README's module table names every module of the package (issue: a table that drifts
from the tree misleads the first reader). A family module is named by its registry line
instead: `DATASET_REGISTRY` lists the families, so a family added inside the library is its
file and that line, and needs no row of its own."""

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


def _registered_family_modules() -> set[str]:
    """The modules (`families/x.py`) that define a family `DATASET_REGISTRY` names."""
    from bagel_data.families.registry import DATASET_REGISTRY

    modules = {getattr(family, "__module__", "") for family in DATASET_REGISTRY.values()}
    prefix = "bagel_data.families."
    return {f"families/{name[len(prefix) :]}.py" for name in modules if name.startswith(prefix)}


def _unnamed(modules: list[str], lines: list[str]) -> list[str]:
    registered = _registered_family_modules()
    return [module for module in modules if module not in registered and not _named(module, lines)]


def test_every_module_is_in_the_readme_table():
    lines = _table_lines()
    modules = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert len(modules) > 40
    missing = _unnamed(modules, lines)
    assert not missing, f"add these modules to README's 'How data flows' table: {missing}"


def test_a_family_module_the_registry_names_needs_no_row(monkeypatch):
    """A new family inside the library (`families/notes.py` and its registry line) passes
    without a README row; the same module unregistered, or outside `families/`, does not."""
    from bagel_data.families.registry import DATASET_REGISTRY

    lines = _table_lines()
    new = ["families/notes.py", "families/notes_helpers.py"]
    assert _unnamed(new, lines) == new
    family = type("NotesFamily", (), {"__module__": "bagel_data.families.notes"})
    monkeypatch.setitem(DATASET_REGISTRY, "notes", family)
    assert _unnamed(new, lines) == ["families/notes_helpers.py"]  # a helper module still needs its row
    assert _unnamed(["media/notes.py"], lines) == ["media/notes.py"]


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
