"""Row counts of a group's remote files, read once per node: what the walk by rows needs.

The walk by rows (`families/row_plan.py`) lays a group's rows end to end, so it needs every
file's row counts (a parquet footer's row groups) before its first draw. On an object store
a footer is a request or two; read by every worker of every rank at start-up that is a
request per file per worker. Here the first process of a node reads them (on a few threads,
so 1,000 footers cost about 1,000 / THREADS round trips) and publishes them in the node
cache (`sources/node_cache.build_shared`); every other rank and worker of the node reads
that one file and sends no request.

The cache key is the files' *listing identity*: each file's path, size and the modification
time its store set, from the folder's listing (no request), which no user can set back (a
local file's can be, so local files are read in each process as before: a local footer costs
no round trip). A file the listing gave no time for, or the cache off or unwritable, reads
the counts in this process instead (on the same threads). A file whose footer cannot be read
is None: one row, whose read counts the skip (`row_plan.row_layout`). Such a failure may be
passing (a dropped connection): it is tried once more, warned about by name, and never
published, so the node's other processes read that file's footer themselves.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence

import pyarrow.parquet as pq

from ..errors import ConfigWarning
from ..sources import node_cache, storage
from ..sources.parquet import FileStat

# Footers read at once by the node's first process: round trips overlap, memory is a footer each.
THREADS = 16
FOLDER = "row-counts"
_FORMAT = 1

Counts = tuple[int, ...] | None  # rows of each block of a file (None: unreadable)
ReadCounts = Callable[[str], Counts]


def remote_counts(kind: str, paths: Sequence[str], listed: Mapping[str, FileStat], read: ReadCounts) -> dict:
    """`{path: counts}` for each distinct remote path of `paths`, each file read at most once
    per node (`read(path)`, on THREADS threads); `kind` names what is counted (part of the key)."""
    wanted = sorted({str(path) for path in paths if storage.is_remote(str(path))})
    if not wanted:
        return {}
    identity = [[path, *listed[path]] for path in wanted if path in listed and listed[path][1] is not None]
    folder = node_cache.shared_folder(FOLDER) if len(identity) == len(wanted) else None
    if folder is None:
        return _read_checked(wanted, read)
    text = json.dumps([_FORMAT, kind, identity], sort_keys=True)
    final = os.path.join(folder, f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:32]}.json")

    def load(file: str) -> dict | None:
        return _load(file, identity)

    def write(work: str) -> None:
        counts = _read_checked(wanted, read)
        if any(counts[path] is None for path in wanted):
            raise _Unpublished(counts)  # a failure may pass: not kept for the whole node
        with open(work, "w", encoding="utf-8") as handle:
            json.dump({"files": identity, "counts": [counts[path] for path in wanted]}, handle)

    try:
        return node_cache.build_shared(final, load, write)
    except _Unpublished as unpublished:
        return unpublished.counts
    except OSError as error:
        if not node_cache.cannot_write(error):
            raise
        return _read_checked(wanted, read)


class _Unpublished(Exception):
    def __init__(self, counts: dict):
        super().__init__("some row counts could not be read")
        self.counts = counts


def _read_checked(paths: Sequence[str], read: ReadCounts) -> dict:
    """`read_all`, the files that could not be read tried once more, and a warning naming
    those that still cannot: each is one position of the walk by rows (its read counts the
    skip; should it read then, only its first row is drawn)."""
    counts = read_all(paths, read)
    failed = [path for path in paths if counts[path] is None]
    if failed:
        counts.update(read_all(failed, read))
        failed = [path for path in failed if counts[path] is None]
    if failed:
        shown = ", ".join(failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
        warnings.warn(
            f"the row counts of {len(failed)} file(s) could not be read ({shown}); each is one position of the "
            "walk by rows this run. Fix: check that the files are readable parquet files, and restart",
            ConfigWarning,
            stacklevel=4,
        )
    return counts


def footer_counts(path: str) -> Counts:
    """The rows of each row group of parquet file `path` from its footer (on a store, a HEAD
    and a ranged GET of the tail); None when it cannot be read."""
    try:
        with storage.open_input(path) as handle:
            metadata = pq.ParquetFile(handle).metadata
            return tuple(metadata.row_group(group).num_rows for group in range(metadata.num_row_groups))
    except Exception:  # any pyarrow or I/O failure: unknown, never a wrong count
        return None


def read_all(paths: Sequence[str], read: ReadCounts) -> dict:
    """`{path: read(path)}`, on up to THREADS threads."""
    if len(paths) <= 1:
        return {path: read(path) for path in paths}
    with concurrent.futures.ThreadPoolExecutor(min(THREADS, len(paths))) as pool:
        return dict(zip(paths, pool.map(read, paths)))


def _load(file: str, identity: list) -> dict | None:
    """The counts stored in `file` for exactly these files; None when it is not whole or
    not theirs (then it is built again)."""
    try:
        with open(file, encoding="utf-8") as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("files") != identity:
        return None
    counts = stored.get("counts")
    if not isinstance(counts, list) or len(counts) != len(identity):
        return None
    found: dict = {}
    for (path, *_), entry in zip(identity, counts):
        if entry is not None and not (
            isinstance(entry, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in entry)
        ):
            return None
        found[path] = None if entry is None else tuple(entry)
    return found
