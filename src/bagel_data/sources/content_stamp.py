"""A digest of an input file's content, at a bounded cost, for telling it unchanged.

Modification times lie: `cp -p`, `rsync -a` and `tar -x` restore them, so a file rewritten
in place at the same size looks untouched by its size and mtime. Reading every byte of a
10 GB JSONL at every start to be sure is not affordable either. `content_digest` hashes a
file whole up to `whole_limit` bytes; above that, its head and tail and `blocks` blocks
spaced evenly between them, so its cost is bounded whatever the file's size. An edit that
falls between the sampled blocks of a file above the limit is not seen: callers that must
see those pair the digest with what the filesystem tells (`local_identity`: the inode and
the change time, which no user can set back).
"""

from __future__ import annotations

import hashlib
import os

from . import storage

BLOCK = 1 << 12
_CHUNK = 1 << 20


def content_digest(path: str, size: int, whole_limit: int, ends: int, blocks: int) -> str:
    """A short hash of `path` (of `size` bytes): the whole file when `size <= whole_limit`,
    else its first and last `ends` bytes and `blocks` blocks of 4 KiB spaced evenly
    between them. Raises OSError when the file cannot be read."""
    digest = hashlib.sha256(b"%d:" % size)
    filesystem, inner = storage.resolve(path)
    with filesystem.open_input_file(inner) as handle:
        if size <= whole_limit:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
            return digest.hexdigest()[:32]
        digest.update(handle.read(ends))
        span = size - 2 * ends - BLOCK
        for i in range(blocks):
            handle.seek(ends + (span * i) // max(blocks - 1, 1))
            digest.update(handle.read(BLOCK))
        handle.seek(size - ends)
        digest.update(handle.read(ends))
    return digest.hexdigest()[:32]


def local_identity(path: str) -> list[int] | None:
    """(device, inode, change time in ns) of a local file, or None for a URI. A rewrite in
    place changes the change time, a copy over it the inode, even where the mtime is put
    back; both also change when the data is copied elsewhere, so only a node-local cache
    (which just rebuilds) keys on them, never a checkpoint."""
    if storage.is_uri(path):
        return None
    stat = os.stat(path)
    return [int(stat.st_dev), int(stat.st_ino), int(stat.st_ctime_ns)]
