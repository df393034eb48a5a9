"""The conformance cases hold the reference's output. Its order is the walk by whole units
(each worker loops over its own files): compat="bagel" keeps it, and so does the default
mode where it walks units (tars, a user's family). The default mode's walk by rows (every
sample equally often, shuffled: docs/packing.md) reads other rows in another order by
design, so the default-mode runs of these cases pin the walk by units and compare everything
else (decodes, plans, packs, positions) with the reference; tests/test_row_walk.py and
tests/test_row_share.py hold the walk by rows to its own rules."""

from __future__ import annotations

import pytest

from bagel_data.families.unit_plan import UnitPlan


@pytest.fixture(autouse=True)
def walk_by_units(monkeypatch):
    monkeypatch.setattr(UnitPlan, "walk_by_rows", False)
