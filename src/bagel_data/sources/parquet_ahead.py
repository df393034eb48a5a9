"""Parquet reads through the read-ahead (`read_ahead.py`): a file's footer and its row
groups, fetched ahead in the stream's order, handed to the family as a `ParquetReader`.

A file is opened once (`OpenedParquet`: one open, one footer read) and its row groups are
read from that one handle by separate `ParquetFile` readers sharing the footer: Arrow's
positional reads (`ReadAt`) are safe from several threads, and a file object of Python's
is wrapped once so that its own lock serialises them.

Task keys: `("meta", path)` for the opened file, `("rg", path, row group)` for a row
group's table (kept with the columns it was read with: another column list is a miss).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from . import storage
from .read_ahead import ReadAhead, Task

# Before a footer is read its size is unknown; footers of shards are tens of kilobytes.
FOOTER_ESTIMATE = 64 * 1024

# `columns_for(schema names)`: the columns a family reads from a file with these names, or
# None when it reads none (a missing column is a counted skip of the whole file).
ColumnsFor = Callable[[Sequence[str]], Sequence[str] | None]


class OpenedParquet:
    """A parquet file opened for reading ahead: its footer and one shared handle. The
    handle closes when the last task or reader holding this lets go (or at `close`)."""

    def __init__(self, path: str):
        self.path = path
        handle = storage.open_input(path)
        # Arrow's own files (local, S3, GCS, HDFS) read at positions from any thread; a
        # Python file object (local paths, fsspec) is one cursor: its reads take turns.
        self._thread_safe = isinstance(handle, pa.NativeFile) and not isinstance(handle, pa.PythonFile)
        self._native = handle if isinstance(handle, pa.NativeFile) else pa.PythonFile(handle, mode="r")
        self._lock = threading.Lock()
        try:
            self._file = pq.ParquetFile(self._native)
        except Exception:
            self._native.close()
            raise
        self.metadata = self._file.metadata
        self.nbytes = self.metadata.serialized_size  # what the budget counts for it

    @property
    def schema(self) -> pa.Schema:
        return self._file.schema_arrow

    def read_row_group(
        self, index: int, columns: Sequence[str], own_handle: bool = False
    ) -> tuple[tuple[str, ...], pa.Table]:
        """(columns, table) of row group `index`, as `ParquetReader.read_row_group` reads it.
        `own_handle`: a read-ahead thread's read, in parallel with others: on a file object
        that cannot take that, through a handle of its own (one more open, no footer read)."""
        if self._thread_safe:  # a reader per thread, one handle
            return tuple(columns), self._read(self._native, index, columns)
        if not own_handle:
            with self._lock:
                return tuple(columns), self._read(self._native, index, columns)
        with storage.open_input(self.path) as handle:
            return tuple(columns), self._read(handle, index, columns)

    def _read(self, source, index: int, columns: Sequence[str]) -> pa.Table:
        return pq.ParquetFile(source, metadata=self.metadata).read_row_group(index, columns=list(columns))

    def close(self) -> None:
        self._native.close()

    def __del__(self) -> None:
        native = getattr(self, "_native", None)
        if native is not None:
            native.close()


class AheadParquet:
    """`ParquetReader`'s interface over an `OpenedParquet`, its row groups taken from the
    read-ahead; a row group it did not fetch (or fetched with other columns) reads inline."""

    def __init__(self, opened: OpenedParquet, ahead: ReadAhead, stream: bool = True):
        self.path, self._opened, self._ahead, self._stream = opened.path, opened, ahead, stream

    @property
    def num_row_groups(self) -> int:
        return self._opened.metadata.num_row_groups

    @property
    def num_rows(self) -> int:
        return self._opened.metadata.num_rows

    def row_group_rows(self, index: int) -> int:
        return self._opened.metadata.row_group(index).num_rows

    @property
    def schema(self) -> pa.Schema:
        return self._opened.schema

    def read_row_group(self, index: int, columns: Sequence[str]) -> pa.Table:
        wanted = tuple(columns)
        inline = lambda: self._opened.read_row_group(index, wanted)  # noqa: E731
        read, table = self._ahead.take(("rg", self.path, index), inline, self._stream)
        return table if read == wanted else inline()[1]

    def close(self) -> None:
        self._opened = None  # type: ignore[assignment]  # the handle closes with its last holder

    def __enter__(self) -> AheadParquet:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_ahead(path: str, ahead: ReadAhead, opened: weakref.WeakSet, stream: bool = True) -> AheadParquet:
    """The file at `path` as the read-ahead fetched it (or opened now, on a miss)."""
    return AheadParquet(ahead.take(("meta", path), lambda: _opened(path, opened), stream), ahead, stream)


def _opened(path: str, registry: weakref.WeakSet) -> OpenedParquet:
    file = OpenedParquet(path)
    registry.add(file)  # so `close_all` closes what a stopped read-ahead still holds
    return file


def close_all(registry: weakref.WeakSet) -> None:
    for file in list(registry):
        file.close()


def footer_task(path: str, registry: weakref.WeakSet) -> Task:
    """The task that opens `path` and reads its footer (what `open_ahead` takes)."""
    return Task(("meta", path), lambda: _opened(path, registry), FOOTER_ESTIMATE)


def file_tasks(
    path: str,
    first: int,
    stop: int | None,
    columns_for: ColumnsFor,
    registry: weakref.WeakSet,
    footer: Task | None = None,
) -> Iterator[Task]:
    """The tasks that read row groups `[first, stop)` of `path` (to its end when `stop` is
    None): its footer (`footer`, when one was made, and maybe started, ahead), then each
    row group once the footer says it exists."""
    meta = footer_task(path, registry) if footer is None else footer
    opened: OpenedParquet | None = yield from meta.awaited()
    if opened is None:
        return  # the family takes the error and counts the file as unreadable
    columns = columns_for(opened.schema.names)
    if columns is None:
        return
    wanted = tuple(columns)
    stop = opened.metadata.num_row_groups if stop is None else min(stop, opened.metadata.num_row_groups)
    for index in range(first, stop):
        estimate = opened.metadata.row_group(index).total_byte_size
        yield Task(("rg", path, index), functools.partial(opened.read_row_group, index, wanted, True), estimate)


def pin_file(
    ahead: ReadAhead,
    path: str,
    rows_per_group: dict[int, int],
    columns_for: ColumnsFor,
    registry: weakref.WeakSet,
) -> None:
    """Resume: open `path` once and read the row groups buffered rows need (`row group ->
    rows rebuilt from it`), in one task; its footer and each row group then answer as
    many takes as rows ask for them, errors included."""

    def fetch():
        try:
            opened = _opened(path, registry)
        except Exception as exc:
            return exc, {}
        columns = columns_for(opened.schema.names)
        groups: dict[int, object] = {}
        for index in sorted(rows_per_group) if columns is not None else ():
            try:
                groups[index] = opened.read_row_group(index, tuple(columns or ()))
            except Exception as exc:  # the row's own take raises it, as an inline read would
                groups[index] = exc
        return opened, groups

    def meta(value):
        return _raise_or(value[0])

    def group(index: int):
        return lambda value: _raise_or(value[1].get(index, _MISSING))

    takes: dict = {("meta", path): (meta, sum(rows_per_group.values()))}
    for index, count in rows_per_group.items():
        takes[("rg", path, index)] = (group(index), count)
    ahead.pin(Task(("file", path), fetch, FOOTER_ESTIMATE), takes)


# A row group the pinned fetch did not read (the file lacks the family's columns): read
# inline if a row asks for it after all.
_MISSING = (None, None)


def _raise_or(value):
    if isinstance(value, BaseException):
        raise value
    return value
