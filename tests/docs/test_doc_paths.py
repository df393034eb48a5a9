"""The README and docs/ name only files, modules and tests that exist: a page that points at a
removed module or a moved file sends its reader nowhere (docs/testing.md kept the scores of
three removed modules, docs/performance.md the old folder of a benchmark script)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "bagel_data"
BENCH = REPO / "benchmarks" / "bagel_bench"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# Folders a path may start from: the repository's own, and the package's (`packing/pack.py`).
ROOT_FOLDERS = {"src", "tests", "benchmarks", "scripts", "examples", "configs", "docs"}
PACKAGE_FOLDERS = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
CODE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")
TEST_ID = re.compile(r"::(\w+)")
DOTTED = re.compile(r"\b(bagel_data|bagel_bench)((?:\.\w+)+)")
SOURCE_FILES = {
    path.name
    for folder in ("src", "tests", "benchmarks", "scripts", "examples")
    for path in (REPO / folder).rglob("*")
    if path.is_file()
}


def _bases(first: str) -> list[Path]:
    """Where a path whose first folder is `first` lives, or [] when it is not the project's
    (a user's `data/train.parquet`, the reference's `train/pretrain_unified_navit.py`)."""
    bases = []
    if first in ROOT_FOLDERS:
        bases.append(REPO)
    if first in PACKAGE_FOLDERS:
        bases.append(PACKAGE)
    if first == "bagel_bench":
        bases.append(REPO / "benchmarks")
    # a test folder (`families/test_vlm.py`), not a fixture folder such as tests/data, whose
    # name is also what users call their own data folders
    if first not in ROOT_FOLDERS and any((REPO / "tests" / first).glob("*.py")):
        bases.append(REPO / "tests")
    return bases


def _missing_paths(page: Path) -> list[str]:
    missing = []
    last_file: Path | None = None
    for token in CODE.findall(page.read_text(encoding="utf-8")):
        token = token.strip().removeprefix("./")
        path_part, _, test_part = token.partition("::")
        if path_part and PATH.fullmatch(path_part) and ("/" in path_part or path_part.endswith(".py")):
            if "/" in path_part:
                bases = _bases(path_part.split("/", 1)[0])
                found = [base / path_part for base in bases if (base / path_part).exists()]
                if bases and not found:
                    missing.append(path_part)
                last_file = found[0] if found else None
            elif path_part not in SOURCE_FILES:
                missing.append(path_part)  # a bare `name.py`: the file of that name is gone
        if test_part and last_file is not None and last_file.suffix == ".py" and not path_part.startswith("/"):
            source = last_file.read_text(encoding="utf-8")
            for name in TEST_ID.findall("::" + test_part):
                if not re.search(rf"def {name}\b", source):
                    missing.append(f"{last_file.relative_to(REPO)}::{name}")
    return missing


def _resolves(root: str, parts: list[str]) -> bool:
    """`root.parts...` is a module, or a module followed by one of its attributes."""
    base = (PACKAGE.parent if root == "bagel_data" else BENCH.parent) / root
    for depth in range(len(parts), -1, -1):
        folder = base.joinpath(*parts[:depth])
        if folder.with_suffix(".py").exists() or (folder / "__init__.py").exists():
            rest = parts[depth:]
            if not rest:
                return True
            module = importlib.import_module(".".join([root, *parts[:depth]]))
            return hasattr(module, rest[0])
    return False


def _missing_modules(page: Path) -> list[str]:
    missing = []
    for root, dotted in DOTTED.findall(page.read_text(encoding="utf-8")):
        parts = [part for part in dotted.split(".") if part]
        if parts and parts[-1] in {"py", "md"}:  # a file name, checked as a path
            continue
        if not _resolves(root, parts):
            missing.append(f"{root}.{'.'.join(parts)}")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_named_file_module_and_test_exists(page):
    missing = sorted(set(_missing_paths(page) + _missing_modules(page)))
    assert not missing, f"{page.relative_to(REPO)} names what does not exist: {missing}"


def test_the_check_finds_a_removed_module_and_a_moved_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Scores: `packing/stream_state.py` 95 %; delay from `bench/slow_reads.py`; "
        "`tests/test_config.py::test_no_such_test`; `bagel_data.packing.placement`; "
        "fine: `packing/pack.py`, `bagel_bench/slow_reads.py`, `bagel_data.loader.merged_stats`, "
        "a user's `data/train-00000-of-00001.parquet`.",
        encoding="utf-8",
    )
    assert sorted(_missing_paths(page) + _missing_modules(page)) == [
        "bagel_data.packing.placement",
        "bench/slow_reads.py",
        "packing/stream_state.py",
        "tests/test_config.py::test_no_such_test",
    ]
