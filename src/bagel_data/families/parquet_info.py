"""An edit group's `parquet_info`: finding a file's entry, and checking it against the
file's footer (a stale entry would read part of a file, or ask for row groups it lacks)."""

from __future__ import annotations

import os

from ..errors import ConfigError
from ..sources import storage
from ..sources.parquet import ParquetReader


def check_row_groups(path: str, declared: int) -> None:
    """ConfigError when `parquet_info` disagrees with the file's footer (a stale entry
    would silently read part of the file, or ask for row groups that do not exist)."""
    try:
        with ParquetReader(path) as reader:
            actual = reader.num_row_groups
    except Exception:  # an unreadable file is a counted skip when it is read
        return
    if actual != declared:
        raise stale_row_groups(path, declared, actual)


def stale_row_groups(path: str, declared: int, actual: int) -> ConfigError:
    return ConfigError(
        "parquet_info",
        f"{path}: num_row_groups={declared}",
        f"the file has {actual} row groups; regenerate parquet_info (`bagel-data prepare edit`)",
    )


def parquet_info_entry(parquet_info: dict, path: str, data_dir: str):
    """The `parquet_info` entry of `path`: keyed by that path (BAGEL's reader needs this), by
    the name relative to `data_dir`, or by a full path of the folder it was moved from (the
    only key that ends with `/<name>`)."""
    found = parquet_info.get(path)
    if found is not None:
        return found
    name = os.path.relpath(path, data_dir) if not storage.is_uri(path) else path[len(data_dir.rstrip("/")) + 1 :]
    found = parquet_info.get(name)
    if found is not None:
        return found
    moved = [key for key in parquet_info if key.replace("\\", "/").endswith("/" + name.replace(os.sep, "/"))]
    return parquet_info[moved[0]] if len(moved) == 1 else None
