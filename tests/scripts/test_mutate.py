"""`scripts/mutate.py`'s hand-written mutants: each applies to its module as written, and the
harness's own mutant plumbing (the line it names, the source it makes) is right."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


@pytest.fixture(scope="module")
def mutate():
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("mutate_under_test", SCRIPTS / "mutate.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("mutate_under_test", None)
        sys.path.remove(str(SCRIPTS))


def written():
    sys.path.insert(0, str(SCRIPTS))
    try:
        from written_mutants import WRITTEN
    finally:
        sys.path.remove(str(SCRIPTS))
    return [(module, index) for module, entries in WRITTEN.items() for index in range(len(entries))]


@pytest.mark.parametrize(("module", "index"), written())
def test_each_written_mutant_applies_once_and_changes_its_line(mutate, module, index):
    """The entry's text is in its module exactly once (else the code moved on and the entry
    must be written again), and the mutated module still parses."""
    import ast

    mutant = mutate.written_mutants_of(module)[index]
    source = (mutate.PACKAGE / module).read_text()
    changed = mutate.mutant_source(mutant)
    assert changed != source
    ast.parse(changed)
    first_changed = next(i for i, (a, b) in enumerate(zip(source.splitlines(), changed.splitlines())) if a != b)
    assert mutant.line <= first_changed + 1 <= mutant.end_line and mutant.kind == "written"


def test_a_written_mutant_whose_code_is_gone_is_named(mutate, monkeypatch):
    import written_mutants

    monkeypatch.setitem(written_mutants.WRITTEN, "sharding.py", [("no such code", "x", "stale entry")])
    with pytest.raises(SystemExit, match=r"sharding.py: written mutant 0 \(stale entry\) matches 0 places"):
        mutate.written_mutants_of("sharding.py")
