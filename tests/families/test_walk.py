"""The one walk over a worker's units (families/walk.py): phases in order from a cursor,
the cursor's row only on its own item, and the inherited rows of an elastic restart first."""

from __future__ import annotations

import itertools

import numpy as np

from bagel_data.checkpoint.restart import GroupRestart, Segment
from bagel_data.families.walk import WorkItem, first_phase, walk
from bagel_data.sharding import INHERITED_PHASE, REMAINDER_PHASE, WorkerShard


def _shard(units=(4, 7, 9)) -> WorkerShard:
    return WorkerShard(rank=0, world_size=1, worker_id=0, num_workers=1, unit_ids=np.array(units, dtype=np.int64))


def _steps(phases, count: int) -> list[tuple[int, bool, list[WorkItem]]]:
    return [(phase.number, phase.whole, list(phase.items)) for phase in itertools.islice(phases, count)]


def test_a_cursor_starts_its_own_item_at_its_row_and_the_rest_from_their_beginning():
    steps = _steps(walk(_shard(), None, 2, [1, 3, 5]), 2)
    assert steps[0] == (2, False, [WorkItem(1, 7, 2, (3, 5)), WorkItem(2, 9, 2, ())])
    assert steps[1] == (3, True, [WorkItem(0, 4, 3, ()), WorkItem(1, 7, 3, ()), WorkItem(2, 9, 3, ())])


def test_a_cursor_on_an_item_alone_reads_that_item_whole():
    ((_, _, items),) = _steps(walk(_shard(), None, 0, [2]), 1)
    assert items == [WorkItem(2, 9, 0, ())]


def test_a_restart_walks_inherited_rows_then_the_remainder_then_its_first_pass():
    plan = GroupRestart(
        first_pass=5, segments=(Segment(first=7, count=1, step=1, pass_index=4, start=(2, 1)),),
        inherited=((9, 3, 0, 6), (4, 3, 1, 0)),
    )  # fmt: skip
    assert first_phase(plan) == INHERITED_PHASE and first_phase(None) == 0
    steps = _steps(walk(_shard(), plan, first_phase(plan), None), 3)
    assert [(number, whole) for number, whole, _ in steps] == [
        (INHERITED_PHASE, True),
        (REMAINDER_PHASE, True),
        (5, True),
    ]
    assert steps[0][2] == [WorkItem(0, 9, 3, (0, 6), single=True), WorkItem(1, 4, 3, (1, 0), single=True)]
    assert steps[0][2][0].row_key == (9, 3, 0, 6)
    assert steps[1][2] == [WorkItem(0, 7, 4, (2, 1))]
    assert [item.unit_id for item in steps[2][2]] == [4, 7, 9] and {item.pass_index for item in steps[2][2]} == {5}


def test_resuming_inside_the_inherited_rows_skips_those_already_taken():
    plan = GroupRestart(first_pass=1, segments=(), inherited=((9, 0, 0, 1), (4, 0, 0, 2), (7, 0, 1, 0)))
    ((number, whole, items),) = _steps(walk(_shard(), plan, INHERITED_PHASE, [2]), 1)
    assert (number, whole) == (INHERITED_PHASE, False)
    assert items == [WorkItem(2, 7, 0, (1, 0), single=True)]


def test_the_read_ahead_walks_each_piece_once_and_unit_items_as_they_are():
    """In the walk by rows a piece's draws are interleaved with others'; the read-ahead
    reads its row group once, at its first draw."""
    import types

    from bagel_data.families.walk import Phase, piece_walk

    def draw(piece, index):
        return WorkItem(index, 4, 0, (index,), single=True, draw=types.SimpleNamespace(piece=piece))

    items = [draw("a", 0), draw("b", 1), draw("a", 2), draw("c", 3), draw("b", 4)]
    ((phase),) = list(piece_walk([Phase(0, True, iter(items))]))
    assert [item.index for item in phase.items] == [0, 1, 3]
    units = [WorkItem(0, 4, 0, ()), WorkItem(1, 4, 0, ())]  # the same unit twice, no draws: both
    assert [item.index for item in next(piece_walk([Phase(0, True, iter(units))])).items] == [0, 1]
