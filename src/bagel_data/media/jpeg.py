"""Exact JPEG decoding through simplejpeg, where its pixels are Pillow's.

Pillow and simplejpeg both decode JPEGs with libjpeg-turbo's default (accurate integer)
inverse DCT and fancy upsampling, so for a 3-component JPEG that Pillow opens as "RGB" the
pixels are the same, and simplejpeg gets them with less overhead (no 4-byte-per-pixel
intermediate, no Python-level tile loop). tests/media/test_jpeg.py proves the identity on
baseline and progressive files, with and without restart markers, at 4:4:4, 4:2:2 and 4:2:0,
on odd sizes, and on files carrying an EXIF orientation (neither decoder applies it).

Everything else goes through Pillow: CMYK / YCCK and grayscale JPEGs, any file simplejpeg
refuses (corrupt or truncated data then fails in Pillow with Pillow's error), sources that
are not bytes or a seekable file, and every call that asked for a drafted (fast_decode)
decode. Pillow's `draft` is never used here.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

try:
    import simplejpeg as _simplejpeg
except ImportError:  # pragma: no cover - a declared dependency; Pillow is the fallback
    _simplejpeg = None


def available() -> bool:
    return _simplejpeg is not None


def _encoded_bytes(source) -> bytes | None:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, io.IOBase) and source.seekable():
        position = source.tell()
        source.seek(0)
        data = source.read()
        source.seek(position)
        return data if isinstance(data, bytes) else None
    return None


def decode_exact(opened: Image.Image, source) -> Image.Image | None:
    """The RGB image of the JPEG `opened` (by `Image.open`, not loaded) read from `source`,
    decoded by simplejpeg; None when it must go through Pillow instead."""
    if _simplejpeg is None or opened.format != "JPEG" or opened.mode != "RGB":
        return None
    data = _encoded_bytes(source)
    if data is None:
        return None
    try:
        pixels = _simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False)
    except (ValueError, RuntimeError, OSError):
        return None  # let Pillow decide whether, and how, the file is readable
    if pixels.shape != (opened.size[1], opened.size[0], 3):
        return None
    return Image.fromarray(np.ascontiguousarray(pixels), "RGB")
