"""Every row equally often, and a bounded shuffle: the default mode's row arithmetic alone.

**Unit rule.** A group's usable rows, in the epoch order of its units, are laid end to end
(`RowLayout`); a *block* is one storage unit's rows (a parquet row group, a JSONL line), the
most a reader holds at once. Passes over those N rows are laid end to end too: stream
position `t` is row `t % N` of pass `t // N`. The P workers of all ranks (P = world size x
workers per rank) share this one endless sequence in *rounds* of P chunks of L = ceil(N / P)
positions: in round k worker g reads positions `[(k*P + g)*L, (k*P + g + 1)*L)`. A chunk is
cut into *pieces* at block and pass boundaries, so one file or one row group can feed many
workers, and a chunk may wrap from the end of a pass to the start of the next.

**Remainder rule.** Nothing is dropped or repeated: when P does not divide N, a round covers
P*L - N positions of the next pass, and the next round starts there. All workers draw at the
same rate (a DataLoader takes from them in turn), so after any number of whole rounds the
positions drawn are one contiguous run from the start, and each row has been drawn
`floor(run / N)` or one more times: every row equally often, +-1 at a pass boundary.

**Shuffle.** Within a worker's chunk the pieces are put in a seeded random order and taken
in *windows* of consecutive pieces holding at least `buffer_size` rows and at least
`open_pieces` pieces; a window's rows are drawn in a seeded random interleaving of its
pieces (each piece read front to back, so a block is read once while its window is open: no
extra bytes). The piece count matters where blocks are large: with row groups of 1,000 rows
a window of 1,024 rows would hold two, and every other sample would follow one from its own
row group; the default window opens eight (`row_plan.open_pieces_for`: one per 128 rows of
the window, at most 8), which brings that near 1/8. A piece is turned into Python values a
slice at a time (`python_rows` in `sources/parquet.py`); an open row group's Arrow table is
held whole while its piece is open, so a smaller window opens fewer. The order is a function
of the seeds, the row counts and the window's two sizes only, so a position `(round, index)`
is the whole state: resume and rebuild recompute the window, never store it (a checkpoint
records the two sizes, `checkpoint/orders.py`). `buffer_size` 0 reads pieces in storage order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """The blocks of a group in epoch order: block b is rows `[0, counts[b])` of unit
    `units[b]`, addressed as `(*prefix, row)` where the prefix is `(groups[b],)` for a
    two-level unit (a parquet file's row group) and `()` otherwise; `depth` 0 (a unit is
    one row, a JSONL line) addresses a row as `()`."""

    units: np.ndarray  # int64 unit id of each block
    groups: np.ndarray  # int64 row group within the unit, or -1
    counts: np.ndarray  # int64 rows of each block (> 0)
    depth: int
    starts: np.ndarray = dataclasses.field(init=False, repr=False)  # first row of each block, and N

    def __post_init__(self) -> None:
        object.__setattr__(self, "starts", np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)]))

    @classmethod
    def of(cls, blocks: Sequence[tuple[int, int, int]], depth: int) -> RowLayout:
        """From `(unit id, row group or -1, rows)` triples; empty blocks are left out."""
        kept = [block for block in blocks if block[2] > 0]
        array = np.asarray(kept, dtype=np.int64).reshape(-1, 3)
        return cls(array[:, 0].copy(), array[:, 1].copy(), array[:, 2].copy(), depth)

    @property
    def total(self) -> int:
        return int(self.starts[-1])

    def row_of(self, block: int, offset: int) -> tuple[int, ...]:
        """The row address (within its unit) of row `offset` of block `block`."""
        if self.depth == 0:
            return ()
        if self.depth == 1:
            return (int(offset),)
        return (int(self.groups[block]), int(offset))

    def block_at(self, flat: int) -> tuple[int, int]:
        """(block, offset in it) of row `flat` of a pass."""
        block = int(np.searchsorted(self.starts, flat, side="right")) - 1
        return block, flat - int(self.starts[block])


@dataclasses.dataclass(frozen=True)
class Piece:
    """Rows `[start, start + count)` of block `block`, read in pass `pass_index`."""

    block: int
    pass_index: int
    start: int
    count: int


@dataclasses.dataclass(frozen=True)
class EqualShare:
    """The unit and remainder rules (module docstring): which stream positions a worker
    reads in a round. `offset` shifts round 0 (an elastic restart starts past the old run)."""

    total: int  # N, the rows of one pass
    workers: int  # P, over all ranks
    offset: int = 0

    @property
    def chunk(self) -> int:
        """L: the positions one worker reads per round."""
        return -(-self.total // self.workers)

    def span(self, worker: int, round_index: int) -> range:
        start = self.offset + (round_index * self.workers + worker) * self.chunk
        return range(start, start + self.chunk)

    def round_end(self, round_index: int) -> int:
        """The first position past round `round_index`."""
        return self.offset + (round_index + 1) * self.workers * self.chunk


def pieces_of(layout: RowLayout, positions: range) -> list[Piece]:
    """Stream positions `positions` as pieces, cut at block and pass boundaries."""
    pieces: list[Piece] = []
    t, stop, total = positions.start, positions.stop, layout.total
    while t < stop:
        pass_index, flat = divmod(t, total)
        block, offset = layout.block_at(flat)
        count = min(int(layout.counts[block]) - offset, stop - t)
        pieces.append(Piece(block, pass_index, offset, count))
        t += count
    return pieces


def _generator(*key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([k & 0xFFFFFFFF for k in key]))


class RoundOrder:
    """The order one worker reads its pieces of one round in: `at(index)` is the piece and
    the row within it of the `index`-th draw. Windows are computed on demand and the last
    two kept, so memory is bounded by a window's pieces (each read a slice at a time)."""

    def __init__(self, pieces: Sequence[Piece], buffer_size: int, seed: Sequence[int], open_pieces: int = 1):
        self.seed = tuple(int(k) for k in seed)
        self.buffer_size = int(buffer_size)
        order = np.arange(len(pieces))
        if self.buffer_size > 0 and len(pieces) > 1:
            _generator(*self.seed, 0).shuffle(order)
        self.pieces = [pieces[int(i)] for i in order]
        counts = np.fromiter((piece.count for piece in self.pieces), dtype=np.int64, count=len(self.pieces))
        # Window w is pieces [edges[w], edges[w + 1]): each one at least buffer_size rows and,
        # shuffled, at least open_pieces pieces (the last one whatever is left).
        fewest = max(int(open_pieces), 1) if self.buffer_size > 0 else 1
        edges, rows = [0], 0
        for index, count in enumerate(counts):
            rows += int(count)
            if rows >= max(self.buffer_size, 1) and index + 1 - edges[-1] >= fewest:
                edges.append(index + 1)
                rows = 0
        if edges[-1] != len(counts):
            edges.append(len(counts))
        self.edges = np.asarray(edges, dtype=np.int64)
        piece_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self.window_starts = piece_starts[self.edges]
        self.piece_starts = piece_starts
        self._windows: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return int(self.window_starts[-1])

    def window_of(self, index: int) -> int:
        return int(np.searchsorted(self.window_starts, index, side="right")) - 1

    def window(self, window: int) -> tuple[np.ndarray, np.ndarray]:
        """(piece of each draw, its row within the piece) for window `window`; the last two
        windows are kept (the one read and one a rebuild asked for)."""
        held = self._windows.get(window)
        if held is not None:
            return held
        first, last = int(self.edges[window]), int(self.edges[window + 1])
        starts = self.piece_starts[first:last] - self.piece_starts[first]
        counts = self.piece_starts[first + 1 : last + 1] - self.piece_starts[first:last]
        labels = np.repeat(np.arange(first, last, dtype=np.int64), counts)
        if self.buffer_size > 0 and last - first > 1:
            _generator(*self.seed, 1 + window).shuffle(labels)
        # The k-th draw of a piece reads its k-th row: each piece front to back.
        order = np.argsort(labels, kind="stable")
        rows = np.empty_like(labels)
        rows[order] = np.arange(len(labels), dtype=np.int64) - starts[labels[order] - first]
        if len(self._windows) >= 2:
            self._windows.pop(next(iter(self._windows)))
        self._windows[window] = (labels, rows)
        return labels, rows

    def at(self, index: int) -> tuple[Piece, int]:
        """(piece, row offset within the piece) of draw `index`."""
        window = self.window_of(index)
        labels, rows = self.window(window)
        local = index - int(self.window_starts[window])
        return self.pieces[int(labels[local])], int(rows[local])

    def drawn_before(self, index: int) -> list[tuple[Piece, int]]:
        """(piece, rows already drawn from it) for every piece whose rows are not all drawn
        before draw `index`: what is left of the round, as pieces read from a row on."""
        left: list[tuple[Piece, int]] = []
        window = self.window_of(index) if index < len(self) else len(self.edges) - 1
        if window < len(self.edges) - 1:
            labels, _ = self.window(window)
            local = index - int(self.window_starts[window])
            done = np.bincount(
                labels[:local] - self.edges[window], minlength=int(self.edges[window + 1] - self.edges[window])
            )
            for k, piece_index in enumerate(range(int(self.edges[window]), int(self.edges[window + 1]))):
                if done[k] < self.pieces[piece_index].count:
                    left.append((self.pieces[piece_index], int(done[k])))
            left += [(piece, 0) for piece in self.pieces[int(self.edges[window + 1]) :]]
        return left


def draw_rate_spread(rows_per_worker: Sequence[int]) -> float:
    """Most- over least-drawn sample's draw rate when every worker draws at the same rate
    and loops over its own rows: the largest share over the smallest (1.0 when equal).
    Workers without rows are left out (they stop the run, a separate error)."""
    sizes = [int(n) for n in rows_per_worker if n > 0]
    return max(sizes) / min(sizes) if sizes else 1.0
