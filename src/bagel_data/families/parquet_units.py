"""What the parquet families share about their units: the span a unit reads, the row
counts a position is checked against, and which files the reference would have taken.

The edit family and `parquet_info`-listed families shard (file, row group) pairs; T2I shards
whole files. `RowGroupUnits` is the first kind's unit arithmetic (span, read source, row
count); `footer_rows` reads the row counts of a file's row groups from its footer, once per
file and process; `ParquetListing` records what a group listed, so that a reference
position can be checked against the files the reference would have listed.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence

from ..sources import storage
from ..sources.parquet import ParquetReader, parquet_data_files
from .reads import ParquetSource


def footer_rows(cache: dict, path: str) -> tuple[int, ...] | None:
    """The row count of each row group of `path`, from its footer (cached in `cache`);
    None when the file cannot be read (its reads count that as a skip later)."""
    if path not in cache:
        try:
            with ParquetReader(path) as reader:
                cache[path] = tuple(reader.row_group_rows(group) for group in range(reader.num_row_groups))
        except Exception:  # any pyarrow or I/O failure: unknown, never a wrong count
            cache[path] = None
    return cache[path]


class RowGroupUnits:
    """The unit half of a family whose units are (parquet file, row group) pairs: a row
    within a unit is `(row,)`. Mixed in before `DistributedIterableDataset`."""

    epoch_units: Sequence
    file_order: str
    listed_files: dict
    parquet_listing: ParquetListing | None

    def row_group_units(
        self, data_dir_list, num_used_data, row_groups: Callable[[str, str], int | None]
    ) -> list[tuple[str, int]]:
        """The (file, row group) units of each folder's first `num_used_data` files (repeated
        to fill it), recording what was listed (`listed_files`, `parquet_listing`).
        `row_groups(path, data_dir)` is a file's count, asked once per distinct file; None
        leaves the file out (asked again where `num_used_data` repeats it)."""
        units: list[tuple[str, int]] = []
        counts: dict[str, int] = {}
        taken: list[str] = []
        for data_dir, num_used in zip(data_dir_list, num_used_data):
            paths, listed = parquet_data_files([data_dir], [num_used], file_order=self.file_order)
            self.listed_files.update(listed)
            taken.extend(paths)
            for path in paths:
                count = counts.get(path)
                if count is None:
                    count = row_groups(path, data_dir)
                    if count is None:
                        continue
                    counts[path] = count
                units.extend((path, group) for group in range(count))
        self.parquet_listing = ParquetListing.of(
            data_dir_list, num_used_data, self.file_order, taken, self.listed_files
        )
        return units

    def row_depth(self) -> int | None:
        return 1  # (row,) in its row group

    def parquet_span(self, unit_id: int, row_start: tuple) -> tuple[str, int, int | None] | None:
        path, row_group = self.epoch_units[unit_id]
        return path, row_group, row_group + 1

    def read_source(self) -> ParquetSource | None:
        return ParquetSource(self.parquet_span, self.parquet_columns)

    def parquet_columns(self, names):
        raise NotImplementedError

    def row_extent(self, unit_id: int, row: tuple) -> tuple[str, int, str] | None:
        """("row", how many rows the unit's row group holds, where it is)."""
        path, row_group = self.epoch_units[unit_id]
        counts = footer_rows(self.__dict__.setdefault("_footer_rows", {}), path)
        if counts is None or row_group >= len(counts):
            return None  # unreadable, or a stale parquet_info: its read says so
        return "row", counts[row_group], f"{path}, row group {row_group}"


@dataclasses.dataclass(frozen=True)
class ParquetListing:
    """What a parquet group listed: its folders, `num_used_data` and listing order, and the
    files taken (each folder's first `num_used_data` files, repeated to fill it)."""

    data_dirs: tuple[str, ...]
    num_used: tuple[int, ...]
    file_order: str
    files: tuple[str, ...]
    folder_sizes: tuple[int, ...]  # parquet files in each folder

    @classmethod
    def of(cls, data_dirs, num_used, file_order: str, files, listed: dict) -> ParquetListing:
        """The listing of `files` taken from `data_dirs`, whose listed entries are `listed`."""
        sizes = []
        for folder in data_dirs:
            prefix = storage.join(folder, "")
            sizes.append(sum(1 for path in listed if path.startswith(prefix) and "/" not in path[len(prefix) :]))
        return cls(tuple(data_dirs), tuple(num_used), file_order, tuple(files), tuple(sizes))

    def order_free(self) -> bool:
        """True when the listing order cannot change which files are taken: the reference's
        order (filesystem) is this one, or each folder's files are taken whole, equally often."""
        return self.file_order == "filesystem" or all(
            size and used % size == 0 for used, size in zip(self.num_used, self.folder_sizes)
        )

    def reference_mismatch(self) -> str | None:
        """Why the reference would have taken other files (None when it takes these).

        The reference takes each folder's first files in the filesystem's listing order; the
        default mode's sorted order takes the same files only when `num_used_data` takes a
        whole number of copies of every file. The folders are listed again only otherwise."""
        if self.order_free():
            return None
        theirs, _ = parquet_data_files(self.data_dirs, self.num_used, file_order="filesystem")
        ours_count, theirs_count = collections.Counter(self.files), collections.Counter(theirs)
        if ours_count == theirs_count:
            return None
        differ = [
            path for path in sorted(set(ours_count) | set(theirs_count)) if ours_count[path] != theirs_count[path]
        ]
        shown = ", ".join(f"{path} read {ours_count[path]}x here, {theirs_count[path]}x there" for path in differ[:3])
        return (
            f"num_used_data={list(self.num_used)} takes other files in the default mode's sorted order than in the "
            f"reference's listing order ({shown})"
        )
