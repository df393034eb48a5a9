"""Photos as phones, cameras and editors write them, made in memory for the tests.

* `oriented_jpeg(pixels, orientation)`: stored pixels with an EXIF orientation tag;
* `cmyk_jpeg(cmyk)`, `ycck_jpeg(cmyk)`: Adobe CMYK JPEGs, the second YCCK-coded;
* `linear_rgb_profile()`: an ICC v2 RGB profile with sRGB's primaries and a linear (gamma
  1.0) tone curve, written field by field (ICC.1:2001-04): a value of 128 in it is 50 %
  light, which sRGB encodes as 188;
* `animated(fmt, colours)`: a GIF or WebP with one solid frame per colour.
"""

from __future__ import annotations

import struct

import numpy as np
from PIL import Image

from helpers.builders import encode

# D50-adapted sRGB primaries and D50 white, as an RGB display profile lists them.
_PRIMARIES = {b"rXYZ": (0.4361, 0.2225, 0.0139), b"gXYZ": (0.3851, 0.7169, 0.0971), b"bXYZ": (0.1431, 0.0606, 0.7141)}
_D50 = (0.9642, 1.0, 0.8249)


def oriented_jpeg(pixels: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(Image.fromarray(pixels), "JPEG", quality=100, subsampling=0, exif=exif.tobytes())


def cmyk_jpeg(cmyk: tuple[int, int, int, int], size=(16, 16), **params) -> bytes:
    return encode(Image.new("CMYK", size, cmyk), "JPEG", quality=100, **params)


def ycck_jpeg(cmyk: tuple[int, int, int, int], size=(16, 16)) -> bytes:
    """A JPEG whose Adobe marker says YCCK: the decoder turns its YCC planes back into the
    C, M, Y of `cmyk` (255 - R, G, B of the YCC colour) and keeps K."""
    c, m, y, k = cmyk
    planes = Image.new("RGB", size, (c, m, y)).convert("YCbCr").split()
    # Pillow writes CMYK inverted (Adobe's convention): hand it the inverse of the planes.
    inverted = [plane.point(lambda v: 255 - v) for plane in planes]
    data = bytearray(encode(Image.merge("CMYK", [*inverted, Image.new("L", size, k)]), "JPEG", quality=100))
    marker = data.find(b"Adobe")
    data[marker + 11] = 2  # the transform byte: 0 CMYK, 1 YCbCr, 2 YCCK
    return bytes(data)


def _s15(value: float) -> bytes:
    return struct.pack(">i", round(value * 65536))


def _xyz(values: tuple[float, float, float]) -> bytes:
    return b"XYZ \0\0\0\0" + b"".join(_s15(v) for v in values)


def _description(text: str) -> bytes:
    ascii_text = text.encode("ascii") + b"\0"
    body = b"desc\0\0\0\0" + struct.pack(">I", len(ascii_text)) + ascii_text
    return body + struct.pack(">II", 0, 0) + struct.pack(">HB", 0, 0) + bytes(67)  # no Unicode, no ScriptCode


def linear_rgb_profile(description: str = "Linear RGB (test)") -> bytes:
    gamma_one = b"curv\0\0\0\0" + struct.pack(">IH", 1, 0x0100) + b"\0\0"
    tags = [(b"desc", _description(description)), (b"wtpt", _xyz(_D50))]
    tags += [(name, _xyz(xyz)) for name, xyz in _PRIMARIES.items()]
    tags += [(name, gamma_one) for name in (b"rTRC", b"gTRC", b"bTRC")]
    offset = 128 + 4 + 12 * len(tags)
    table, data = b"", b""
    for name, body in tags:
        table += name + struct.pack(">II", offset + len(data), len(body))
        data += body + bytes(-len(body) % 4)
    size = offset + len(data)
    header = struct.pack(">I4sI4s4s4s", size, b"none", 0x02100000, b"mntr", b"RGB ", b"XYZ ")
    header += bytes(12) + b"acsp" + bytes(4 + 4 + 4 + 4 + 8 + 4) + b"".join(_s15(v) for v in _D50)
    header += bytes(128 - len(header))
    return header + struct.pack(">I", len(tags)) + table + data


def animated(fmt: str, colours: list[tuple[int, int, int]], size=(8, 8)) -> bytes:
    frames = [Image.new("RGB", size, colour) for colour in colours]
    params = {"lossless": True} if fmt == "WEBP" else {}
    return encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100, loop=0, **params)
