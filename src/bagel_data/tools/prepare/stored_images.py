"""The image bytes a prepared row stores: the source's own bytes, checked by decoding them
as the readers will, or resized / re-encoded when asked; a bad image is a `RowDropped`."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from ...errors import ConfigError, SkipReason
from ...media.images import ImageDecodeError, ImageTooLargeError, decode_image
from ...media.safe_read import OutsideRootError, check_inside, read_media
from .report import RowDropped

_ROOT_HINT = " (relative paths are resolved against --image-root)"


def check_format(reencode: str | None) -> str | None:
    """Pillow's name of the `reencode` format (None: keep each image's own); ConfigError if unknown."""
    if reencode is None:
        return None
    fmt = "JPEG" if reencode.upper() in ("JPG", "JPEG") else reencode.upper()
    Image.init()
    if fmt not in Image.SAVE:
        raise ConfigError("reencode", reencode, f"Pillow cannot write it; use one of {sorted(Image.SAVE)}")
    return fmt


def check_under_root(path: Path, root: Path | None) -> None:
    """A RowDropped unless `path` lies under `root` (--image-root) once symlinks are resolved:
    a row must not embed a file from elsewhere (`../../`, an absolute path, a symlink out)."""
    try:
        check_inside(str(path), [str(root)] if root is not None else [])
    except OutsideRootError as exc:
        raise RowDropped(
            SkipReason.OUTSIDE_ROOT, str(exc).replace("set allow_outside_root", "pass a wider --image-root")
        ) from None


def image_bytes(
    path: Path, reencode: str | None = None, max_side: int | None = None, root: Path | None = None
) -> bytes:
    """The bytes to store for `path`: the original ones unless a new size or format is asked.
    `root`: the folder `path` must lie under (--image-root)."""
    check_under_root(path, root)
    if not path.is_file():
        raise RowDropped(SkipReason.IMAGE_MISSING, f"{path} does not exist{_ROOT_HINT}")
    try:
        data = read_media(str(path))  # a regular file of bounded size
    except (OSError, ValueError) as exc:
        raise RowDropped(SkipReason.IMAGE_DECODE, f"{path}: {exc}") from None
    return stored_image(data, str(path), reencode, max_side)


def stored_image(data: bytes, where: str, reencode: str | None = None, max_side: int | None = None) -> bytes:
    """`data` as it will be stored: as it is unless a new size or format is asked."""
    try:
        # Decoding fully, with the reader's own function, catches truncated files too.
        image = decode_image(data)
        with Image.open(io.BytesIO(data)) as probe:
            original_format = probe.format
    except (ImageDecodeError, ImageTooLargeError, OSError) as exc:
        raise RowDropped(SkipReason.IMAGE_DECODE, f"{where}: {exc}") from None
    scale = max_side / max(image.size) if max_side else 1.0
    if reencode is None and scale >= 1.0:
        return data
    if scale < 1.0:
        size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    fmt = reencode or (original_format if original_format in Image.SAVE else "PNG")
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return buffer.getvalue()
