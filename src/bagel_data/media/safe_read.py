"""Reading a media file a row names: only under the dataset's roots, only regular files,
only up to a size bound; and decoding only formats on an allowlist.

A row is untrusted input. Without these checks a path of `../../etc/...`, an absolute
path or a symlink reads outside the data a config declared; a FIFO blocks the worker
forever; `/dev/zero` or a huge file is read whole before any check; and bytes of an EPS
file reach Pillow's EPS plugin, which starts Ghostscript where it is installed.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterable

import pyarrow.fs as pafs

from ..sources import storage

# The decoders Pillow may use for an image cell or file: what the docs list (JPEG, PNG,
# WebP, GIF, BMP, TIFF; a multi-picture MPO opens as JPEG). None can start an
# external program (EPS, and PDF/PS, can: they are not here).
ALLOWED_IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
# The largest media file read whole (an image, or a frame of a frame folder).
MAX_MEDIA_BYTES = 256 << 20


class OutsideRootError(ValueError):
    """The path resolves outside every root its dataset declared."""


class NotRegularFileError(ValueError):
    """The path is a FIFO, a device, a socket or a folder: reading it could block or never end."""


class MediaTooLargeError(ValueError):
    """The file is over MAX_MEDIA_BYTES."""


def _resolved(path: str) -> str:
    if storage.is_uri(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://{posixpath.normpath('/' + rest).lstrip('/')}"
    return os.path.realpath(path)  # symlinks and `..` resolved before the check


def is_under(path: str, roots: Iterable[str]) -> bool:
    """Whether `path` (symlinks resolved) lies under one of `roots` (resolved too)."""
    target = _resolved(path)
    for root in roots:
        base = _resolved(root).rstrip("/")
        if target == base or target.startswith(base + "/"):
            return True
    return False


def check_inside(path: str, roots: Iterable[str], allow_outside: bool = False) -> str:
    """`path` when it lies under `roots` (or `allow_outside`); OutsideRootError otherwise."""
    roots = [root for root in roots if root]
    if allow_outside or not roots or is_under(path, roots):
        return path
    raise OutsideRootError(
        f"{str(path)[:200]!r} lies outside the dataset's roots {[str(r)[:100] for r in roots][:4]}; "
        "set allow_outside_root: true in its group or dataset_info entry to read it"
    )


def read_media(
    path: str, roots: Iterable[str] = (), allow_outside: bool = False, max_bytes: int = MAX_MEDIA_BYTES
) -> bytes:
    """The bytes of a media file, checked: under `roots`, a regular file, at most `max_bytes`."""
    check_inside(path, roots, allow_outside)
    if storage.is_uri(path):
        filesystem, inner = storage.resolve(path)
        info = filesystem.get_file_info(inner)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        if info.type != pafs.FileType.File:
            raise NotRegularFileError(f"{path[:200]!r} is not a file")
        if (info.size or 0) > max_bytes:
            raise MediaTooLargeError(f"{path[:200]!r} has {info.size} bytes, over the {max_bytes}-byte limit")
        return storage.read_bytes(path)
    status = os.stat(path)  # FileNotFoundError for a missing file, as before
    if not stat.S_ISREG(status.st_mode):
        raise NotRegularFileError(f"{path[:200]!r} is not a regular file (a FIFO, device, socket or folder)")
    if status.st_size > max_bytes:
        raise MediaTooLargeError(f"{path[:200]!r} has {status.st_size} bytes, over the {max_bytes}-byte limit")
    with open(path, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew since the stat
        raise MediaTooLargeError(f"{path[:200]!r} is over the {max_bytes}-byte limit")
    return data


def check_video_path(path: str, roots: Iterable[str] = (), allow_outside: bool = False) -> str:
    """A video file or frame folder path, checked like `read_media` before a decoder opens it."""
    check_inside(path, roots, allow_outside)
    if not storage.is_uri(path) and os.path.exists(path):
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise NotRegularFileError(f"{path[:200]!r} is not a regular file or a frame folder")
    return path
