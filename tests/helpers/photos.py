"""Photos as phones, cameras and editors write them, made in memory for the tests.

* `oriented_jpeg(pixels, orientation)`: stored pixels with an EXIF orientation tag;
* `cmyk_jpeg(cmyk)`, `ycck_jpeg(cmyk)`: Adobe CMYK JPEGs, the second YCCK-coded;
* `linear_rgb_profile()`: an ICC v2 RGB profile with sRGB's primaries and a linear (gamma
  1.0) tone curve, written field by field (ICC.1:2001-04): a value of 128 in it is 50 %
  light, which sRGB encodes as 188;
* `cmyk_press_profile(red_ink)`: an ICC v2 CMYK printer profile (a 2-point Lab grid): each
  ink corner shows as the subtractive mix of its inks, but full magenta + yellow (red ink)
  shows as the sRGB colour `red_ink`, as a real press's duller red does;
* `png16(values, ...)`: a 16-bit RGB or RGBA PNG (Pillow cannot write one), its rows
  filtered None, Sub and Up in turn;
* `animated(fmt, colours)`: a GIF or WebP with one solid frame per colour.
"""

from __future__ import annotations

import itertools
import struct
import zlib

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
    return _profile(b"mntr", b"RGB ", b"XYZ ", tags)


def srgb_to_lab(rgb: tuple[float, float, float]) -> np.ndarray:
    """CIELAB (D50, as the ICC's PCS) of an 8-bit sRGB colour, from the sRGB standard's curve
    and its D50-adapted primaries."""
    c = np.asarray(rgb, float) / 255
    linear = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    xyz = np.asarray(list(_PRIMARIES.values())).T @ linear / np.asarray(_D50)
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.asarray([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def cmyk_press_profile(red_ink: tuple[int, int, int], description: str = "CMYK press (test)") -> bytes:
    corners = b""
    for c, m, y, k in itertools.product((0, 1), repeat=4):  # C varies slowest, as lut8 lists them
        shown = red_ink if (c, m, y, k) == (0, 1, 1, 0) else tuple(255 * (1 - ink) * (1 - k) for ink in (c, m, y))
        lab = srgb_to_lab(shown)
        corners += bytes(round(float(v)) for v in (lab[0] * 255 / 100, lab[1] + 128, lab[2] + 128))
    identity = bytes(range(256))
    lut8 = b"mft1\0\0\0\0" + struct.pack(">BBBB", 4, 3, 2, 0)
    lut8 += b"".join(_s15(float(i == j)) for i in range(3) for j in range(3))
    lut8 += identity * 4 + corners + identity * 3
    tags = [(b"desc", _description(description)), (b"wtpt", _xyz(_D50)), (b"A2B0", lut8)]
    return _profile(b"prtr", b"CMYK", b"Lab ", tags)


def _profile(device_class: bytes, space: bytes, pcs: bytes, tags: list[tuple[bytes, bytes]]) -> bytes:
    offset = 128 + 4 + 12 * len(tags)
    table, data = b"", b""
    for name, body in tags:
        table += name + struct.pack(">II", offset + len(data), len(body))
        data += body + bytes(-len(body) % 4)
    size = offset + len(data)
    header = struct.pack(">I4sI4s4s4s", size, b"none", 0x02100000, device_class, space, pcs)
    header += bytes(12) + b"acsp" + bytes(4 + 4 + 4 + 4 + 8 + 4) + b"".join(_s15(v) for v in _D50)
    header += bytes(128 - len(header))
    return header + struct.pack(">I", len(tags)) + table + data


def animated(fmt: str, colours: list[tuple[int, int, int]], size=(8, 8)) -> bytes:
    frames = [Image.new("RGB", size, colour) for colour in colours]
    params = {"lossless": True} if fmt == "WEBP" else {}
    return encode(frames[0], fmt, save_all=True, append_images=frames[1:], duration=100, loop=0, **params)


def png16(values: np.ndarray, transparency: tuple[int, int, int] | None = None) -> bytes:
    """A PNG of `values` ((H, W, 3) or (H, W, 4), 0..65535) at 16 bits a channel."""
    height, width, channels = values.shape
    step = 2 * channels  # the bytes of a pixel, which the Sub filter looks back by
    rows = [values[r].astype(">u2").tobytes() for r in range(height)]
    raw = b""
    for r, row in enumerate(rows):
        data = np.frombuffer(row, np.uint8).astype(np.int32)
        kind = r % 3 if r else r % 2  # the first row has no row above for Up
        if kind == 1:
            data = data - np.concatenate([np.zeros(step, np.int32), data[:-step]])
        elif kind == 2:
            data = data - np.frombuffer(rows[r - 1], np.uint8)
        raw += bytes([kind]) + (data % 256).astype(np.uint8).tobytes()
    colour_type = 6 if channels == 4 else 2
    chunks = [(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0))]
    if transparency is not None:
        chunks.append((b"tRNS", struct.pack(">HHH", *transparency)))
    chunks += [(b"IDAT", zlib.compress(raw)), (b"IEND", b"")]
    body = b"".join(struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d)) for t, d in chunks)
    return b"\x89PNG\r\n\x1a\n" + body
