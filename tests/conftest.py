"""Shared fixtures: the conformance cases in tests/conformance, one tokenizer and one demo
dataset per session."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from bagel_data.tokenizer import QwenTokenizer

GOLDEN = Path(__file__).resolve().parent / "conformance"
TEST_COLUMNS = 80  # the width rich falls back to where there is no terminal (CI, a pipe)


@pytest.fixture(scope="session", autouse=True)
def _jsonl_index_cache(tmp_path_factory):
    """The JSONL indexes the tests build go to this session's folder, not the machine's cache
    (subprocesses the tests start inherit it)."""
    from bagel_data.sources.jsonl_cache import ENV

    before = os.environ.get(ENV)
    os.environ[ENV] = str(tmp_path_factory.mktemp("jsonl-index-cache"))
    yield
    if before is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = before


@pytest.fixture(scope="module", autouse=True)
def _walk_by_units(request):
    """A module marked `walk_by_units` (`pytestmark = pytest.mark.walk_by_units`) tests the
    walk by whole units (tars', a user family's, compat's): its positions, orders and unit
    counts are that walk's. The default mode's walk by rows is tests/test_row_walk.py's. Set
    for the whole module, before its module-scoped fixtures build datasets."""
    if request.node.get_closest_marker("walk_by_units") is None:
        yield
        return
    from bagel_data.families.unit_plan import UnitPlan

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(UnitPlan, "walk_by_rows", False)
        yield


@pytest.fixture(autouse=True)
def _fixed_terminal_width(monkeypatch):
    """Rendered output (rich tables, messages, help) as in CI, whatever terminal runs the
    tests: rich sizes its output by the terminal of the test process unless COLUMNS says."""
    monkeypatch.setenv("COLUMNS", str(TEST_COLUMNS))


@pytest.fixture(scope="session")
def golden_root() -> Path:
    assert (GOLDEN / "cases").is_dir(), f"the conformance cases are part of the repository: {GOLDEN}"
    return GOLDEN


@pytest.fixture(scope="session")
def tokenizer() -> QwenTokenizer:
    return QwenTokenizer()


SPECIAL_TOKENS = {"bos_token_id": 151644, "eos_token_id": 151645, "start_of_image": 151652, "end_of_image": 151653}


@pytest.fixture(scope="session")
def special_tokens() -> dict:
    return dict(SPECIAL_TOKENS)


DEMO_CONFIGS = ("run.yaml", "grouped_datasets.yaml", "dataset_info.yaml")


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory) -> Path:
    """The demo dataset and its run.yaml as `bagel-data demo` writes them (without its packed
    batches), written once per session: writing it costs seconds, and the tests only read it.
    `demo_configs` gives a test config files of its own to change."""
    from bagel_data.cli.main import DEMO_PACKING
    from bagel_data.synthetic.dataset import write_demo_dataset

    root = write_demo_dataset(tmp_path_factory.mktemp("demo-shared") / "demo").root
    run = {"grouped_datasets": "grouped_datasets.yaml", "dataset_info": "dataset_info.yaml", "packing": DEMO_PACKING}
    (root / "run.yaml").write_text(yaml.safe_dump(run))
    return root


@pytest.fixture
def demo_configs(demo_root, tmp_path) -> Path:
    """tmp_path/demo holding a copy of the demo's config files, free to change; the data stays
    in `demo_root` (dataset_info.yaml names it by absolute path)."""
    folder = tmp_path / "demo"
    folder.mkdir()
    for name in DEMO_CONFIGS:
        shutil.copy2(demo_root / name, folder / name)
    return folder
