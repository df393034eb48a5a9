"""One file-backed JSONL index per node, built once and mapped by every process.

Every rank and DataLoader worker of a job builds the same index from the same files. The
first process on a node builds it into a folder of `.npy` files under the cache root while
holding a lock file; the others wait on the lock instead of repeating the work, then map the
arrays read-only, so the node's page cache holds one copy. A later run maps them again while
the files are unchanged.

The folder's name is a hash of the settings that choose the kept lines (counts, shuffle,
seed, folders) and of each file's path, size and modification time, its inode and change
time (a rewrite in place changes those even where `cp -p` or `rsync -a` put the mtime back),
and a sampled digest of its content (`content_stamp`: whole up to 256 KiB, else head, tail
and 16 blocks; about 200 KiB read per file, whatever its size).

The folders live under the node's cache root (`node_cache`: a per-user folder others cannot
write; where it is unsafe or cannot be written, the index is built in memory, with one warning
per root). A folder's arrays are checked before they are used (header, type, length,
sampled values against the inputs), and a damaged folder is built again.
`BAGEL_DATA_INDEX_CACHE=off` (any case) builds the index in memory in every process. The
sort's spilled runs go beside the index while it is built (about the input's size, deleted
at the end): point the root at a local disk, not a memory-backed `tmpfs`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.format import open_memmap

from . import content_stamp, node_cache, storage
from .node_cache import ENV, cache_root  # ENV: also the name the callers set

_FORMAT = 2  # part of every key: raise it when the arrays' layout or meaning changes
ARRAYS = (("offsets", np.int64), ("line_numbers", np.int32), ("file_ids", np.int32))
_CHECKED_ENTRIES = 1024  # entries of each folder checked against the inputs before use

# `allocate(*lengths)`: the kind's arrays, one length each (one length: the same for all).
Allocate = Callable[..., tuple]
Build = Callable[[str | None, Allocate], tuple]  # (where runs spill, None: nowhere; allocate)


@dataclasses.dataclass(frozen=True)
class IndexKind:
    """What one kind of index keeps: its name (the folders' prefix, and what a warning calls
    it), its arrays `(name, dtype)`, and `fits(arrays, sizes)`: whether a finished folder's
    arrays are whole and fit the inputs (`sizes`: each input's bytes), checked before use.
    A tar's member index (`sources/tar_index.py`) is another kind."""

    name: str
    arrays: tuple
    fits: Callable[[tuple, Sequence[int]], bool]


def _identity(path: str) -> list | None:
    """What tells an input unchanged, or None where the storage gives no modification time."""
    filesystem, inner = storage.resolve(path)
    info = filesystem.get_file_info(inner)
    if info.size is None or info.mtime_ns is None:
        return None
    size = int(info.size)
    try:
        digest = content_stamp.content_digest(path, size, whole_limit=1 << 18, ends=1 << 16, blocks=16)
        local = content_stamp.local_identity(inner if not storage.is_uri(path) else path)
    except OSError:
        return None  # the build reads it and reports what is wrong
    return [path if storage.is_uri(path) else inner, size, int(info.mtime_ns), local, digest]


def cache_key(paths: Sequence[str], settings: object, kind: IndexKind | None = None) -> str | None:
    """The cache folder's name for these inputs, or None when one cannot be told unchanged."""
    return _key([_identity(path) for path in paths], settings, kind or JSONL)


def _key(files: list, settings: object, kind: IndexKind) -> str | None:
    if any(file is None for file in files):
        return None
    text = json.dumps([_FORMAT, files, settings], default=repr, sort_keys=True)
    return f"{kind.name}-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def open_arrays(folder: str, kind: IndexKind | None = None) -> tuple:
    """The arrays of a finished index folder, mapped read-only."""
    names = (kind or JSONL).arrays
    with node_cache.NPY_READ_LOCK:
        return tuple(np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="r") for name, _ in names)


def checked_arrays(folder: str, sizes: Sequence[int], kind: IndexKind | None = None) -> tuple | None:
    """The folder's arrays if they are whole and fit the inputs (`sizes`: each file's bytes),
    else None. A crash, a full disk or a hand can leave a truncated, empty or garbage file."""
    kind = kind or JSONL
    try:
        arrays = open_arrays(folder, kind)
    except (OSError, ValueError, EOFError):
        return None
    if any(array.ndim != 1 or array.dtype != dtype for array, (_, dtype) in zip(arrays, kind.arrays)):
        return None
    return arrays if kind.fits(arrays, sizes) else None


def _jsonl_fits(arrays: tuple, sizes: Sequence[int]) -> bool:
    """One entry per line in every array; sampled entries name a file and lie inside it."""
    if len({len(array) for array in arrays}) != 1:
        return False
    offsets, line_numbers, file_ids = (np.asarray(array) for array in arrays)
    picks = np.unique(np.linspace(0, len(offsets) - 1, min(len(offsets), _CHECKED_ENTRIES)).astype(np.int64))
    files, starts = file_ids[picks], offsets[picks]
    return not len(picks) or not (
        files.min() < 0
        or files.max() >= len(sizes)
        or starts.min() < 0
        or line_numbers[picks].min() < 0
        or np.any(starts >= np.asarray(sizes, np.int64)[np.clip(files, 0, len(sizes) - 1)])
    )


JSONL = IndexKind("jsonl", ARRAYS, _jsonl_fits)


def in_memory(work_parent: str | None, build: Build, kind: IndexKind | None = None) -> tuple:
    """The arrays built in this process's memory, the sort's runs spilled to a temporary
    folder; where that folder cannot be written (full, over a quota or a file-size limit,
    read-only), sorted in memory without spilling, with one warning."""
    allocate = functools.partial(_empty, (kind or JSONL).arrays)
    folder = work_parent or tempfile.gettempdir()
    try:
        if work_parent:
            os.makedirs(work_parent, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="bagel-jsonl-", dir=work_parent) as work:
            return build(work, allocate)
    except OSError as error:
        if not node_cache.cannot_write(error):
            raise
        node_cache.warn_once(
            f"spill:{folder}",
            f"the JSONL index's sort cannot spill to {folder} ({error.strerror or error}): it is sorted in "
            "memory instead, which holds every kept line's key at once; point TMPDIR at a disk with room",
        )
    return build(None, allocate)


def _empty(arrays: tuple, *lengths: int) -> tuple:
    return tuple(np.empty(n, dtype) for (_, dtype), n in zip(arrays, _lengths(arrays, lengths)))


def _lengths(arrays: tuple, lengths: tuple) -> tuple:
    return lengths * len(arrays) if len(lengths) == 1 else lengths


def index_arrays(
    paths: Sequence[str],
    settings: object,
    build: Build,
    kind: IndexKind | None = None,
    identities: Sequence[list] | None = None,
) -> tuple[tuple, str | None]:
    """The index's arrays, and the folder they are mapped from (None: built in memory).
    `identities`: what tells each input unchanged, where the caller knows it already (a
    remote tar's listing: `tar_index.listed_identity`); its second item is the size."""
    kind = kind or JSONL
    root = cache_root()
    if root is None or not paths:
        return in_memory(None, build, kind), None
    files = list(identities) if identities is not None else [_identity(path) for path in paths]
    key = _key(files, settings, kind)
    if key is None:
        return in_memory(None, build, kind), None
    trouble = node_cache.root_trouble(root)
    if trouble is None:
        try:
            return mapped(root, key, build, [file[1] for file in files], kind)  # type: ignore[index]
        except OSError as error:
            trouble = f"it cannot be written ({error.strerror or error}); set {ENV} to a folder with room"
    label = "JSONL" if kind is JSONL else kind.name
    node_cache.warn_once(root, f"the {label} index cache {root} is not used: {trouble}. The index is built in memory.")
    return in_memory(None, build, kind), None


def mapped(root: str, key: str, build: Build, sizes: Sequence[int], kind: IndexKind | None = None) -> tuple[tuple, str]:
    """The arrays of `key` mapped read-only from `root` (built first by one process per node,
    `node_cache.build_shared`), and their folder. `sizes`: each input's bytes, to check a
    finished folder against."""
    kind = kind or JSONL
    final = os.path.join(root, key)

    def read(folder: str) -> tuple | None:
        return checked_arrays(folder, sizes, kind) if os.path.isdir(folder) else None

    return node_cache.build_shared(final, read, lambda work: _build_into(work, build, kind)), final


def _build_into(work: str, build: Build, kind: IndexKind) -> None:
    """The index's arrays written into the folder `work`, the sort's runs spilled beside them."""
    os.makedirs(work)

    def allocate(*lengths: int) -> tuple:
        return tuple(
            open_memmap(os.path.join(work, f"{name}.npy"), mode="w+", dtype=dtype, shape=(n,))
            for (name, dtype), n in zip(kind.arrays, _lengths(kind.arrays, lengths))
        )

    arrays = build(os.path.join(work, "runs"), allocate)
    for array in arrays:
        if isinstance(array, np.memmap):
            array.flush()
    del arrays
    shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)
