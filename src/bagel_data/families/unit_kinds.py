"""What a unit is, one small class a kind: JSONL lines, parquet files, parquet row groups,
tar files read by blocks; and `Listed`, a user family's units as its `data_paths` hold them.

A family holds one kind (`family.units.kind`, `families/unit_plan.py`). A kind answers about
one unit *value* (an entry of `data_paths`), never about ids or shares (the plan's): its
canonical order, how the reference's `data_paths` shows it, where it and its rows are (for
messages), which rows it covers (`span`), how many entries each level of a row address
holds (`extent`, what a resume position is checked against) and what it reads ahead
(`read_source`).

A unit may cover *part* of its file: `Span` carries (path, row group or None, start, stop),
and a parquet row group unit may be `(path, row_group, start, stop)` as well as
`(path, row_group)`. The row-group readers (edit, parse_row and interleaved families) walk
the rows of `span.rows(count)` only and `extent` stops at `stop`, so a unit below the row
group needs no other change than the code that lists such units. Still to do with it: a
resume position under `start` is not refused by `extent`, the read-ahead fetches the whole
row group, and T2I's files and tars, and JSONL lines, have no sub-range units yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..sources import tar_index
from ..sources.jsonl import JsonlIndex
from ..sources.parquet import ParquetReader, parquet_data_files
from ..sources.tar_counts import counted_blocks
from .parquet_listing import ParquetListing
from .reads import ParquetSource, ReadSource
from .row_counts import footer_counts, read_all, remote_counts
from .t2i_tars import TAR_POSITION_SALT, TarSource, tar_block_counts, tar_extent


class Span(NamedTuple):
    """The rows one unit covers: rows [start, stop) of `row_group` of `path` (None: every
    row group of the file, from row `start` of the first); stop None: to the end."""

    path: str
    row_group: int | None
    start: int = 0
    stop: int | None = None

    def rows(self, count: int, first: int = 0) -> range:
        """The row numbers of a row group of `count` rows this span covers, from `first` on."""
        stop = count if self.stop is None else min(self.stop, count)
        return range(max(self.start, first), stop)


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


def count_footers(cache: dict, paths: Sequence[str], listed: dict) -> None:
    """Put the footer row counts of the remote files of `paths` not yet in `cache` there,
    read once per node (`families/row_counts.py`); local footers are read when asked."""
    missing = [path for path in paths if path not in cache]
    cache.update(remote_counts("parquet", missing, listed, footer_counts))


UnitOf = Callable[[int], Any]  # a unit id of the epoch order -> its unit value


class Listed:
    """Units as a user family's `data_paths` holds them (paths, or (path, row group) pairs):
    sorted as the reference sorts them; nothing known about their rows but, where the family
    says it, how many ints address a row within one (`Listed(depth=0)`: a unit is one row)."""

    depth: int | None = None  # ints of a row address within a unit (None: unknown)
    # Whether its units' rows can be counted ahead on an object store at little cost (a
    # parquet footer each, once per node); a tar's needs a pass over the whole tar.
    counts_on_store = True
    listing: ParquetListing | None = None  # what a parquet kind listed
    position_salt = 0  # salts the tag of its positions (families/positions.py): 0, none

    def __init__(self, depth: int | None = None) -> None:
        if depth is not None:
            self.depth = depth

    def sorted_units(self, units: Sequence) -> Any:  # a list, or a numpy array
        return sorted(units)

    def view(self, unit: Any) -> Any:
        """A unit as the reference's `data_paths` holds it."""
        return unit

    def label(self, unit: Any) -> str:
        return str(unit)

    def location(self, unit: Any, row: tuple) -> str:
        return f"{unit}, row {list(row)}"

    def extent(self, unit: Any, row: tuple) -> tuple[str, int, str] | None:
        """The level of a row address after `row`: (its name, how many entries it holds,
        where), e.g. ("row", 3, "a.parquet, row group 0"); None where it cannot be told."""
        return None

    def input_paths(self, units: Sequence) -> list[str]:
        return sorted({unit[0] if isinstance(unit, tuple) else unit for unit in units or ()})

    def count_rows(self, units: Sequence) -> None:
        """Read ahead, at once, what `extent` asks for the units `units` (the walk by rows
        asks for all of them before its first draw); nothing where it is asked unit by unit."""

    def media_folders(self, units: Sequence) -> Sequence[str]:
        return ()

    def read_source(self, unit_of: UnitOf, columns) -> ReadSource | None:
        return None  # read inline

    def too_few(self, name: str, num_units: int, needed: int, ranks: int, workers: int) -> tuple[str, object, str]:
        """(key, value, fix) of the error when `num_units` cannot give each of `needed`
        workers one."""
        return (
            f"{name}.num_used_data",
            num_units,
            f"{num_units} units cannot be shared by {ranks} rank(s) x {workers} worker(s): at least {needed} are "
            "needed. Raise num_used_data (parquet files repeat to fill it), add data, or use fewer workers/ranks.",
        )


class JsonlLines(Listed):
    """A unit is one line of a `JsonlIndex` (the family's `data_paths`), by its index;
    `asked`: the group's `num_used_data` as configured (lines never repeat to reach it)."""

    depth = 0

    def __init__(self, index: JsonlIndex, asked: Sequence[int] | None = None):
        self.index = index
        self.asked = None if asked is None else list(asked)

    def too_few(self, name: str, num_units: int, needed: int, ranks: int, workers: int) -> tuple[str, object, str]:
        files = ", ".join(shown or path for shown, path in zip(self.index.shown_paths, self.index.paths))
        return (
            f"{name}.num_used_data",
            num_units if self.asked is None else self.asked,
            f"the JSONL file(s) {files} give {num_units} line(s) in all; a line is the unit shared out, and lines "
            f"are never repeated to reach num_used_data, so {ranks} rank(s) x {workers} DataLoader worker(s) need "
            f"at least {needed} lines. Add lines, or use fewer workers (num_workers / --num-workers "
            f"{max(1, num_units // ranks)}) or ranks",
        )

    def sorted_units(self, units: Sequence) -> np.ndarray:
        return np.arange(len(units), dtype=np.int64)  # the index holds its lines in order

    def view(self, unit: Any) -> Any:
        return self.index[int(unit)]

    def label(self, unit: Any) -> str:
        return self.index.location(int(unit))

    def location(self, unit: Any, row: tuple) -> str:
        return self.index.location(int(unit))

    def input_paths(self, units: Sequence) -> list[str]:
        return list(self.index.paths)  # the files, never a line's text

    def media_folders(self, units: Sequence) -> Sequence[str]:
        return self.index.image_dirs


class ParquetRowGroups(Listed):
    """A unit is `(file, row group)` (or `(file, row group, start, stop)`: part of it); a
    row within it is `(row,)`."""

    depth = 1

    def __init__(self) -> None:
        self._footers: dict = {}
        self.listed: dict = {}  # each file's (size, mtime_ns) as its folder's listing gave them

    def list_units(
        self, data_dir_list, num_used_data, file_order: str, row_groups: Callable[[str, str], int | None]
    ) -> tuple[list[tuple[str, int]], dict]:
        """The units of each folder's first `num_used_data` files (repeated to fill it) and
        the listed files' (size, mtime_ns). `row_groups(path, data_dir)` is a file's count,
        asked once per distinct file; None leaves the file out (asked again where
        `num_used_data` repeats it)."""
        units: list[tuple[str, int]] = []
        counts: dict[str, int] = {}
        taken: list[str] = []
        listed_files: dict = {}
        for data_dir, num_used in zip(data_dir_list, num_used_data):
            paths, listed = parquet_data_files([data_dir], [num_used], file_order=file_order)
            listed_files.update(listed)
            taken.extend(paths)
            for path in paths:
                count = counts.get(path)
                if count is None:
                    count = row_groups(path, data_dir)
                    if count is None:
                        continue
                    counts[path] = count
                units.extend((path, group) for group in range(count))
        self.listing = ParquetListing.of(data_dir_list, num_used_data, file_order, taken, listed_files)
        self.listed = listed_files
        return units, listed_files

    def count_rows(self, units: Sequence) -> None:
        count_footers(self._footers, self.input_paths(units), self.listed)

    @staticmethod
    def span(unit: tuple) -> Span:
        path, row_group, *rows = unit
        return Span(path, row_group, *rows)

    def label(self, unit: Any) -> str:
        return f"{unit[0]}, row group {unit[1]}"

    def location(self, unit: Any, row: tuple) -> str:
        return f"{unit[0]}, row group {unit[1]}, row {row[0]}"

    def extent(self, unit: Any, row: tuple) -> tuple[str, int, str] | None:
        """("row", the rows the unit covers, where it is)."""
        span, row_group = self.span(unit), int(unit[1])
        counts = footer_rows(self._footers, span.path)
        if counts is None or row_group >= len(counts):
            return None  # unreadable, or a stale parquet_info: its read says so
        return "row", span.rows(counts[row_group]).stop, f"{span.path}, row group {row_group}"

    def read_source(self, unit_of: UnitOf, columns) -> ReadSource:
        def span(unit_id: int, row_start: tuple) -> tuple[str, int, int]:
            path, row_group, *_ = unit_of(unit_id)
            return path, row_group, row_group + 1

        return ParquetSource(span, columns)


class ParquetFiles(Listed):
    """A unit is a parquet file; a row within it is `(row group, row)`."""

    depth = 2

    def __init__(self, listing: ParquetListing | None = None, listed: dict | None = None) -> None:
        """`listed`: each file's (size, mtime_ns) as its folder's listing gave them."""
        self.listing = listing
        self._footers: dict = {}
        self.listed = listed or {}

    def count_rows(self, units: Sequence) -> None:
        count_footers(self._footers, self.input_paths(units), self.listed)

    @staticmethod
    def span(unit: str) -> Span:
        return Span(unit, None)

    def location(self, unit: Any, row: tuple) -> str:
        return f"{unit}, row group {row[0]}, row {row[1]}"

    def extent(self, unit: Any, row: tuple) -> tuple[str, int, str] | None:
        """The file's row groups (`row` ()), or the rows of row group `row[0]`."""
        counts = footer_rows(self._footers, unit)
        if counts is None:
            return None  # unreadable: a counted skip when it is read
        if not row:
            return "row group", len(counts), unit
        return "row", counts[row[0]], f"{unit}, row group {row[0]}"

    def read_source(self, unit_of: UnitOf, columns) -> ReadSource:
        return ParquetSource(
            lambda unit_id, row_start: (unit_of(unit_id), row_start[0] if row_start else 0, None), columns
        )


class TarBlocks(Listed):
    """A unit is a WebDataset tar; a row within it is `(block, sample within the block)`.
    Its blocks are known from its member index (listed once per node), so a resume position
    past a tar's blocks or a block's samples is refused by name. Its positions are always
    tagged, salted apart from parquet ones (`position_salt`, `families/positions.py`): a
    `data_status` of the tars' `prepare t2i` copy is never taken for theirs."""

    depth = 2
    position_salt = TAR_POSITION_SALT

    def __init__(
        self, index_of: Callable[[str], Any] | None = None, listed: dict | None = None, counted: dict | None = None
    ) -> None:
        """`index_of(path)`: a tar's index as the family keeps it; `listed`: each tar's (size,
        mtime_ns) from its folder's listing (its index is then known current without a request);
        `counted`: each tar's samples from a counts file (`sources/tar_counts.py`), given for
        every tar or none: its blocks are then cut by count and known without reading it."""
        self._indexes: dict = {}  # each tar's samples per block (None: unreadable)
        self._index_of, self._listed = index_of, listed or {}
        for path, count in (counted or {}).items():
            self._indexes[path] = counted_blocks(count, self._listed[path][0], tar_index.BLOCK_BYTES)
        # A remote tar's blocks are known after a pass over it, unless a counts file gives them.
        self.counts_on_store = bool(counted)

    def location(self, unit: Any, row: tuple) -> str:
        return f"{unit}, block {row[0]}, sample {row[1]}"

    def extent(self, unit: Any, row: tuple) -> tuple[str, int, str] | None:
        return tar_extent(self._indexes, unit, row, self._listed.get(unit))

    def count_rows(self, units: Sequence) -> None:
        """Each tar's samples per block, on a few threads: a tar not yet listed on this
        node is listed (once per node, `sources/tar_index.py`), the others' indexes mapped."""
        missing = [path for path in self.input_paths(units) if path not in self._indexes]
        self._indexes.update(read_all(missing, lambda path: tar_block_counts(path, self._listed.get(path))))

    def read_source(self, unit_of: UnitOf, columns) -> ReadSource:
        return TarSource(unit_of) if self._index_of is None else TarSource(unit_of, self._index_of)
