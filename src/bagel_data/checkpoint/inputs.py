"""What a checkpoint's data was: each input file of each group with its size and stamp
(modification time; for a local JSONL or tar also a digest of its content).

Resume is exact only on the same inputs. The unit count alone does not show a deleted or
added parquet file (files repeat to fill `num_used_data`), so a checkpoint records each
group's distinct input files and their sizes, and resume compares them file by file: an
added, removed, resized or rewritten file is a `ResumeError` naming it. Up to `MAX_LISTED` files are
listed; beyond that only a digest is kept (the checkpoint stays small), and a change is
reported with the counts.

A remote input (an object store's object) is stamped by what the store's listing already
says: its size and modification time, which the store sets at every write and no client
can set back, so a rewrite shows without reading a byte. Recording a checkpoint therefore
reads no remote file; a content digest of one is read only on resuming a checkpoint that
recorded one (written before this rule), to compare it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import pyarrow.fs as pafs

from ..errors import ResumeError
from ..sources import storage
from ..sources.content_stamp import content_digest

MAX_LISTED = 256


# A non-parquet (JSONL) input's content digest: the whole file up to WHOLE_HASH_BYTES (an
# edit anywhere shows, even where mtimes lie); above that, its first and last SAMPLED_ENDS
# bytes and SAMPLED_BLOCKS blocks of 4 KiB between them, so that each process reads about
# 3 MiB of a 10 GB file, not all of it. Checkpoints move between nodes with their data, so
# no inode or change time is recorded (content_stamp.local_identity).
WHOLE_HASH_BYTES = 8 << 20
SAMPLED_ENDS = 1 << 20
SAMPLED_BLOCKS = 256
# Stamps of checkpoints written before the digest above hashed the first and last 64 KiB.
_LEGACY_HASHED_BYTES = 1 << 16
_DIGEST_TAG = "c2-"


def file_size(path: str) -> int:
    """Bytes of `path`, or -1 when it cannot be found."""
    return _file_info(path)[0]


def _file_info(path: str) -> tuple[int, int | None]:
    filesystem, inner = storage.resolve(path)
    info = filesystem.get_file_info(inner)
    if info.type == pafs.FileType.NotFound:
        return -1, None
    return int(info.size or 0), info.mtime_ns


def _content_hash(path: str, size: int) -> str:
    try:
        return _DIGEST_TAG + content_digest(path, size, WHOLE_HASH_BYTES, SAMPLED_ENDS, SAMPLED_BLOCKS)
    except OSError:
        return "unreadable"


def _digested(path: str) -> bool:
    """Whether `path`'s stamp carries a content digest: a parquet file's footer changes with
    any rewrite that keeps its size, and a remote file's time cannot be set back."""
    return not path.endswith(".parquet") and not storage.is_remote(path)


def _legacy_hash(path: str, size: int) -> str:
    """The head and tail hash of stamps written before `_DIGEST_TAG` (their resume stays exact)."""
    digest = hashlib.sha256()
    try:
        with storage.open_input(path) as handle:
            digest.update(handle.read(_LEGACY_HASHED_BYTES))
            if size > _LEGACY_HASHED_BYTES:
                handle.seek(max(size - _LEGACY_HASHED_BYTES, _LEGACY_HASHED_BYTES))
                digest.update(handle.read(_LEGACY_HASHED_BYTES))
    except OSError:
        return "unreadable"
    return digest.hexdigest()[:16]


def file_entry(path: str, listed: tuple[int, int | None] | None = None) -> list:
    """`[path, size, stamp]`: the stamp is the modification time (ns), and for a local JSONL
    or tar (any input that is not parquet) a digest of its content, so a same-size edit shows
    where `cp -p` or `rsync -a` put the old time back (an object store's time cannot be).

    `listed`: the (size, mtime_ns) its folder's listing gave, the same as a stat of the
    file would; without it the file is asked for its own (a request on an object store)."""
    size, mtime = _file_info(path) if listed is None else listed
    stamp = "" if mtime is None else str(mtime)
    if size >= 0 and _digested(path):
        stamp += ":" + _content_hash(path, size)
    return [path, size, stamp]


def input_record(paths: list[str], listed: Mapping[str, tuple[int, int | None]] | None = None) -> dict:
    """The record of one group's distinct input files (sorted, with sizes and stamps);
    `listed`: sizes and mtimes already known from listing their folders (see `file_entry`)."""
    listed = listed or {}
    files = [file_entry(path, listed.get(path)) for path in sorted(set(paths))]
    digest = hashlib.sha256(repr(files).encode()).hexdigest()[:32]
    record = {"count": len(files), "digest": digest}
    if len(files) <= MAX_LISTED:
        record["files"] = files
    return record


def check_inputs(group: str, saved: dict | None, current: dict | None) -> None:
    """Raise ResumeError naming what changed between the checkpoint's inputs and these."""
    if saved is None or current is None or saved.get("digest") == current["digest"]:
        return  # same inputs, or a checkpoint from before inputs were recorded
    fix = "resume with the data the checkpoint was taken on, or start this group afresh"
    if "files" not in saved or "files" not in current:
        raise ResumeError(
            f"{group}: the input files changed since the checkpoint ({saved['count']} files then, "
            f"{current['count']} now, or their sizes or contents differ); {fix}"
        )
    try:
        then = {entry[0]: list(entry[1:]) for entry in saved["files"]}
    except (TypeError, IndexError, KeyError):
        raise ResumeError(f"{group}: the checkpoint's inputs.files is malformed; {fix}") from None
    now = {entry[0]: list(entry[1:]) for entry in current["files"]}
    problems = [f"{path} was removed" for path in then if path not in now]
    problems += [f"{path} was added" for path in now if path not in then]
    for path in then:
        if path not in now:
            continue
        old, new = then[path], _in_saved_form(path, then[path], now[path])
        if old[0] != new[0]:
            problems.append(f"{path} changed ({old[0]} bytes then, {new[0]} now)")
        elif len(old) > 1 and old[1:] != new[1:]:  # a checkpoint of [path, size] compares sizes only
            problems.append(f"{path} changed (same size, {_what_differs(old[1], new[1])})")
    if problems:
        raise ResumeError(f"{group}: the inputs changed since the checkpoint: {'; '.join(problems[:5])}; {fix}")


def _in_saved_form(path: str, old: list, new: list) -> list:
    """`new` with its content hash made the way the checkpoint's was: an older checkpoint
    hashed only a JSONL's head and tail, and digested remote files too (read now, only for
    a file whose size and time did not already tell)."""
    if len(old) < 2 or len(new) < 2:
        return new
    old_time, _, old_hash = str(old[1]).partition(":")
    new_time, colon, new_hash = str(new[1]).partition(":")
    if old_hash and not colon and old[0] == new[0] and old_time == new_time:
        hashed = (
            _content_hash(path, int(new[0])) if old_hash.startswith(_DIGEST_TAG) else _legacy_hash(path, int(new[0]))
        )
        return [new[0], f"{new_time}:{hashed}", *new[2:]]
    if not colon or not new_hash.startswith(_DIGEST_TAG) or old_hash.startswith(_DIGEST_TAG) or not old_hash:
        return new
    return [new[0], f"{new_time}:{_legacy_hash(path, int(new[0]))}", *new[2:]]


def _what_differs(old: str, new: str) -> str:
    old_time, _, old_hash = str(old).partition(":")
    new_time, _, new_hash = str(new).partition(":")
    if old_hash and new_hash and old_hash != new_hash:
        return "different content"
    return "modified since" if old_time != new_time else "different stamp"
