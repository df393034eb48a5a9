"""Collects, per page, how many code blocks the docs test ran and skipped, and prints it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers.doc_blocks import TALLY


@pytest.fixture(scope="session")
def scratch(tmp_path_factory, demo_root) -> Path:
    """A folder with the demo dataset in demo_data/, where the pages' commands run: a copy of
    the session's (what `bagel-data demo` writes; the command itself is tested in
    tests/cli/test_cli.py), which saves writing it again."""
    folder = tmp_path_factory.mktemp("docs")
    shutil.copytree(demo_root, folder / "demo_data")
    return folder


def pytest_terminal_summary(terminalreporter):
    if not TALLY:
        return
    terminalreporter.section("code blocks of README.md and docs/")
    for page, counts in sorted(TALLY.items()):
        skipped = "; ".join(counts["skipped"]) or "none"
        terminalreporter.write_line(f"{page}: ran {counts['ran']}, skipped {len(counts['skipped'])} ({skipped})")
