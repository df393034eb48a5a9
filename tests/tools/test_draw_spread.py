"""`bagel-data validate`'s draw spread (tools/draw_spread.py) from given row counts: the
sharding of the family's mode over every unit of the epoch, the walk by rows at 1.0, no
spread from a sampled count, and the warning's limit and reason."""

from __future__ import annotations

import types

import pytest

from bagel_data.tools.draw_spread import SPREAD_LIMIT, draw_spread, spread_warning


def _family(units: int, reference: bool = False, walks_rows: bool = False):
    return types.SimpleNamespace(
        units=types.SimpleNamespace(walks_rows=lambda: walks_rows),
        policy=types.SimpleNamespace(reference=reference),
        epoch_units=[f"u{i}" for i in range(units)],
    )


def test_each_mode_s_sharding_gives_its_spread():
    """5 units of 10 rows on 2 workers: the reference's split leaves unit 4 out (2 + 2
    units), the default mode's gives 3 + 2."""
    rows = dict.fromkeys(range(5), 10)
    assert draw_spread(_family(5, reference=True), rows, 1, 2) == 1.0
    assert draw_spread(_family(5), rows, 1, 2) == 1.5


def test_every_unit_of_the_epoch_is_sharded_even_one_without_rows():
    """Unit 4 has no usable row: it still takes its place in the split (3 + 2 units)."""
    assert draw_spread(_family(5), {0: 10, 1: 10, 2: 10, 3: 30}, 1, 2) == 1.0


def test_no_dataloader_workers_is_one_worker():
    assert draw_spread(_family(3), {0: 10, 1: 20, 2: 5}, 2, 0) == 30 / 5  # rank 0: units 0, 1; rank 1: unit 2


def test_the_walk_by_rows_is_even_and_a_sampled_count_gives_no_spread():
    assert draw_spread(_family(5, walks_rows=True), {0: 1, 3: 100}, 1, 2) == 1.0  # by units: 100.0
    assert draw_spread(_family(5), None, 1, 2) is None


@pytest.mark.parametrize("compat", [True, False])
def test_the_warning_starts_past_the_limit_and_names_its_reason(compat):
    assert spread_warning("g", SPREAD_LIMIT, compat) == [] and spread_warning("g", None, compat) == []
    (warning,) = spread_warning("g", SPREAD_LIMIT + 0.01, compat)
    assert warning.startswith("g: its most-drawn sample is drawn 1.26x")
    assert ('compat="bagel" keeps the reference\'s rule' in warning) is compat
    assert ("walked by whole units" in warning) is not compat
