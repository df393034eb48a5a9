"""Collects, per page, how many code blocks the docs test ran and skipped, and prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.doc_blocks import TALLY, run_checked


@pytest.fixture(scope="session")
def scratch(tmp_path_factory) -> Path:
    """A folder with the demo dataset in demo_data/, where the pages' commands run."""
    folder = tmp_path_factory.mktemp("docs")
    run_checked(["bagel-data", "demo", "--root", "demo_data", "--batches", "1", "--num-workers", "0"], folder, "demo")
    return folder


def pytest_terminal_summary(terminalreporter):
    if not TALLY:
        return
    terminalreporter.section("code blocks of README.md and docs/")
    for page, counts in sorted(TALLY.items()):
        skipped = "; ".join(counts["skipped"]) or "none"
        terminalreporter.write_line(f"{page}: ran {counts['ran']}, skipped {len(counts['skipped'])} ({skipped})")
