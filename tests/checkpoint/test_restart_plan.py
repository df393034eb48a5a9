"""The restart plan's arithmetic (checkpoint/restart.py), checked against a plain list.

A plan describes the units left over by the old workers as segments of consecutive unit ids
(`first, first + step, ...`, step +1 or -1 as workers list their units). The end-to-end tests
(test_elastic.py) check that every row is read once; these pin the two views of a remainder
share against each other and against the list of units they stand for.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bagel_data.checkpoint.restart import GroupRestart, RemainderWork, Segment, worker_leftover
from bagel_data.sharding import INHERITED_PHASE, WorkerTopology

segment_specs = st.lists(
    st.tuples(st.integers(0, 50), st.integers(1, 6), st.sampled_from([1, -1]), st.integers(0, 3)),
    min_size=1,
    max_size=5,
)


def _units(segments) -> list[tuple[int, int]]:
    """(unit id, pass) of every item, written out."""
    return [(s.first + k * s.step, s.pass_index) for s in segments for k in range(s.count)]


@given(segment_specs, st.data())
def test_a_share_and_what_is_left_of_it_list_the_same_units(specs, data):
    segments = tuple(Segment(first, count, step, pass_index) for first, count, step, pass_index in specs)
    everything = _units(segments)
    lo = data.draw(st.integers(0, len(everything)))
    hi = data.draw(st.integers(lo, len(everything)))
    share = RemainderWork(segments, lo, hi)
    assert len(share) == hi - lo
    assert [share.item(i)[:2] for i in range(len(share))] == everything[lo:hi]
    start = data.draw(st.integers(0, len(share)))
    assert _units(share.segments_from(start)) == everything[lo + start : hi]


def test_the_first_item_left_starts_from_its_row_and_the_rest_from_their_start():
    segments = (Segment(10, 3, -1, 2, start=(1, 4)), Segment(20, 2, 1, 3))
    share = RemainderWork(segments, 0, 5)
    assert share.item(0) == (10, 2, (1, 4)) and share.item(1) == (9, 2, ())
    left = share.segments_from(1, row_start=(0, 2))
    assert left[0] == Segment(9, 2, -1, 2, (0, 2)) and left[1] == Segment(20, 2, 1, 3, ())


topologies = st.tuples(st.integers(1, 3), st.integers(0, 3)).flatmap(
    lambda wk: st.tuples(
        st.just(wk[0]),
        st.just(wk[1]),
        st.integers(0, wk[0] - 1),
        st.integers(0, max(wk[1], 1) - 1),
        st.integers(wk[0] * max(wk[1], 1), 40),
    )
)


@given(topologies, st.data())
def test_an_old_worker_leaves_the_rest_of_its_pass_and_the_next_pass_follows(topology, data):
    """Without an earlier plan: a worker that drew nothing leaves all its units in pass 0;
    one at (pass p, unit index i[, row]) leaves the units after i (or unit i from the row
    after), still in pass p. Full passes resume at p + 1: none is skipped or repeated."""
    world, workers, rank, worker, num_units = topology
    shard = WorkerTopology(rank, world, worker, workers).shard(num_units)
    ids = [int(u) for u in shard.unit_ids]
    segments, inherited, next_pass = worker_leftover(shard, None, None)
    assert (_units(segments), inherited, next_pass) == ([(u, 0) for u in ids], [], 1)
    phase = data.draw(st.integers(0, 5))
    index = data.draw(st.integers(0, len(ids) - 1))
    segments, _, next_pass = worker_leftover(shard, None, (phase, index))
    assert (_units(segments), next_pass) == ([(u, phase) for u in ids[index + 1 :]], phase + 1)
    segments, _, next_pass = worker_leftover(shard, None, (phase, index, 1, 3))
    assert (_units(segments), next_pass) == ([(u, phase) for u in ids[index:]], phase + 1)
    assert segments[0].start == (1, 4) and all(s.start == () for s in segments[1:])


def test_a_worker_stopped_among_its_inherited_rows_leaves_the_rest_of_them():
    """Under a plan, a new worker first packs the rows it inherited, then its remainder
    share; stopped at inherited row i it leaves rows i+1.. and its whole share."""
    plan = GroupRestart(
        first_pass=3,
        segments=(Segment(0, 4, 1, 2),),
        inherited=((0, 1, 5), (1, 0, 2), (2, 1, 0), (3, 0, 1), (0, 0, 4)),
    )
    shard = WorkerTopology(0, 1, 0, 0).shard(4)  # the only new worker: it inherits every row
    segments, inherited, next_pass = worker_leftover(shard, plan, (INHERITED_PHASE, 1))
    assert inherited == [(2, 1, 0), (3, 0, 1), (0, 0, 4)]
    assert _units(segments) == [(u, 2) for u in range(4)] and next_pass == 3
