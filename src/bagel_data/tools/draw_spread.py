"""How evenly a configuration draws a group's samples: `bagel-data validate`'s draw spread.

Every worker of every rank draws at the same rate (a DataLoader takes from its workers in
turn, ranks step together), so a sample's draw rate is one over the usable rows of the
worker that reads it. The walk by whole units (compat mode, tars on an object store, a
user's family) gives a worker the rows of its units, so a worker with fewer rows repeats them sooner; the default
mode's walk by rows (`families/row_share.py`) gives every worker the same number, and the spread over
whole rounds is 1.0.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..families.row_share import draw_rate_spread
from ..sharding import reference_shard_unit_ids, shard_unit_ids

# Most- over least-drawn sample's rate above which `validate` warns.
SPREAD_LIMIT = 1.25


def draw_spread(family, unit_rows: Mapping[int, int] | None, world_size: int, num_workers: int) -> float | None:
    """The most- over least-drawn sample's draw rate of `family` on this topology; None when
    its rows were not all counted (`validate --sample`). `unit_rows`: usable rows per unit id."""
    if family.units.walks_rows():
        return 1.0
    if unit_rows is None:
        return None
    split = reference_shard_unit_ids if family.policy.reference else shard_unit_ids
    units = len(family.epoch_units)
    rows = [
        sum(unit_rows.get(int(unit), 0) for unit in split(units, rank, world_size, worker, num_workers))
        for rank in range(world_size)
        for worker in range(max(num_workers, 1))
    ]
    return draw_rate_spread(rows)


def spread_warning(name: str, spread: float | None, compat: bool) -> list[str]:
    """A warning when the most-drawn sample is drawn more than SPREAD_LIMIT times as often as
    the least-drawn one."""
    if spread is None or spread <= SPREAD_LIMIT:
        return []
    why = (
        'compat="bagel" keeps the reference\'s rule: each worker loops over its own files'
        if compat
        else "this group is walked by whole units (its rows cannot be counted ahead)"
    )
    return [
        f"{name}: its most-drawn sample is drawn {spread:.2f}x as often as its least-drawn one ({why}, so a "
        "worker with fewer rows repeats them sooner). Fix: files of similar sizes, a unit count that divides "
        "evenly over ranks x workers, or the default mode, which draws every sample equally often"
    ]
