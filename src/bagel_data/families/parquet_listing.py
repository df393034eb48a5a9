"""Which files a parquet group listed (`ParquetListing`), so that a reference position can
be checked against the files the reference would have listed in its own order.

The units themselves are the unit kinds' (`families/unit_kinds.py`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools

from ..sources import storage
from ..sources.parquet import parquet_data_files


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

    @functools.cached_property  # lists the folders again: once
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
