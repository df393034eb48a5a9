"""Every ```bash and ```python block of README.md and docs/**/*.md runs as written.

The blocks run in one scratch folder holding the demo dataset (`bagel-data demo`, as the
README's first command makes it) and whatever the pages themselves create. Per page, the
bash blocks run one by one in `bash -e`, and the python blocks run in order as one script,
as a reader following the page would. A block that cannot run here (it installs, or needs
a GPU or a cluster) is preceded by `<!-- not-run: why -->`; the count of blocks run and
skipped per page is printed at the end of the session.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from helpers.doc_blocks import TALLY, run_checked

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not-run:(.*?)-->\s*$", re.S)
# A block headed by its file name (`<!-- train.py -->`) is one file of a worked example: the
# page's own test writes the files side by side and runs them (docs/extending.md:
# tests/families/test_extending_doc.py), so they are not run one by one here.
EXAMPLE_FILE = re.compile(r"<!--\s*([\w.-]+\.\w+)\s*-->\s*$")


def code_blocks(page: Path) -> list[tuple[str, str, str | None]]:
    """(language, code, reason not to run it or None) of every bash/python block."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        language = match.group(1)
        if language not in ("bash", "python"):
            continue
        before = text[: match.start()].rstrip().splitlines()[-1:] or [""]
        marker = NOT_RUN.search(before[0])
        reason = marker.group(1).strip() if marker else None
        example = EXAMPLE_FILE.search(before[0])
        if example and reason is None:
            reason = f"the file {example.group(1)} of a worked example, run together by the page's own test"
        assert reason != "", f"{page.name}: a not-run marker must say why"
        blocks.append((language, match.group(2), reason))
    return blocks


def test_pages_are_found():
    assert REPO / "README.md" in PAGES and len(PAGES) > 5
    assert any(language == "python" for language, _, _ in code_blocks(REPO / "README.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_every_block_of_the_page_runs(page, scratch):
    name = str(page.relative_to(REPO))
    tally = TALLY.setdefault(name, {"ran": 0, "skipped": []})
    python = []
    for index, (language, code, reason) in enumerate(code_blocks(page)):
        if reason is not None:
            tally["skipped"].append(f"block {index + 1}: {reason}")
        elif language == "bash":
            run_checked(["bash", "-e", "-o", "pipefail", "-c", code], scratch, f"{name}, bash block {index + 1}")
            tally["ran"] += 1
        else:
            python.append(f"# --- {name}, block {index + 1}\n{code}")
            tally["ran"] += 1
    if python:
        script = scratch / f"{page.stem}_blocks.py"
        script.write_text("\n".join(python), encoding="utf-8")
        run_checked([sys.executable, str(script)], scratch, f"{name}, python blocks")
