"""The order a worker reads its units in: phase after phase, from a cursor.

A *cursor* is `(phase, *position)`: the phase is the pass index (or, after an elastic
restart, INHERITED_PHASE / REMAINDER_PHASE first), the position is `(item index, *row
within the unit)` within that phase's work list. The stream (`families/base.py`) and its
read-ahead (`families/reads.py`) both walk this one order, so what is fetched ahead is what
the stream takes next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from ..sharding import INHERITED_PHASE, REMAINDER_PHASE, WorkerShard, phase_work


@dataclasses.dataclass(frozen=True)
class WorkItem:
    """One step of a phase: the unit at `index` of its work list, read from `row_start`.

    An inherited item (`single`) is one buffered row of an old topology: only the row at
    `row_start` is read, and its position within the phase is `[index]` alone."""

    index: int
    unit_id: int
    pass_index: int
    row_start: tuple
    single: bool = False
    draw: Any = None  # a draw of the walk by rows (`row_plan.RowItem`): its piece, opening or closing

    @property
    def row_key(self) -> tuple:
        """`(global unit id, pass, *row within the unit)` of the item's first row."""
        return (self.unit_id, self.pass_index, *self.row_start)


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of the walk; `whole` when it is walked from its beginning (not resumed
    midway), so an empty one means the worker has nothing to read at all."""

    number: int
    whole: bool
    items: Iterator[WorkItem]


def first_phase(restart_plan) -> int:
    return INHERITED_PHASE if restart_plan is not None else 0


def next_phase(restart_plan, phase: int) -> int:
    if phase == REMAINDER_PHASE:
        assert restart_plan is not None  # only a restart plan has a remainder phase
        return restart_plan.first_pass
    return phase + 1


def phase_items(shard: WorkerShard, restart_plan, phase: int, start) -> Iterator[WorkItem]:
    """The items of one phase from `start` (a position `[index, *row]`, or None for all)."""
    first = start[0] if start else 0
    if phase == INHERITED_PHASE:
        assert restart_plan is not None  # only a restart plan has an inherited phase
        refs = restart_plan.inherited_for(*shard.global_worker)
        for index in range(first, len(refs)):
            unit_id, pass_index, *row = refs[index]
            yield WorkItem(index, int(unit_id), int(pass_index), tuple(row), single=True)
        return
    work = phase_work(shard, restart_plan, phase)
    if hasattr(work, "row_item"):  # the walk by rows: each item one row of an open piece
        for index in range(first, len(work)):
            draw = work.row_item(index)
            yield WorkItem(index, draw.unit_id, draw.pass_index, draw.row, single=True, draw=draw)
        return
    for index in range(first, len(work)):
        unit_id, pass_index, row_start = work.item(index)
        if start and index == first and len(start) > 1:
            row_start = tuple(start[1:])
        yield WorkItem(index, int(unit_id), int(pass_index), tuple(row_start))


def walk(shard: WorkerShard, restart_plan, phase: int, start) -> Iterator[Phase]:
    """The phases from `phase` (its items from `start`) on, without end."""
    while True:
        yield Phase(phase, start is None, phase_items(shard, restart_plan, phase, start))
        start = None
        phase = next_phase(restart_plan, phase)


def piece_walk(phases: Iterator[Phase]) -> Iterator[Phase]:
    """`phases` as the read-ahead walks them: in the walk by rows, one item per piece (its
    first draw: the piece's row group is read once, whatever its draws are interleaved
    with); unit items as they are."""
    for phase in phases:
        yield Phase(phase.number, phase.whole, _first_draws(phase.items))


def _first_draws(items: Iterator[WorkItem]) -> Iterator[WorkItem]:
    seen: set = set()
    for item in items:
        if item.draw is None:
            yield item
        elif item.draw.piece not in seen:
            seen.add(item.draw.piece)
            yield item
