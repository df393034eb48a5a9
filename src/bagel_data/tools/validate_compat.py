"""`validate` in `compat="bagel"`: the reference's split of a group's units, judged per file.

The reference gives each rank `units // world_size` units and each worker
`per_rank // num_workers` of them (sharding.py: `reference_shard_unit_ids`); what is left
over is never read. With 7 files and 2 workers it reads 3 + 3 and never the seventh. This
module reports that split (`units_per_worker`) and a warning naming each file the run never
reads, reads in part, or reads more often than the group's other files.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from ..sharding import reference_shard_unit_ids


def compat_split(family: Any, world_size: int, num_workers: int) -> tuple[list[list[int]], list[str]]:
    """(units of each worker of each rank, warnings) for `family`'s epoch units as the
    reference splits them; `num_workers` 0 is the main process (one reader per rank)."""
    units = family.epoch_units
    read: collections.Counter[int] = collections.Counter()
    sizes = []
    for rank in range(world_size):
        per_rank = []
        for worker in range(max(num_workers, 1)):
            ids = reference_shard_unit_ids(len(units), rank, world_size, worker, num_workers)
            per_rank.append(len(ids))
            read.update(int(i) for i in ids)
        sizes.append(per_rank)
    return sizes, file_warnings(family.dataset_name, units, read, lambda unit: unit_file(family, unit))


def unit_file(family: Any, unit: Any) -> str:
    """The file a unit belongs to: a parquet path, the file of a (file, row group), the
    JSONL file of a line."""
    if isinstance(unit, str):
        return unit
    if isinstance(unit, (tuple, list)) and unit and isinstance(unit[0], str):
        return unit[0]
    index = getattr(family, "data_paths", None)
    if index is not None and hasattr(index, "file_ids"):
        return str(index.paths[int(index.file_ids[int(unit)])])
    return str(unit)


def file_warnings(name: str, units: Sequence[Any], read: collections.Counter, file_of) -> list[str]:
    """Warnings for the files of `units` (the epoch order) that the split in `read` (unit
    position -> times read) never reads, reads in part, or reads more often than others."""
    listed: dict[str, list[int]] = collections.defaultdict(list)
    distinct: dict[str, set] = collections.defaultdict(set)
    for position, unit in enumerate(units):
        file = file_of(unit)
        listed[file].append(position)
        distinct[file].add(repr(unit))
    readings: dict[str, float] = {}
    notes = []
    how = 'compat="bagel" splits as the reference (rank and worker remainders are never read)'
    for file, positions in listed.items():
        taken = sum(read[p] for p in positions)
        readings[file] = taken / len(distinct[file])
        if taken == 0:
            notes.append(f"{name}: {how}: {file} is never read ({len(positions)} unit(s) left over)")
        elif taken % len(distinct[file]):
            notes.append(f"{name}: {how}: {file} is read in part ({taken} of its {len(positions)} units)")
    # Files read whole some number of times, compared (a file read in part is named above).
    read_files = {file: times for file, times in readings.items() if times > 0 and times == int(times)}
    if len(set(read_files.values())) > 1:
        least = min(read_files.values())
        for file, times in sorted(read_files.items()):
            if times > least:
                notes.append(
                    f"{name}: {how}: {file} is read {_times(times)}, more often than other files ({_times(least)})"
                )
    return notes


def _times(value: float) -> str:
    return f"{value:g} time{'s' if value != 1 else ''}"
