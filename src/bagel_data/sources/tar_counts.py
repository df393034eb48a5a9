"""Per-tar sample counts, written once beside the tars and read with one request.

A tar's sample count is only known by reading the whole tar, so tars on an object store
would all be read before the first draw of the walk by rows. The counts instead come from
a shard index already in the data folder, read with one GET:

- `wids-index.json`: webdataset's `wids` shard list, `{"__kind__": "wids-shard-index-v1",
  "wids_version": 1, "shardlist": [{"url": NAME, "nsamples": N, "filesize": BYTES}, ...]}`
  (`url` relative to the folder). `bagel-data prepare tar-counts` writes this one, so
  `wids.ShardListDataset` reads the same file.
- `.nv-meta/.info.yaml`: Megatron-Energon's dataset info, whose `shard_counts` maps each
  tar's path (relative to the folder) to its sample count.

The counts are used only when they fit the folder's listing (`check`): a listed tar with no
count, a count for a tar the folder no longer holds, a tar newer than the counts file or of
another size than the file says means they are stale, and the group keeps the walk by
whole tars with a warning naming the command that refreshes them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence

import yaml

from . import storage

COUNTS_NAME = "wids-index.json"
ENERGON_FOLDER = ".nv-meta"
ENERGON_INFO = ".nv-meta/.info.yaml"
WIDS_KIND = "wids-shard-index-v1"

FileStat = tuple[int, int | None]


@dataclasses.dataclass(frozen=True)
class FolderCounts:
    """One folder's counts file: its path, each tar's samples and (where given) bytes, keyed
    by the tar's full path, and the file's modification time (None: unknown)."""

    source: str
    counts: dict[str, int]
    sizes: dict[str, int]
    mtime_ns: int | None


class CountMismatch(ValueError):
    """A tar holds another number of samples than its counts file says."""


def check_count(path: str, found: int, counted: int | None) -> None:
    """Raise `CountMismatch` when tar `path`'s index holds `found` samples, not `counted`
    (None: no count to check)."""
    if counted is not None and found != counted:
        raise CountMismatch(
            f"{path} holds {found} samples, its counts file says {counted}: the counts are stale; "
            f"run `{refresh_command(_folder(path))}`"
        )


def per_block(count: int, size: int, block_bytes: int) -> int:
    """Samples per block of a tar whose count comes from a counts file: about `block_bytes`
    (the tar index's block size) of it on average, from its count and listed size alone
    (known before it is read)."""
    return max(1, min(count, block_bytes * count // max(size, 1)))


def counted_step(counted: int | None, listed: FileStat | None, block_bytes: int) -> int | None:
    """A tar's samples per block from its count and listed size; None without either."""
    return None if counted is None or listed is None else per_block(counted, listed[0], block_bytes)


def counted_blocks(count: int, size: int, block_bytes: int) -> tuple[int, ...]:
    """The samples of each block of a counted tar of `count` samples and `size` bytes."""
    step = per_block(count, size, block_bytes)
    return tuple(min(step, count - first) for first in range(0, count, step))


def refresh_command(folder: str) -> str:
    return f"bagel-data prepare tar-counts {folder}"


def _folder(path: str) -> str:
    return path.rsplit("/", 1)[0] if storage.is_uri(path) else os.path.dirname(path)


def _full(folder: str, name: str) -> str:
    if storage.is_uri(name) or os.path.isabs(name):
        return name
    return storage.join(folder, posixpath.normpath(name))


def _read_text(path: str) -> str:
    """The file's text: on a store one GET (and the HEAD pyarrow sends before a read)."""
    if not storage.is_uri(path):
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    filesystem, inner = storage.resolve(path)
    with filesystem.open_input_stream(inner) as stream:
        return stream.read().decode("utf-8")


def parse_wids(folder: str, source: str, text: str, mtime_ns: int | None) -> FolderCounts:
    shards = json.loads(text).get("shardlist")
    if not isinstance(shards, list):
        raise ValueError(f"{source} has no shardlist list")
    counts = {_full(folder, str(shard["url"])): int(shard["nsamples"]) for shard in shards}
    sizes = {_full(folder, str(shard["url"])): int(shard["filesize"]) for shard in shards if "filesize" in shard}
    return FolderCounts(source, counts, sizes, mtime_ns)


def parse_energon(folder: str, source: str, text: str, mtime_ns: int | None) -> FolderCounts:
    shard_counts = (yaml.safe_load(text) or {}).get("shard_counts")
    if not isinstance(shard_counts, dict):
        raise ValueError(f"{source} has no shard_counts mapping")
    return FolderCounts(source, {_full(folder, str(k)): int(v) for k, v in shard_counts.items()}, {}, mtime_ns)


def read_folder_counts(folder: str, listing: Sequence | None = None) -> FolderCounts | None:
    """The counts file of `folder`, None when it holds none. Its presence and time come from
    the folder's listing (`listing`, the dataset's own: no request more); reading it is one
    GET (and a HEAD for Energon's, whose time a store's listing of `.nv-meta/` does not give)."""
    if listing is None:
        listing = storage.list_entries(folder, sort=False)
    entries = {entry.name: entry for entry in listing}
    if COUNTS_NAME in entries:
        source = storage.join(folder, COUNTS_NAME)
        entry = entries[COUNTS_NAME]
        return parse_wids(folder, source, _read_text(source), entry.mtime_ns)
    if ENERGON_FOLDER in entries:
        source = storage.join(folder, ENERGON_INFO)
        try:
            mtime = _mtime(source)
            return parse_energon(folder, source, _read_text(source), mtime)
        except FileNotFoundError:
            return None
    return None


def _mtime(path: str) -> int | None:
    if not storage.is_uri(path):
        return os.stat(path).st_mtime_ns
    filesystem, inner = storage.resolve(path)
    info = filesystem.get_file_info(inner)
    if info.type.name == "NotFound":
        raise FileNotFoundError(path)
    return info.mtime_ns


@dataclasses.dataclass(frozen=True)
class GroupCounts:
    """A group's tar counts: `counts` (each tar's samples) when they fit every folder's
    listing, else `problem` (why not, with the command that refreshes them); both empty
    when no folder holds a counts file."""

    counts: dict[str, int]
    problem: str | None = None


def group_counts(
    tars: Sequence[str], listed: Mapping[str, FileStat], entries: Mapping[str, Sequence] | None = None
) -> GroupCounts:
    """The counts of tars `tars` (each tar's (size, mtime_ns) in `listed`, which holds every
    tar the folders list), one counts file per folder; `entries`: folders' listings already
    taken, by folder."""
    folders = sorted({_folder(path) for path in tars})
    taken = {_folder(storage.join(str(folder), "x")): listing for folder, listing in (entries or {}).items()}
    found: dict[str, int] = {}
    for folder in folders:
        try:
            read = read_folder_counts(folder, taken.get(folder))
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
            return GroupCounts({}, f"the tar counts of {folder} cannot be read ({exc}); {fix(folder)}")
        if read is None:
            if found:
                return GroupCounts({}, f"{folder} holds no tar counts file; {fix(folder)}")
            continue
        problem = check(folder, read, [path for path in listed if _folder(path) == folder], listed)
        if problem is not None:
            return GroupCounts({}, problem)
        found.update(read.counts)
    if found and any(path not in found for path in tars):
        return GroupCounts({}, f"some folders of the group hold no tar counts file; {fix(folders[0])}")
    return GroupCounts({path: found[path] for path in tars} if found else {})


def check(folder: str, read: FolderCounts, tars: Iterable[str], listed: Mapping[str, FileStat]) -> str | None:
    """Why `read` does not fit the folder's listed tars `tars`; None when it does."""
    tars = sorted(tars)
    missing = [path for path in tars if path not in read.counts]
    extra = sorted(path for path in read.counts if path not in listed)
    written = read.mtime_ns
    newer = [path for path in tars if written is not None and (listed[path][1] or 0) > written]
    resized = [path for path in tars if path in read.sizes and read.sizes[path] != listed[path][0]]
    for found, what in (
        (missing, "has no count for"),
        (extra, "counts tars the folder does not hold:"),
        (newer, "is older than"),
        (resized, "gives another size for"),
    ):
        if found:
            shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
            return f"the tar counts file {read.source} {what} {shown}: the counts are stale; {fix(folder)}"
    return None


def fix(folder: str) -> str:
    return (
        "the group is walked by whole tars, so samples of short tars are drawn more often. "
        f"Fix: run `{refresh_command(folder)}`"
    )


def wids_index(folder: str, counts: Mapping[str, int], sizes: Mapping[str, int]) -> dict:
    """The `wids` shard list of `folder`'s tars (urls relative to the folder)."""
    shards = [
        {"url": posixpath.relpath(path, folder) if not storage.is_uri(path) else path[len(folder) + 1 :],
         "nsamples": int(counts[path]), "filesize": int(sizes[path])}
        for path in sorted(counts)
    ]  # fmt: skip
    return {
        "__kind__": WIDS_KIND,
        "wids_version": 1,
        "name": posixpath.basename(folder.rstrip("/")),
        "shardlist": shards,
    }
