"""Photos as users have them, to RGB: as the reference does, or as a viewer shows them.

Phones and cameras write images the reference's `pil_img2rgb` takes at face value: a
rotation kept in EXIF, a colour profile, CMYK or YCCK JPEGs, 16-bit PNGs, grey + alpha.
Two conversions, one per mode (`decode_image(..., as_reference=...)`):

* `reference_rgb` (`compat="bagel"`): the reference's rule, bit for bit. RGBA and images
  with a `transparency` entry are composited on white; every other mode goes through
  Pillow's `convert("RGB")`, which drops LA's alpha, clips 16-bit values to white and
  converts CMYK without a profile; EXIF orientation and ICC profiles are ignored.
* `viewer_rgb` (the default): what an image viewer shows. Any alpha (RGBA, LA, PA, a
  `transparency` entry) is composited on white, 16-bit grey and 16-bit RGB(A) PNGs are
  scaled to 8 bits from all 16 bits, an embedded ICC profile (RGB or CMYK) is converted to
  sRGB; the caller then turns the image upright with `exif_orientation` and `upright`.

Pillow has no 16-bit colour mode: it opens a 16-bit RGB or RGBA PNG as 8-bit RGB(A) that
keeps each value's high byte (v // 256, up to one level under the rounded v * 255 / 65535),
and its 16-bit `transparency` colour then matches no 8-bit pixel. The default mode decodes
such a PNG a second time for the low bytes (`wide_png_to_8bit`).

docs/samples.md ("Photos") has the table of cases, tests/media/test_photos.py a test each.
"""

from __future__ import annotations

import functools
import io

import numpy as np
from PIL import ExifTags, Image, ImageCms, PngImagePlugin

from .fast_decode import ORIGINAL_SIZE_KEY

_INTEGER_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
# A 16-bit colour PNG's raw mode -> the one that unpacks the low byte of each value instead.
_LOW_BYTES = {"RGB;16B": "RGB;16L", "RGBA;16B": "RGBA;16L"}
_ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")
# Profiles converted to sRGB: those of the image's own colour model.
_ICC_MODES = ("RGB", "RGBA", "CMYK")
# EXIF orientation -> the transpose that makes the stored pixels upright (EXIF 2.32, 4.6.4).
_TRANSPOSES = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_SWAPS_SIDES = (5, 6, 7, 8)


def high_bit_depth_to_8bit(image: Image.Image) -> Image.Image:
    """16-bit (and 32-bit integer) grayscale scaled to 8 bits as a viewer shows it; Pillow's
    own `convert` clips every value above 255 to white. Other modes pass through."""
    if image.mode not in _INTEGER_MODES:
        return image
    values = np.asarray(image).astype(np.int64)
    gray = Image.fromarray(((np.clip(values, 0, 65535) * 255 + 32767) // 65535).astype(np.uint8), "L")
    transparent = image.info.get("transparency")
    if isinstance(transparent, int):  # a tRNS gray value: composite those pixels on white
        gray.paste(255, mask=Image.fromarray(np.where(values == transparent, 255, 0).astype(np.uint8), "L"))
    return gray


def wide_png_to_8bit(image: Image.Image) -> Image.Image:
    """A 16-bit RGB or RGBA PNG, not yet loaded, scaled to 8 bits from all 16 bits of each
    value (a 16-bit `transparency` colour becomes alpha); any other image passes through."""
    tiles, stream = getattr(image, "tile", None), getattr(image, "fp", None)
    if image.format != "PNG" or stream is None or not tiles or len(tiles) != 1 or tiles[0].args not in _LOW_BYTES:
        return image
    tile = tiles[0]
    high = np.asarray(image, np.uint32)
    stream.seek(0)
    second = PngImagePlugin.PngImageFile(stream)
    second.tile = [tile._replace(args=_LOW_BYTES[tile.args])]
    values = high * 256 + np.asarray(second, np.uint32)
    scaled = ((values * 255 + 32767) // 65535).astype(np.uint8)
    transparent = image.info.get("transparency")
    if image.mode == "RGB" and isinstance(transparent, tuple) and len(transparent) == 3:
        alpha = np.where((values == np.asarray(transparent, np.uint32)).all(-1), 0, 255).astype(np.uint8)
        scaled = np.dstack([scaled, alpha])
    out = Image.fromarray(scaled, "RGBA" if scaled.shape[-1] == 4 else "RGB")
    out.info.update({key: value for key, value in image.info.items() if key != "transparency"})
    return out


def on_white(image: Image.Image) -> Image.Image:
    """`image` composited on white through its alpha (or its `transparency` entry), as RGB."""
    rgba = image.convert("RGBA")
    white = Image.new("RGB", rgba.size, (255, 255, 255))
    white.paste(rgba, mask=rgba.getchannel("A"))
    return white


def _as_rgb(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":  # convert("RGB") would only copy the same pixels (a pass + fresh pages)
        image.load()
        return image
    return image.convert("RGB")


def reference_rgb(image: Image.Image) -> Image.Image:
    """The reference's `pil_img2rgb`, bit for bit (see the module docstring)."""
    if image.mode == "RGBA" or image.info.get("transparency") is not None:
        return on_white(image)
    return _as_rgb(image)


@functools.lru_cache(maxsize=32)
def _to_srgb(profile: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """The transform of `mode` pixels under `profile` to sRGB; None for an sRGB profile (a
    no-op but for rounding) or one that does not fit the mode or cannot be read."""
    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(profile))
        if "srgb" in (ImageCms.getProfileDescription(source) or "").lower().replace(" ", ""):
            return None
        out_mode = "RGBA" if mode == "RGBA" else "RGB"
        intent = ImageCms.Intent(ImageCms.getDefaultIntent(source))
        return ImageCms.buildTransform(source, _srgb(), mode, out_mode, renderingIntent=intent)
    except (ImageCms.PyCMSError, OSError, ValueError, TypeError):
        return None


@functools.lru_cache(maxsize=1)
def _srgb() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


def in_srgb(image: Image.Image) -> Image.Image:
    """`image` with its embedded ICC profile applied (RGB, RGBA or CMYK), else unchanged.
    A profile that cannot be read or does not match the mode leaves the pixels as stored."""
    profile = image.info.get("icc_profile")
    if not profile or image.mode not in _ICC_MODES:
        return image
    transform = _to_srgb(bytes(profile), image.mode)
    if transform is None:
        return image
    converted = ImageCms.applyTransform(image, transform)
    return image if converted is None else converted


def viewer_rgb(image: Image.Image) -> Image.Image:
    """RGB as an image viewer shows `image`, still in its stored orientation (see the module
    docstring)."""
    image = in_srgb(high_bit_depth_to_8bit(wide_png_to_8bit(image)))  # wide: where not yet loaded
    if image.mode in _ALPHA_MODES or image.info.get("transparency") is not None:
        return on_white(image)
    return _as_rgb(image)


def exif_orientation(image: Image.Image) -> int:
    """The EXIF orientation of an opened image, 1 (as stored) when absent or unreadable."""
    try:
        value = image.getexif().get(ExifTags.Base.Orientation, 1)
    except Exception:  # a damaged EXIF block: Pillow's parsers raise several kinds
        return 1
    return value if value in _TRANSPOSES else 1


def swaps_sides(orientation: int) -> bool:
    """Whether turning an image of this orientation upright exchanges its width and height."""
    return orientation in _SWAPS_SIDES


def upright(image: Image.Image, orientation: int) -> Image.Image:
    """`image` (stored pixels) turned as its EXIF `orientation` says; a drafted image's
    original size (fast_decode.py) is turned with it."""
    method = _TRANSPOSES.get(orientation)
    if method is None:
        return image
    turned = image.transpose(method)
    original = image.info.get(ORIGINAL_SIZE_KEY)
    if original is not None:
        turned.info[ORIGINAL_SIZE_KEY] = original[::-1] if swaps_sides(orientation) else tuple(original)
    return turned
