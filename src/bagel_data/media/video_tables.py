"""Remote videos' FrameTables kept on the node, so each file is demuxed once per node.

Matroska and WebM carry no per-packet index: counting their frames means demuxing every
packet, and on an object store that fetches the whole file. The first process on a node
that needs a remote file's table demuxes it (one build under the node's lock,
`node_cache.build_shared`) and writes the table beside the JSONL indexes (`$BAGEL_DATA_INDEX_CACHE`, sources/node_cache.py); the node's
other processes, and later runs, read it there and fetch only what they decode.

The Cues and the track's DefaultDuration would give a count without the demux, but not an
exact one: a stream that declares a frame duration may still drop or repeat frames between
two cue points, and nothing short of reading the blocks in between shows it. A wrong count
picks other frames than decoding from the start, so the count is always demuxed, once.

A table is keyed by the path, the object's size and modification time (where its store
tells one) and a hash of its first and last 16 KiB (Matroska's header and its Cues, which
any remux rewrites). A table file that does not read back whole is built again.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import threading
import zipfile
from collections.abc import Callable
from typing import BinaryIO

import numpy as np

from ..errors import StorageOptionsError
from ..sources import node_cache, storage
from .video_probe import FrameTable

FOLDER = "video-tables"
_FORMAT = 2  # part of every key: raise it when the stored arrays' layout or meaning changes
_ENDS = 1 << 14

_COUNTS: collections.Counter[str] = collections.Counter()
_COUNTS_LOCK = threading.Lock()


def table_counts() -> dict[str, int]:
    """This process's remote tables: `demuxed` here, `shared` (read from the node's cache),
    `damaged` (a cached table that did not read back, built again), `unshared` (demuxed
    with the cache off or unusable), `unstored` (demuxed, but the cache could not store it:
    a full disk, a quota, a file-size limit)."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)


def _count(key: str) -> None:
    with _COUNTS_LOCK:
        _COUNTS[key] += 1


def shared_table(path: str, handle: BinaryIO, demux: Callable[[], FrameTable]) -> FrameTable:
    """The table of the remote video `path` (open as `handle`) from the node's cache, or
    `demux()`-ed and stored there by the one process of the node that gets the lock
    (`node_cache.build_shared`). Where the cache cannot be used or written (off, unsafe, a
    full disk), the table is demuxed and kept in this process only, with one warning."""
    folder = node_cache.shared_folder(FOLDER)
    if folder is None:
        _count("unshared")
        return demux()
    file = os.path.join(folder, table_key(path, handle) + ".npz")
    demuxed: list[FrameTable] = []

    def write(work: str) -> None:
        demuxed.append(demux())
        _count("demuxed")
        write_table(work, demuxed[0])

    try:
        table = node_cache.build_shared(file, read_table, write)
    except OSError as error:  # ENOSPC, EDQUOT, EFBIG, a read-only mount: the table is good, only not shared
        return _unstored(folder, error, demuxed[0] if demuxed else demux())
    if not demuxed:
        _count("shared")
    return table


def _unstored(folder: str, error: OSError, table: FrameTable) -> FrameTable:
    """`table`, counted `unstored`, after one warning per folder that it cannot be stored."""
    _count("unstored")
    node_cache.warn_once(
        folder,
        f"remote video frame tables cannot be stored in {folder} ({error.strerror or error}); "
        f"each process keeps its own in memory. Set {node_cache.ENV} to a folder with room",
    )
    return table


def table_key(path: str, handle: BinaryIO) -> str:
    """The cache file's name for the video `path`, open as `handle` (left at its start)."""
    size = handle.seek(0, io.SEEK_END)
    handle.seek(0)
    head = handle.read(_ENDS)
    handle.seek(max(size - _ENDS, 0))
    tail = handle.read(_ENDS)
    handle.seek(0)
    digest = hashlib.sha256(json.dumps([_FORMAT, path, size, _modified_ns(path)]).encode())
    digest.update(head)
    digest.update(tail)
    return "video-" + digest.hexdigest()[:32]


def _modified_ns(path: str) -> int | None:
    """The object's modification time where its store tells one (None: the key then rests
    on the size and the sampled bytes)."""
    try:
        filesystem, inner = storage.resolve(path)
        modified = filesystem.get_file_info(inner).mtime_ns
    except (OSError, StorageOptionsError):
        return None
    return None if modified is None else int(modified)


def write_table(file: str, table: FrameTable) -> None:
    """Store `table` at `file` (`build_shared` writes it aside and publishes it whole)."""
    pts = table.frame_pts
    # Steps rather than timestamps: a constant-rate stream's steps compress to almost nothing.
    steps = np.diff(pts, prepend=np.int64(0)) if pts is not None else np.zeros(0, np.int64)
    header = np.asarray([_FORMAT, table.count, pts is not None], np.int64)
    with open(file, "wb") as out:
        np.savez_compressed(out, header=header, rate=np.asarray([table.rate]), steps=steps, seek=table.seek_pts)


def read_table(file: str) -> FrameTable | None:
    """The table stored at `file`; None when there is none or it does not read back whole
    (a damaged one is counted and built again over it)."""
    try:
        with node_cache.NPY_READ_LOCK, np.load(file, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in ("header", "rate", "steps", "seek")}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        _count("damaged")
        return None
    table = _checked(**arrays)
    if table is None:
        _count("damaged")
    return table


def _checked(header: np.ndarray, rate: np.ndarray, steps: np.ndarray, seek: np.ndarray) -> FrameTable | None:
    """The table these arrays hold if they have the written shapes and meaning, else None."""
    if header.shape != (3,) or rate.shape != (1,) or steps.ndim != 1 or seek.ndim != 1:
        return None
    if any(array.dtype != np.int64 for array in (header, steps, seek)) or rate.dtype != np.float64:
        return None
    version, count, has_pts = (int(value) for value in header)
    if version != _FORMAT or count < 0 or has_pts not in (0, 1) or not np.isfinite(rate[0]) or rate[0] <= 0:
        return None
    if np.any(np.diff(seek) < 0) or np.any(steps[1:] < 0) or (not has_pts and len(steps)):
        return None
    if has_pts and count != len(steps):  # the count is the number of shown frames' timestamps
        return None
    frame_pts = np.cumsum(steps) if has_pts else None
    return FrameTable(count, float(rate[0]), frame_pts, seek.astype(np.int64))
