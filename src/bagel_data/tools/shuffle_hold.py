"""What the default mode's shuffle holds in memory: `bagel-data validate`'s estimate.

A shuffle window keeps its pieces' row groups open while it draws from them, at least one
per 128 rows of `shuffle_buffer_size` and at most 8 (`families/row_plan.open_pieces_for`),
and an open row group is held by Arrow as its uncompressed columns. Where row groups are
large (1,000 photos each) that is the worker's largest cost of the shuffle, and it grows
with the DataLoader workers: `validate` estimates it from the footers of the group's files
(their `total_byte_size`, at most LOOKED_AT files spread over the list) and warns past
HOLD_WARNING_MB per worker. Resident memory measured about twice Arrow's own figure
(`bench shuffle-memory`), since the allocator keeps the buffers a row group was decoded from.
"""

from __future__ import annotations

import dataclasses

from ..sources.parquet import ParquetReader

# Footers read at most: the largest row group of a sample of the files stands for all.
LOOKED_AT = 64
# Open row groups' Arrow memory per DataLoader worker above which `validate` warns.
HOLD_WARNING_MB = 1024.0


@dataclasses.dataclass(frozen=True)
class ShuffleHold:
    """`open_pieces` row groups of at most `largest_row_group_mb` each, open per worker."""

    open_pieces: int
    largest_row_group_mb: float
    files_looked_at: int

    @property
    def per_worker_mb(self) -> float:
        return self.open_pieces * self.largest_row_group_mb


def shuffle_hold(family) -> ShuffleHold | None:
    """The estimate for `family`'s group; None where its shuffle holds no parquet row groups
    (shuffle off, compat mode, a walk by whole units, JSONL lines, tars) or no footer reads."""
    units = family.units
    if units.data_paths is None or units.shuffle_buffer_size <= 0 or not units.walks_rows():
        return None
    paths = [str(path) for path in units.kind.input_paths(units.data_paths) if str(path).endswith(".parquet")]
    if not paths:
        return None
    looked = paths[:: max(1, len(paths) // LOOKED_AT)][:LOOKED_AT]
    largest, read = 0, 0
    for path in looked:
        try:
            with ParquetReader(path) as reader:
                sizes = [reader.row_group_bytes(group) for group in range(reader.num_row_groups)]
        except Exception:  # an unreadable file is the walk's counted skip, not this estimate's
            continue
        largest, read = max([largest, *sizes]), read + 1
    if not read:
        return None
    return ShuffleHold(int(units.open_pieces), largest / 2**20, read)


def hold_warning(name: str, hold: ShuffleHold | None, num_workers: int) -> list[str]:
    """A warning when the open row groups of one worker's shuffle pass HOLD_WARNING_MB."""
    if hold is None or hold.per_worker_mb <= HOLD_WARNING_MB:
        return []
    workers = max(num_workers, 1)
    return [
        f"{name}: the shuffle keeps up to {hold.open_pieces} row groups open per DataLoader worker, of up to "
        f"{hold.largest_row_group_mb:.0f} MB each uncompressed (largest of {hold.files_looked_at} file(s) "
        f"looked at): about {hold.per_worker_mb:.0f} MB of Arrow memory per worker, "
        f"{workers * hold.per_worker_mb:.0f} MB for {workers} worker(s), and resident memory about twice "
        "that. Fix: a smaller shuffle_buffer_size (256 keeps 2 open, under 256 one), or smaller row groups"
    ]
