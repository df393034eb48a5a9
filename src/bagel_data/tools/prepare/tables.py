"""Tables as prepare input (Hugging Face `datasets` exports, img2dataset parquet, and
`save_to_disk` folders, whose Arrow IPC files stand in for parquet: a record batch for a
row group):
the files of a source, one `TableRow` per row that names where it lies (not its bytes, so
a listing of millions of rows stays small and travels cheaply to Ray workers), and the
row's cells read back a row group at a time.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import ConfigError
from ...sources.hub_tables import ARROW, arrow_files, is_save_to_disk, read_arrow
from ...sources.splits import choose_split
from .common import IMAGE_SUFFIXES, Rows


class TableRow(NamedTuple):
    """Row `position` of row group `group` of `file`; a tuple holding a Path, so the engine's
    input digest notes the file's size and time (a rewritten file is redone on resume)."""

    file: Path
    group: int
    position: int  # within the row group


def parquet_files(source: Path, split: str | None = None) -> list[Path]:
    """`source` if it is a `.parquet` file; the `.parquet` files under a folder (any depth,
    as the Hub lays out `data/train-*.parquet`) of `split` (default train; the folder's
    split rule: `sources/splits.py`) when it holds no image files; else none: an
    img2dataset folder keeps `.parquet` metadata beside its images, and those are not rows."""
    if source.is_file():
        return [source] if source.suffix.lower() in (".parquet", ARROW) else []
    if not source.is_dir():
        return []
    if is_save_to_disk(source):  # `datasets.Dataset.save_to_disk`: its Arrow files are the rows
        return arrow_files(source)
    files = sorted(path for path in source.rglob("*") if path.is_file())
    if any(path.suffix.lower() in IMAGE_SUFFIXES for path in files):
        return []
    tables = {path.relative_to(source).as_posix(): path for path in files if path.suffix.lower() == ".parquet"}
    return [tables[name] for name in choose_split(list(tables), split, str(source))] if tables else []


def read_schema(file: Path) -> pa.Schema:
    """The file's schema, from its footer alone; a file that is not parquet is a ConfigError."""
    try:
        return read_arrow(file).schema if file.suffix == ARROW else pq.read_schema(file)
    except (OSError, pa.ArrowException) as exc:
        raise ConfigError("source", str(file), f"not a readable parquet file: {exc}") from None


def table_rows(files: list[Path]) -> Rows:
    """One row per table row, in file then row order, located `file:row` (row from 0)."""
    rows: Rows = []
    for file in files:
        try:
            counts = _group_rows(file)
        except (OSError, pa.ArrowException) as exc:
            raise ConfigError("source", str(file), f"not a readable parquet file: {exc}") from None
        first = 0
        for group, count in enumerate(counts):
            rows += [(f"{file.name}:{first + index}", TableRow(file, group, index)) for index in range(count)]
            first += count
    return rows


def read_cells(row: TableRow, columns: tuple[str, ...]) -> dict:
    """The `columns` cells of `row`, as Python values."""
    stamp = row.file.stat().st_mtime_ns  # a file rewritten since is read again
    return {column: values[row.position] for column, values in _row_group(row.file, row.group, columns, stamp).items()}


def _group_rows(file: Path) -> list[int]:
    """Rows of each row group (an Arrow file's: of each record batch)."""
    if file.suffix == ARROW:
        return [batch.num_rows for batch in read_arrow(file).to_batches()]
    meta = pq.read_metadata(file)
    return [meta.row_group(group).num_rows for group in range(meta.num_row_groups)]


@functools.lru_cache(maxsize=2)
def _row_group(file: Path, group: int, columns: tuple[str, ...], stamp: int) -> dict[str, list]:
    """Rows come in file order, so one row group is read once for all of its rows."""
    if file.suffix == ARROW:
        batch = read_arrow(file).to_batches()[group]
        return {column: batch.column(column).to_pylist() for column in columns}
    table = pq.ParquetFile(file).read_row_group(group, columns=list(columns))
    return {column: table.column(column).to_pylist() for column in columns}
