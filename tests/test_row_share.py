"""The default mode's row arithmetic (`bagel_data.families.row_share`): equal draws over any block
sizes and worker counts, pieces below the file, and a bounded, resumable shuffle."""

from __future__ import annotations

import collections
import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bagel_data.families.row_share import EqualShare, Piece, RoundOrder, RowLayout, draw_rate_spread, pieces_of


def layout_of(sizes: list[int], depth: int = 1) -> RowLayout:
    return RowLayout.of([(unit, -1 if depth < 2 else 0, n) for unit, n in enumerate(sizes)], depth)


def draws(layout: RowLayout, workers: int, per_worker: int, buffer_size: int = 0) -> collections.Counter:
    """Rows drawn when every worker draws `per_worker` times (all at the same rate)."""
    share = EqualShare(layout.total, workers)
    drawn: collections.Counter = collections.Counter()
    for worker in range(workers):
        left, round_index = per_worker, 0
        while left:
            order = RoundOrder(
                pieces_of(layout, share.span(worker, round_index)), buffer_size, (7, worker, round_index)
            )
            for index in range(min(left, len(order))):
                piece, row = order.at(index)
                drawn[(int(layout.units[piece.block]), piece.start + row)] += 1
            left -= min(left, len(order))
            round_index += 1
    return drawn


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=8).filter(lambda s: sum(s) > 0),
    ranks=st.integers(1, 3),
    workers=st.integers(1, 4),
    passes=st.integers(1, 4),
    buffer_size=st.sampled_from([0, 1, 7, 64]),
)
def test_every_row_is_drawn_equally_often(sizes, ranks, workers, passes, buffer_size):
    """Whatever the file sizes and the rank/worker counts, after the whole rounds that cover
    `passes` passes each row was drawn as often as any other, one more or one fewer at the
    pass boundary where the run stops; no worker is left without rows (one file feeds many
    workers)."""
    layout = layout_of(sizes)
    share = EqualShare(layout.total, ranks * workers)
    rounds = -(-passes * layout.total // (share.workers * share.chunk))
    drawn = draws(layout, share.workers, rounds * share.chunk, buffer_size)
    rows = {(unit, row) for unit, n in enumerate(sizes) for row in range(n)}
    assert set(drawn) == rows
    run = rounds * share.workers * share.chunk  # the positions drawn: one run from 0
    assert set(drawn.values()) <= {run // layout.total, -(-run // layout.total)}
    assert min(drawn.values()) >= passes


def test_whole_rounds_draw_a_contiguous_run():
    """After whole rounds the positions drawn are one run from the start: with 90 rows and 4
    workers a round is 92 positions, so after 45 rounds (46 passes) every row is drawn 46 times."""
    layout = layout_of([40, 40, 10])
    share = EqualShare(layout.total, 4)
    assert share.chunk == 23
    drawn = draws(layout, 4, 45 * share.chunk)
    assert set(drawn.values()) == {46}


def test_a_round_ends_after_every_worker_s_chunk_past_the_offset():
    share = EqualShare(90, 4)
    assert [share.round_end(k) for k in range(3)] == [92, 184, 276]
    assert share.span(3, 0) == range(69, 92) and share.span(0, 1) == range(92, 115)
    assert EqualShare(90, 4, offset=5).round_end(0) == 97


def test_buffer_size_0_reads_the_pieces_in_storage_order():
    layout = layout_of([3, 2, 4, 1])
    pieces = pieces_of(layout, range(0, layout.total))
    order = RoundOrder(pieces, 0, (7,))
    assert order.pieces == pieces
    assert [(piece.block, piece.start + row) for piece, row in map(order.at, range(len(order)))] == [
        (block, row) for block, size in enumerate([3, 2, 4, 1]) for row in range(size)
    ]


def test_the_issue_files_draw_evenly_and_feed_more_workers_than_files():
    """40/40/10 rows, two workers: the reference's rule draws the short file 8x as often;
    here the spread is at most 2/1 at a pass boundary and 1.0 after whole passes. Three files
    feed 2 ranks x 2 workers and one file feeds 8 workers."""
    assert draw_rate_spread([80, 10]) == 8.0
    drawn = draws(layout_of([40, 40, 10]), 2, 45 * 10)
    assert set(drawn.values()) == {10}
    for sizes, workers in (([40, 40, 10], 4), ([5], 8)):
        layout = layout_of(sizes)
        share = EqualShare(layout.total, workers)
        assert all(len(pieces_of(layout, share.span(worker, 0))) > 0 for worker in range(workers))


def test_pieces_cut_at_blocks_and_passes():
    layout = layout_of([3, 2])
    pieces = pieces_of(layout, range(2, 9))
    assert [(p.block, p.pass_index, p.start, p.count) for p in pieces] == [
        (0, 0, 2, 1),
        (1, 0, 0, 2),
        (0, 1, 0, 3),
        (1, 1, 0, 1),
    ]


def test_two_level_rows_name_their_row_group():
    layout = RowLayout.of([(4, 0, 2), (4, 1, 0), (4, 2, 3)], depth=2)
    assert layout.total == 5 and len(layout.counts) == 2  # the empty row group is left out
    assert layout.row_of(1, 2) == (2, 2)
    assert RowLayout.of([(0, -1, 1)], depth=0).row_of(0, 0) == ()


def same_block_share(order: RoundOrder) -> float:
    blocks = [order.at(i)[0].block for i in range(len(order))]
    return sum(a == b for a, b in itertools.pairwise(blocks)) / (len(blocks) - 1)


def test_shuffle_mixes_row_groups_and_reads_each_piece_front_to_back():
    """12 files x 2 row groups x 25 rows on one worker: in storage order 96 % of consecutive
    draws share a row group; with a 256-sample window under 25 %. Each piece's rows come in
    order (one read of its row group), and the order is a permutation of the round."""
    layout = RowLayout.of([(f, g, 25) for f in range(12) for g in range(2)], depth=2)
    pieces = pieces_of(layout, EqualShare(layout.total, 1).span(0, 0))
    assert same_block_share(RoundOrder(pieces, 0, (1,))) > 0.95
    order = RoundOrder(pieces, 256, (1,))
    assert same_block_share(order) < 0.25
    seen = collections.defaultdict(list)
    for index in range(len(order)):
        piece, row = order.at(index)
        seen[piece.block].append(piece.start + row)
    assert all(rows == list(range(25)) for rows in seen.values()) and len(seen) == 24
    positions = [order.at(i)[0].block * 25 + order.at(i)[1] for i in range(len(order))]
    assert abs(np.corrcoef(np.arange(len(positions)), positions)[0, 1]) < 0.5


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=10),
    buffer_size=st.integers(0, 50),
    stop=st.integers(0, 400),
)
def test_an_order_is_rebuilt_from_its_seed_and_what_is_left_is_exact(sizes, buffer_size, stop):
    """The order is a function of seeds and counts (a resumed worker recomputes it), and
    `drawn_before` names exactly the rows not yet drawn (an elastic restart's leftover)."""
    layout = layout_of(sizes)
    pieces = pieces_of(layout, range(0, layout.total + 5))
    order, again = RoundOrder(pieces, buffer_size, (3, 1)), RoundOrder(pieces, buffer_size, (3, 1))
    stop = min(stop, len(order))
    assert [order.at(i) for i in range(len(order))] == [again.at(i) for i in range(len(order))]
    rest = collections.Counter(
        (p.block, p.pass_index, p.start + r) for p, r in (order.at(i) for i in range(stop, len(order)))
    )
    left = collections.Counter(
        (p.block, p.pass_index, p.start + k) for p, done in again.drawn_before(stop) for k in range(done, p.count)
    )
    assert rest == left
    assert all(done < piece.count for piece, done in again.drawn_before(stop))  # none drawn whole


def test_windows_are_bounded():
    """A window holds at least buffer_size rows and less than that plus one piece."""
    layout = layout_of([7] * 30)
    order = RoundOrder(pieces_of(layout, range(0, layout.total)), 20, (0,))
    sizes = np.diff(order.window_starts)
    assert (sizes[:-1] >= 20).all() and (sizes < 20 + 7).all()


def test_a_window_holds_several_pieces_when_one_fills_it():
    """Pieces of 1,000 rows and a window of 1,024: under the older rule a window held two,
    and every other draw followed one from its own row group; now each window holds exactly
    `open_pieces` (the rows are long reached), and the last one what is left."""
    pieces = [Piece(block, 0, 0, 1000) for block in range(20)]

    def windows(open_pieces: int) -> list[int]:
        order = RoundOrder(pieces, 1024, (5,), open_pieces)
        return [int(b - a) for a, b in itertools.pairwise(order.edges)]

    assert windows(1) == [2] * 10
    assert windows(8) == [8, 8, 4]

    def same_block(open_pieces: int) -> float:
        order = RoundOrder(pieces, 1024, (5,), open_pieces)
        blocks = [order.at(index)[0].block for index in range(len(order))]
        return sum(a == b for a, b in itertools.pairwise(blocks)) / (len(blocks) - 1)

    assert same_block(1) > 0.45
    assert same_block(8) < 0.2


def test_a_window_of_small_pieces_is_still_cut_by_rows():
    """Pieces of 100 rows: 11 reach the 1,024 rows (more than 8), as before."""
    order = RoundOrder([Piece(block, 0, 0, 100) for block in range(22)], 1024, (5,), 8)
    assert [int(b - a) for a, b in itertools.pairwise(order.edges)] == [11, 11]


def test_shuffle_off_reads_storage_order_whatever_the_piece_count():
    pieces = [Piece(block, 0, 0, 3) for block in range(4)]
    order = RoundOrder(pieces, 0, (5,), 8)
    assert [(order.at(i)[0].block, order.at(i)[1]) for i in range(len(order))] == [
        (block, row) for block in range(4) for row in range(3)
    ]
