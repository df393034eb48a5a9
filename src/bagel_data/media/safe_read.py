"""Reading a media file a row names: only under the dataset's roots, only regular files,
only up to a size bound; and decoding only formats on an allowlist.

A row is untrusted input. Without these checks a path of `../../etc/...`, an absolute
path or a symlink reads outside the data a config declared; a FIFO blocks the worker
forever; `/dev/zero` or a huge file is read whole before any check; and bytes of an EPS
file reach Pillow's EPS plugin, which starts Ghostscript where it is installed.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import struct
from collections.abc import Iterable, Sequence
from typing import BinaryIO

import pyarrow.fs as pafs
from PIL import Image, ImageFile

from ..errors import ConfigError, ImageTooLargeError
from ..sources import storage
from .reference_images import EXTERNAL_PROGRAM_FORMATS, tolerant_factory

# The decoders Pillow may use for an image cell or file: what the docs list (JPEG, PNG,
# WebP, GIF, BMP, TIFF; a multi-picture MPO opens as JPEG). None can start an
# external program (EPS, and PDF/PS, can: they are not here).
ALLOWED_IMAGE_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
MAX_MEDIA_BYTES = storage.MAX_MEDIA_BYTES  # the largest media file read whole (sources/storage.py)


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


def open_image(
    stream: BinaryIO, max_pixels: int, formats: Sequence[str] = ALLOWED_IMAGE_FORMATS, *, tolerant: bool = False
) -> ImageFile.ImageFile:
    """The image in `stream`, opened (header read, pixels not yet decoded) by one of the
    decoders `formats` names (the allowlist unless widened), with `ImageTooLargeError` when
    its header says more than `max_pixels` pixels, whatever the format. `tolerant`: as the
    reference opens, with Pillow's truncated-image flag on for this image alone
    (media/reference_images.py).

    What `Image.open(stream, formats=ALLOWED_IMAGE_FORMATS)` does, less its check against
    Pillow's process-wide `Image.MAX_IMAGE_PIXELS`: our bound replaces it without that global
    ever being changed, not even for a moment (another thread's `Image.open` keeps the
    limit its program set). Raises `Image.UnidentifiedImageError` when no decoder accepts it."""
    prefix = stream.read(16)
    for name in formats:
        if name not in Image.OPEN:
            Image.init()  # WebP and TIFF register on first need, as in Image.open
        # tolerant (compat): decoders that act as if Pillow's LOAD_TRUNCATED_IMAGES were set
        factory, accept = tolerant_factory(name) if tolerant else Image.OPEN[name]
        accepted = True if accept is None else accept(prefix)
        if not accepted or isinstance(accepted, str):  # a str: recognised, but unreadable here
            continue
        stream.seek(0)
        try:
            image = factory(stream, "")
        except (SyntaxError, IndexError, TypeError, struct.error):
            continue  # not this format after all (what Image.open catches to try the next)
        width, height = image.size
        if width * height > max_pixels:
            image.close()
            raise ImageTooLargeError(f"{width}x{height} is over the {max_pixels}-pixel limit")
        return image
    raise Image.UnidentifiedImageError(f"cannot identify image file {stream!r}")


def check_image_formats(key: str, formats: object) -> tuple[str, ...]:
    """The allowlist widened by `formats` (Pillow format names, e.g. ["JPEG2000", "PPM"]),
    checked: a `ConfigError` naming `key` for a name Pillow does not know or one that starts
    another program. Returns the allowlist first, then the added names in their order."""
    if isinstance(formats, str) or not isinstance(formats, (list, tuple)):
        raise ConfigError(key, formats, 'give a list of Pillow format names, e.g. ["JPEG2000", "PPM"]')
    Image.init()
    known = set(Image.OPEN)
    names: list[str] = list(ALLOWED_IMAGE_FORMATS)
    for name in formats:
        upper = str(name).upper() if isinstance(name, str) else name
        if upper in EXTERNAL_PROGRAM_FORMATS:
            raise ConfigError(key, name, "its decoder starts an external program (Ghostscript); it is never read")
        if upper not in known:
            raise ConfigError(
                key, name, f"not a format this Pillow opens; use one of {sorted(known - EXTERNAL_PROGRAM_FORMATS)}"
            )
        if upper not in names:
            names.append(upper)
    return tuple(names)


def image_stream(source: bytes | bytearray | memoryview | str | BinaryIO) -> BinaryIO:
    """A seekable binary stream of an image's bytes, a path's file or a file object."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return io.BytesIO(source)
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            return io.BytesIO(handle.read())
    try:
        source.seek(0)
        return source
    except (AttributeError, io.UnsupportedOperation):  # a pipe or socket: read it whole
        return io.BytesIO(source.read())


def check_video_path(path: str, roots: Iterable[str] = (), allow_outside: bool = False) -> str:
    """A video file or frame folder path, checked like `read_media` before a decoder opens it."""
    check_inside(path, roots, allow_outside)
    if not storage.is_uri(path) and os.path.exists(path):
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise NotRegularFileError(f"{path[:200]!r} is not a regular file or a frame folder")
    return path
