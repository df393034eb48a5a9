"""Parquet shard discovery and row-group reading, straight from pyarrow (no pandas)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..distributed import process_group_ready
from ..errors import ConfigError, SkipReason
from ..instruments import seam
from . import storage
from .splits import list_data_files

FILE_ORDERS = ("sorted", "filesystem")
# Rows of a row group turned into Python values at a time (`python_rows`).
READ_ROWS = 128
FileStat = tuple[int, int | None]  # (bytes, modification time in ns) as the listing gave them


def list_parquet_files(data_dir: str, file_order: str = "sorted") -> list[str]:
    """Paths of the `*.parquet` files of `data_dir`.

    `file_order="sorted"` (the default) orders them by name, the same on every machine;
    `"filesystem"` keeps the directory's own order, as the reference did (`os.listdir`),
    which reproduces a reference run on the same filesystem but nowhere else.
    """
    return [path for path, _ in list_parquet_entries(data_dir, file_order)]


def list_parquet_entries(
    data_dir: str, file_order: str = "sorted", suffixes: tuple[str, ...] = (".parquet",), aside: dict | None = None
) -> list[tuple[str, FileStat]]:
    """(path, (size, mtime_ns)) of each `*.parquet` file (each file ending in one of
    `suffixes`) of `data_dir` that is the dataset (its split, or its `data_files`:
    `sources/splits.py`), from one listing: on an object store, one request per 1,000
    files instead of one per file. `aside`: as `list_data_files`'s."""
    if file_order not in FILE_ORDERS:
        raise ConfigError("file_order", file_order, f"use one of {FILE_ORDERS}")
    try:  # no existence check first: on an object store that costs two more requests
        return list_data_files(data_dir, suffixes, sort=file_order == "sorted", aside=aside)
    except FileNotFoundError:
        raise ConfigError("data_dir", data_dir, "the folder does not exist; fix dataset_info") from None
    except OSError as exc:  # e.g. no such bucket, or no access to it
        raise ConfigError("data_dir", data_dir, f"the folder cannot be listed ({exc}); fix dataset_info") from None


def parquet_data_files(
    data_dir_list: Sequence[str], num_sampled_data_paths: Sequence[int], file_order: str = "sorted"
) -> tuple[list[str], dict[str, FileStat]]:
    """`get_parquet_data_paths` of one process (every folder listed here, once each), with
    each distinct file's (size, mtime_ns) from the listing: what a checkpoint records of
    its inputs (checkpoint/inputs.py), known without asking the store for each file."""
    paths: list[str] = []
    stats: dict[str, FileStat] = {}
    listed: dict[str, list[str]] = {}  # a folder named twice is listed once
    for data_dir, num_sampled in zip(data_dir_list, num_sampled_data_paths):
        if data_dir not in listed:
            entries = list_parquet_entries(data_dir, file_order)
            stats.update(entries)
            listed[data_dir] = [path for path, _ in entries]
        paths.extend(repeated_files(data_dir, listed[data_dir], num_sampled))
    return paths, stats


def get_parquet_data_paths(
    data_dir_list: Sequence[str],
    num_sampled_data_paths: Sequence[int],
    rank: int = 0,
    world_size: int = 1,
    file_order: str = "sorted",
) -> list[str]:
    """Each folder's parquet files, repeated in order until `num_sampled` are taken.

    The listing is sorted before truncation so every rank and run sees the same files
    (when `num_sampled` is not a multiple of the file count, the listing order decides
    which files repeat). With `world_size > 1` and a torch.distributed process group, the
    folders are listed by the ranks in turn and the lists are all-gathered, as the
    reference does, so a thousand folders are not listed by every rank.
    """
    folders = list(zip(data_dir_list, num_sampled_data_paths))
    if world_size <= 1 or not process_group_ready():
        return _list_folders(folders, file_order)
    import torch.distributed as dist

    chunk = -(-len(folders) // world_size)
    mine = _list_folders(folders[rank * chunk : (rank + 1) * chunk], file_order)
    gathered: list = [None] * world_size
    dist.all_gather_object(gathered, mine)
    return [path for part in gathered if part for path in part]


def _list_folders(folders, file_order: str) -> list[str]:
    return parquet_data_files([folder for folder, _ in folders], [count for _, count in folders], file_order)[0]


def repeated_files(data_dir: str, files: list[str], num_sampled: int, kind: str = "*.parquet files") -> list[str]:
    """`files` repeated in order until `num_sampled` are taken."""
    if not files:
        raise ConfigError("data_dir", data_dir, f"the folder holds no {kind}")
    repeats = num_sampled // len(files) + 1
    return (files * repeats)[:num_sampled]


def python_rows(
    table: pa.Table, first: int = 0, stop: int | None = None, lost: Callable[[int, int, Exception], None] | None = None
) -> Iterator[tuple[int, dict]]:
    """`(row, {column: value})` of `table`'s rows `[first, stop)`, turned into Python values
    `READ_ROWS` rows at a time. The shuffle keeps several row groups open at once
    (`families/row_share.py`): each then holds its Arrow table and one slice, not a second
    copy of every cell (a row group of 1,000 photos would hold them twice). A slice whose
    cells Python cannot hold (invalid UTF-8 in a string column, which Arrow reads) is handed
    to `lost(first row, rows, error)` and passed over; without `lost` the error is raised."""
    names = table.column_names
    end = table.num_rows if stop is None else min(stop, table.num_rows)
    for start in range(max(first, 0), end, READ_ROWS):
        part = table.slice(start, min(READ_ROWS, end - start))
        try:
            columns = [part.column(name).to_pylist() for name in names]
        except Exception as exc:  # any conversion failure loses the slice, counted by `lost`
            if lost is None:
                raise
            lost(start, part.num_rows, exc)
            continue
        for offset in range(part.num_rows):
            yield start + offset, {name: values[offset] for name, values in zip(names, columns)}


def counted_slices(log, location: str) -> Callable[[int, int, Exception], None]:
    """`python_rows`' `lost` that counts a lost slice's rows as `row_group_unreadable` in
    `log` (a `SkipLog`), at `location` (the file and row group)."""

    def lost(start: int, count: int, exc: Exception) -> None:
        where = f"{location}, rows {start}-{start + count - 1}"
        log.skip(SkipReason.ROW_GROUP_UNREADABLE, where, f"{type(exc).__name__}: {exc}", rows=count)

    return lost


class ParquetReader:
    """Opens one parquet file and reads its row groups as column lists."""

    def __init__(self, path: str):
        self.path = path
        self._handle = storage.open_input(path)
        try:
            self._file = pq.ParquetFile(self._handle)
        except Exception:
            self._handle.close()
            raise

    @property
    def num_row_groups(self) -> int:
        return self._file.num_row_groups

    @property
    def num_rows(self) -> int:
        return self._file.metadata.num_rows

    def row_group_rows(self, index: int) -> int:
        """Rows of row group `index` as the footer declares them."""
        return self._file.metadata.row_group(index).num_rows

    def row_group_bytes(self, index: int) -> int:
        """Uncompressed bytes of row group `index`'s columns, as the footer declares them."""
        return self._file.metadata.row_group(index).total_byte_size

    @property
    def schema(self) -> pa.Schema:
        return self._file.schema_arrow

    @seam("read")
    def read_row_group(self, index: int, columns: Sequence[str]) -> pa.Table:
        return self._file.read_row_group(index, columns=list(columns))

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> ParquetReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_parquet_info(out_dir: str | Path, files: tuple[Path, ...] | None = None, data_dir: str | None = None) -> Path:
    """`out_dir/parquet_info.json` for `files` (default: every `*.parquet` in `out_dir`), read
    back with pyarrow.

    Keys are `os.path.join(data_dir, name)`: the path BAGEL's reader looks each file up by,
    with `data_dir` as the training config's `dataset_info` will say (default: `out_dir`,
    absolute). Run it again with the new `data_dir` after moving the data.
    """
    out_dir = Path(out_dir)
    files = tuple(sorted(out_dir.glob("*.parquet"))) if files is None else files
    key_dir = os.path.abspath(out_dir) if data_dir is None else str(data_dir)
    info = {}
    for path in files:
        meta = pq.read_metadata(path)
        key = storage.join(key_dir, path.relative_to(out_dir).as_posix())
        info[key] = {"num_row_groups": meta.num_row_groups, "num_rows": meta.num_rows}
    target = out_dir / "parquet_info.json"
    target.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return target
