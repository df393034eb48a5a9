"""One file-backed JSONL index per node, built once and mapped by every process.

Every rank and DataLoader worker of a job builds the same index from the same files. The
first process on a node builds it into a folder of `.npy` files under the cache root while
holding a lock file; the others wait on the lock instead of repeating the work, then map the
arrays read-only, so the node's page cache holds one copy. A later run maps them again while
the files are unchanged: the folder's name is a hash of each file's path, size and
modification time and of the settings that choose the kept lines (counts, shuffle, seed,
folders).

The cache root is `$BAGEL_DATA_INDEX_CACHE`, by default `bagel-data-index-cache` in the
system's temporary folder (node-local on most clusters, which is what sharing per node
needs). `BAGEL_DATA_INDEX_CACHE=off` builds the index in memory in every process. The sort's
spilled runs go beside the index while it is built (about the input's size, deleted at the
end): point the root at a local disk, not a memory-backed `tmpfs`.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.format import open_memmap

from . import storage

ENV = "BAGEL_DATA_INDEX_CACHE"
_FORMAT = 1  # part of every key: raise it when the arrays' layout or meaning changes
ARRAYS = (("offsets", np.int64), ("line_numbers", np.int32), ("file_ids", np.int32))

Allocate = Callable[[int], tuple]
Build = Callable[[str, Allocate], tuple]


def cache_root() -> str | None:
    """Where indexes are kept, or None when caching is off."""
    value = os.environ.get(ENV)
    if value is None:
        return os.path.join(tempfile.gettempdir(), "bagel-data-index-cache")
    return None if value.strip().lower() in ("", "off", "0", "none") else value


def _identity(path: str) -> list | None:
    """(path, size, mtime) of an input, or None where the storage gives no modification time."""
    filesystem, inner = storage.resolve(path)
    info = filesystem.get_file_info(inner)
    if info.size is None or info.mtime_ns is None:
        return None
    return [path if storage.is_uri(path) else inner, int(info.size), int(info.mtime_ns)]


def cache_key(paths: Sequence[str], settings: object) -> str | None:
    """The cache folder's name for these inputs, or None when one cannot be told unchanged."""
    files = [_identity(path) for path in paths]
    if any(file is None for file in files):
        return None
    text = json.dumps([_FORMAT, files, settings], default=repr, sort_keys=True)
    return "jsonl-" + hashlib.sha256(text.encode()).hexdigest()[:32]


def open_arrays(folder: str) -> tuple:
    """The arrays of a finished index folder, mapped read-only."""
    return tuple(np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="r") for name, _ in ARRAYS)


def _open(folder: str) -> tuple | None:
    return open_arrays(folder) if os.path.isdir(folder) else None


def in_memory(work_parent: str | None, build: Build) -> tuple:
    """The arrays built in this process's memory (runs spilled to a temporary folder)."""
    if work_parent:
        os.makedirs(work_parent, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bagel-jsonl-", dir=work_parent) as work:
        return build(work, lambda n: tuple(np.empty(n, dtype) for _, dtype in ARRAYS))


def mapped(root: str, key: str, build: Build) -> tuple[tuple, str]:
    """The arrays of `key` mapped read-only from `root` (built first by one process per node),
    and their folder."""
    final = os.path.join(root, key)
    arrays = _open(final)  # built before: no lock needed, the folder appears complete or not at all
    if arrays is not None:
        return arrays, final
    os.makedirs(root, exist_ok=True)
    with open(final + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other processes of the node wait here
        try:
            if not os.path.isdir(final):
                _build_into(final, build)
        finally:
            # Mapped after the lock is let go: the waiters, woken one at a time, each hold
            # it only to see that the folder is there, not while they map it.
            fcntl.flock(lock, fcntl.LOCK_UN)
    arrays = _open(final)
    assert arrays is not None
    return arrays, final


def _build_into(final: str, build: Build) -> None:
    for stale in glob.glob(glob.escape(final) + ".tmp-*"):  # left by a builder that died
        shutil.rmtree(stale, ignore_errors=True)
    work = f"{final}.tmp-{os.getpid()}"
    os.makedirs(work)
    try:

        def allocate(n: int) -> tuple:
            return tuple(
                open_memmap(os.path.join(work, f"{name}.npy"), mode="w+", dtype=dtype, shape=(n,))
                for name, dtype in ARRAYS
            )

        arrays = build(os.path.join(work, "runs"), allocate)
        for array in arrays:
            if isinstance(array, np.memmap):
                array.flush()
        del arrays
        shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)
        os.rename(work, final)  # atomic: readers see the whole folder or none
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
