"""The default mode's walk by rows: which rows a worker reads in each round, in which order.

`row_share.py` holds the arithmetic (unit and remainder rules, windowed shuffle); this
module ties it to a family: the group's `RowLayout` from the family's own row counts
(`row_depth` / `row_extent`), a worker's `RowPlan` (its rounds as work lists of single rows,
the cursor `(round, draw index)`), and an elastic restart's leftover as pieces.

The counts are asked for all units at once (`kind.count_rows`): a remote file's footer is
read once per node (`families/row_counts.py`), a tar's blocks come from its node-cached
index. A family whose rows cannot be counted ahead (a user's family without `row_extent`),
tars on an object store without a counts file (their blocks are known after a pass over
the tar; with one, `sources/tar_counts.py`, they are cut by count) and compat mode keep the
walk by whole units (`sharding.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ..schema.settings import SHUFFLE_BUFFER_SIZE
from ..sharding import split_evenly, stable_hash
from .row_share import EqualShare, Piece, RoundOrder, RowLayout, pieces_of
from .unit_kinds import Listed

# `plan`: the family's UnitPlan (families/unit_plan.py), which calls these; named by type
# there only, so that the two modules do not import each other.
UnitPlan = Any

# Samples a worker's shuffle window holds (row_share.RoundOrder) where the settings do not say.
DEFAULT_SHUFFLE_BUFFER = SHUFFLE_BUFFER_SIZE
# The fewest pieces a shuffle window holds: one per ROWS_PER_PIECE rows of the window, at
# most OPEN_PIECES. Where a block holds more rows than the window (web-scale row groups of
# 1,000 rows) the default window of 1,024 then mixes 8 of them, and about 1/8 of consecutive
# draws come from one block; a smaller window opens fewer (an open row group is held whole
# by Arrow). A run keeps the value it started with (`checkpoint/orders.py`); 1 was the rule
# before it, which older checkpoints resume under.
OPEN_PIECES, ROWS_PER_PIECE = 8, 128


def open_pieces_for(buffer_size: int) -> int:
    """The fewest pieces a window of `buffer_size` rows holds."""
    return max(1, min(OPEN_PIECES, int(buffer_size) // ROWS_PER_PIECE))


def row_layout(plan: UnitPlan) -> RowLayout | None:
    """The group's blocks in epoch order from its unit kind's row counts (`extent`); None
    where the kind cannot count them (the walk by units is kept). A unit whose count cannot
    be read (an unreadable file) is one row, whose read counts the skip once per pass."""
    kind = plan.kind
    depth = kind.depth
    if depth is None or depth > 2 or (depth > 0 and counts_unknown(kind)):
        return None
    blocks: list[tuple[int, int, int]] = []
    if depth > 0:
        kind.count_rows(plan.data_paths)
    for unit_id in range(len(plan.epoch_units)):
        if depth == 0:
            blocks.append((unit_id, -1, 1))
            continue
        unit = plan.unit(unit_id)
        extent = kind.extent(unit, ())
        if extent is None:
            blocks.append((unit_id, 0 if depth == 2 else -1, 1))
            continue
        if depth == 1:
            blocks.append((unit_id, -1, extent[1]))
            continue
        for group in range(extent[1]):
            inner = kind.extent(unit, (group,))
            blocks.append((unit_id, group, inner[1] if inner is not None else 1))
    return RowLayout.of(blocks, depth)


def counts_unknown(kind: Listed) -> bool:
    """True where a unit kind never tells row counts ahead: a user family's units (the base
    `extent`)."""
    return type(kind).extent is Listed.extent


@dataclasses.dataclass(frozen=True)
class RowItem:
    """A draw: the row `row` of unit `unit_id` in pass `pass_index`, from `piece`; `opens`
    on a piece's first draw in this work list, `closes` on its last."""

    unit_id: int
    pass_index: int
    row: tuple
    piece: Piece
    opens: bool
    closes: bool


class RowWork:
    """A work list of single rows in a `RoundOrder`'s order (a round, or a remainder share)."""

    def __init__(self, layout: RowLayout, order: RoundOrder):
        self.layout, self.order = layout, order

    def __len__(self) -> int:
        return len(self.order)

    def row_item(self, index: int) -> RowItem:
        piece, offset = self.order.at(index)
        row = self.layout.row_of(piece.block, piece.start + offset)
        last = offset == piece.count - 1
        return RowItem(int(self.layout.units[piece.block]), piece.pass_index, row, piece, offset == 0, last)

    def item(self, index: int) -> tuple[int, int, tuple]:
        """(global unit id, pass whose randomness it uses, the row): `sharding.PassWork`'s shape."""
        found = self.row_item(index)
        return found.unit_id, found.pass_index, found.row


class RowPlan:
    """One worker's rounds: round k is its chunk of `EqualShare`, shuffled by `RoundOrder`
    with seeds from the epoch seed, the group, the worker and k."""

    def __init__(
        self,
        layout: RowLayout,
        worker: int,
        workers: int,
        buffer_size: int,
        seed: Sequence[int],
        offset: int = 0,
        open_pieces: int = 1,
    ):
        self.layout, self.worker, self.buffer_size, self.open_pieces = layout, worker, buffer_size, open_pieces
        self.share = EqualShare(layout.total, workers, offset)
        self.seed = tuple(seed)
        self._rounds: dict[int, RowWork] = {}

    def chunk(self, worker: int, round_index: int) -> list[list[int]]:
        """Worker `worker`'s chunk of round `round_index`, in storage order, as leftover
        pieces `[block, pass, start, count]` (what an elastic restart hands on)."""
        return [
            [piece.block, piece.pass_index, piece.start, piece.count]
            for piece in pieces_of(self.layout, self.share.span(worker, round_index))
        ]

    def round(self, round_index: int) -> RowWork:
        held = self._rounds.get(round_index)
        if held is None:
            pieces = pieces_of(self.layout, self.share.span(self.worker, round_index))
            order = RoundOrder(pieces, self.buffer_size, (*self.seed, self.worker, round_index), self.open_pieces)
            if len(self._rounds) >= 2:
                self._rounds.pop(next(iter(self._rounds)))
            held = self._rounds[round_index] = RowWork(self.layout, order)
        return held

    def remainder(self, left: Sequence[Sequence[int]], worker: int, workers: int) -> RowWork:
        """This worker's contiguous share of an elastic restart's leftover pieces
        (`[block, pass, start, count]`), shuffled as a round is."""
        pieces = [Piece(*(int(v) for v in piece)) for piece in left]
        total = sum(piece.count for piece in pieces)
        span = split_evenly(total, workers, worker)
        mine, seen = [], 0
        for piece in pieces:
            lo, hi = max(span.start - seen, 0), min(span.stop - seen, piece.count)
            if lo < hi:
                mine.append(Piece(piece.block, piece.pass_index, piece.start + lo, hi - lo))
            seen += piece.count
        order = RoundOrder(mine, self.buffer_size, (*self.seed, worker, -1), self.open_pieces)
        return RowWork(self.layout, order)

    def leftover(self, work: RowWork, next_index: int) -> list[list[int]]:
        """The pieces of `work` not yet drawn from draw `next_index` on, as `[block, pass,
        start, count]`."""
        return [
            [piece.block, piece.pass_index, piece.start + done, piece.count - done]
            for piece, done in work.order.drawn_before(next_index)
        ]


def row_seed(plan: UnitPlan) -> tuple[int, int]:
    return plan.epoch_seed & 0xFFFFFFFF, stable_hash(plan.name)


def plan_key(plan: UnitPlan, worker: int, workers: int, offset: int) -> tuple[Any, ...]:
    return (
        plan.epoch_seed,
        id(plan.data_paths),
        len(plan.data_paths),
        worker,
        workers,
        offset,
        plan.shuffle_buffer_size,
        plan.open_pieces,
    )


def draw_row(unit_samples, item, pieces: dict, log) -> tuple | None:
    """The row of a draw of the walk by rows (a `walk.WorkItem` with its `draw`), from its
    piece's reader: `unit_samples(unit, pass, start, log)` opened at the piece's first draw,
    read front to back, closed after its last. Returns `(row, builder, random state)`, or
    None when that row is bad (its skip counted by the reader)."""
    draw = item.draw
    held = pieces.get(draw.piece)
    if held is None:
        held = pieces[draw.piece] = [iter(unit_samples(item.unit_id, item.pass_index, item.row_start, log)), None]
    found = None
    while True:
        if held[1] is None:
            held[1] = next(held[0], None)
            if held[1] is None:
                break  # the rest of the piece is bad
        row = tuple(held[1][0])
        if row < item.row_start:  # a row before this draw's: not one of the piece's
            held[1] = None
            continue
        if row == item.row_start:
            found, held[1] = held[1], None
        break  # else this row is bad; the reader holds the next good one
    if draw.closes:
        held[0].close()
        del pieces[draw.piece]
    return found
