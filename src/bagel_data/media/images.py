"""Image decoding and the BAGEL resize/normalize transform, on Pillow + numpy + torch.

The resize geometry is the NaViT-style rule of docs/samples.md ("Images and frames"): keep the aspect ratio,
bound the long side, lift the short side, cap the pixel count (shared among the images of a
row), and snap both sides to the patch stride. Pixels are resized with Pillow's bicubic
filter, which is what torchvision hands PIL images to, so the output is identical without
depending on torchvision.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np
import pyarrow
import torch
from PIL import Image

from ..errors import ConfigError, ImageDecodeError, ImageTooLargeError
from ..instruments import seam
from .convert import PendingImage
from .fast_decode import ORIGINAL_SIZE_KEY
from .photos import exif_orientation, reference_rgb, swaps_sides, upright, viewer_rgb, wide_png_to_8bit
from .reference_images import reference_formats
from .resize import RESIZE_BACKENDS, resize_rgbx_storage
from .safe_read import ALLOWED_IMAGE_FORMATS, image_stream, open_image

DEFAULT_MAX_PIXELS = 14 * 14 * 9 * 1024
# `resample` of a transform -> Pillow's filter; bicubic is the reference's (and the default).
RESAMPLE_FILTERS = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
# The reference raises Pillow's global bomb limit to 200 MP for the whole process; we apply
# the same bound ourselves, per decode call, and never touch Pillow's global.
DEFAULT_MAX_IMAGE_PIXELS = 200_000_000


def pil_img2rgb(image: Image.Image) -> Image.Image:
    """The reference's `pil_img2rgb`: transparent pixels composited on white, every other
    mode through Pillow's `convert("RGB")` (media/photos.py: `reference_rgb`)."""
    return reference_rgb(image)


@seam("decode")
def decode_image(
    source: bytes | str | BinaryIO,
    max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    draft_size=None,
    *,
    as_reference: bool = False,
    formats: Sequence[str] = ALLOWED_IMAGE_FORMATS,
) -> Image.Image:
    """Decode encoded bytes (or a path / file object) to an RGB image, fully loaded.

    Raises `ImageTooLargeError` before decoding pixels when the header is over
    `max_pixels`, and `ImageDecodeError` for anything Pillow cannot read.

    The default is the image as a viewer shows it: upright (EXIF orientation), in sRGB (an
    embedded ICC profile applied), any alpha composited on white, 16-bit grey scaled.
    `as_reference` (`compat="bagel"`): the reference's conversion, stored pixels as they
    are (media/photos.py; docs/samples.md, "Photos"), opened as its `Image.open` opens
    (every format but the external-program ones, truncated files decoded as far as they
    go: media/reference_images.py). `formats`: the decoders the default mode may use (the
    allowlist, or a group's `image_formats` widening it); `max_pixels` bounds every one.

    `draft_size` (opt-in fast decode, see `fast_decode.py`): a `(width, height)` or a
    callable of the (upright) size, usually `transform.draft_size`; a JPEG at least twice
    that size is decoded at a reduced DCT scale. When None (the default) nothing changes.
    """
    try:
        # Only the allowlisted decoders: EPS (and anything that runs a program) never sees the bytes.
        if as_reference:
            image = open_image(image_stream(source), max_pixels, reference_formats(), tolerant=True)
            return _to_rgb(image, draft_size, reference_rgb)
        image = open_image(image_stream(source), max_pixels, formats)
        picture = wide_png_to_8bit(image)  # before reading EXIF: a PNG's getexif() decodes the pixels
        orientation = exif_orientation(picture)
        if draft_size is not None and swaps_sides(orientation):
            draft_size = _sideways(draft_size)
        return upright(_to_rgb(picture, draft_size, viewer_rgb), orientation)
    except Image.UnidentifiedImageError:
        allowed = "any Pillow reads" if as_reference else ", ".join(formats)
        raise ImageDecodeError(f"not an image in an allowed format ({allowed})") from None
    except Image.DecompressionBombError as exc:  # a GIF frame past the program's own Pillow limit
        raise ImageTooLargeError(str(exc)) from None
    except (ImageTooLargeError, ImageDecodeError, FileNotFoundError, MemoryError):
        raise
    except Exception as exc:  # Pillow's plugins raise TypeError, RuntimeError, ... on bad bytes
        raise ImageDecodeError(f"{type(exc).__name__}: {exc}") from exc


def _to_rgb(image: Image.Image, draft_size, to_rgb) -> Image.Image:
    if draft_size is None:
        return to_rgb(image)
    from .fast_decode import decode_drafted  # the opt-in fast decode hook, kept in its own module

    return decode_drafted(image, draft_size, to_rgb)


def _sideways(draft_size):
    """`draft_size` for the stored pixels of an image that is turned a quarter to be upright."""
    if callable(draft_size):
        return lambda width, height: tuple(draft_size(height, width))[::-1]
    return (draft_size[1], draft_size[0])


def rgbx_storage(image: Image.Image) -> np.ndarray | None:
    """The `(H, W, 4)` uint8 storage of an RGB image (R, G, B, a padding byte), read-only and
    without a copy: exported through the Arrow C data interface (Pillow >= 11.2, an image
    held in one memory block); None where Pillow cannot. The view keeps the memory alive."""
    width, height = image.size
    try:
        storage = pyarrow.array(image).buffers()[-1]
    except (TypeError, ValueError, pyarrow.ArrowException):  # older Pillow; several blocks
        return None
    if storage is None or storage.size != width * height * 4:
        return None
    return np.frombuffer(storage, dtype=np.uint8).reshape(height, width, 4)


def pending_image(image: Image.Image, mean: tuple[float, ...], std: tuple[float, ...]) -> PendingImage:
    """The RGB `image` awaiting conversion, its pixels viewed in place where Pillow allows
    (and as int32 words, R in the low byte, on a little-endian machine)."""
    storage = rgbx_storage(image)
    if storage is None:
        return PendingImage(np.asarray(image, dtype=np.uint8), mean, std)
    return pending_rgbx(storage, mean, std, source=image)


def pending_rgbx(
    storage: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...], source: Image.Image | None = None
) -> PendingImage:
    """`(H, W, 4)` C-contiguous RGBX `storage` awaiting conversion, viewed in place: its RGB
    bytes, and its int32 words where the machine is little-endian."""
    words = storage.view(np.int32)[:, :, 0] if sys.byteorder == "little" else None
    return PendingImage(storage[:, :, :3], mean, std, source=source, words=words)


@dataclasses.dataclass(frozen=True)
class ResizeRule:
    """The stride-snapped, aspect-preserving size rule (docs/samples.md)."""

    max_size: int
    min_size: int
    stride: int
    max_pixels: int = DEFAULT_MAX_PIXELS

    def _apply(self, width: int, height: int, scale: float) -> tuple[int, int]:
        def snap(side: float) -> int:
            return max(self.stride, int(round(round(side) / self.stride) * self.stride))

        return snap(width * scale), snap(height * scale)

    def target_size(self, width: int, height: int, img_num: int = 1) -> tuple[int, int]:
        """(width, height) after resizing an image of `width` x `height`."""
        scale = max(min(self.max_size / max(width, height), 1.0), self.min_size / min(width, height))
        new_w, new_h = self._apply(width, height, scale)
        pixel_budget = self.max_pixels / img_num
        if new_w * new_h > pixel_budget:
            new_w, new_h = self._apply(new_w, new_h, pixel_budget / (new_w * new_h))
        if max(new_w, new_h) > self.max_size:
            new_w, new_h = self._apply(new_w, new_h, self.max_size / max(new_w, new_h))
        return new_w, new_h


class ImageTransform:
    """Resize with `ResizeRule`, then to a normalized float32 CHW tensor.

    Callable as `transform(pil_image, img_num=1)`; `stride` is the patch size that the
    token count of an image is measured in.
    """

    def __init__(
        self,
        max_image_size: int,
        min_image_size: int,
        image_stride: int,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        image_mean: tuple[float, ...] = (0.5, 0.5, 0.5),
        image_std: tuple[float, ...] = (0.5, 0.5, 0.5),
        fast_decode: bool = False,
        resample: str = "bicubic",
        resize_backend: str = "pillow",
    ):
        self.rule = ResizeRule(max_image_size, min_image_size, image_stride, max_pixels)
        self.fast_decode = bool(fast_decode)  # opt-in; see draft_size and fast_decode.py
        if resample not in RESAMPLE_FILTERS:
            raise ConfigError("resample", resample, f"use one of {list(RESAMPLE_FILTERS)}")
        # Opt-in: bilinear has half of bicubic's taps, so it resizes in about half the time
        # and is no longer the reference's pixels (docs/performance.md gives its PSNR).
        self.resample = resample
        self._filter = RESAMPLE_FILTERS[resample]
        if resize_backend not in RESIZE_BACKENDS:
            raise ConfigError(
                "resize_backend",
                resize_backend,
                f"use one of {list(RESIZE_BACKENDS)}: pillow (exact, the default) or torch (opt-in, faster, "
                "within 2 levels of pillow's pixels)",
            )
        # Opt-in: torch's antialiased uint8 resize, same filter, a few levels off (media/resize.py).
        self.resize_backend = resize_backend
        self.stride = image_stride
        self.image_mean = tuple(image_mean)
        self.image_std = tuple(image_std)

    def target_size(self, width: int, height: int, img_num: int = 1) -> tuple[int, int]:
        return self.rule.target_size(width, height, img_num)

    def draft_size(self, width: int, height: int) -> tuple[int, int]:
        """Smallest decoded size this transform can use for a `width` x `height` source:
        its resize target with `fast_decode`, the full size (no drafting) otherwise."""
        return self.target_size(width, height) if self.fast_decode else (width, height)

    def _size_for(self, image: Image.Image, img_num: int) -> tuple[int, int]:
        # A drafted image (fast_decode) carries its original size; others use image.size.
        original: tuple[int, int] = image.info.get(ORIGINAL_SIZE_KEY, image.size)
        return self.target_size(*original, img_num=img_num)

    @seam("resize")
    def resize(self, image: Image.Image, img_num: int = 1) -> Image.Image:
        size = self._size_for(image, img_num)
        if size == image.size:
            return image
        if self.resize_backend == "torch":
            rgbx = self._torch_resized(image, size)
            return Image.frombuffer("RGBX", size, rgbx, "raw", "RGBX", 0, 1).convert("RGB")
        return image.resize(size, self._filter)

    def _torch_resized(self, image: Image.Image, size: tuple[int, int]) -> np.ndarray:
        """`(h, w, 4)` uint8 RGBX storage of `image` resized by torch (resize_backend: torch)."""
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        storage = rgbx_storage(rgb)
        if storage is None:  # older Pillow, or an image in several memory blocks
            storage = np.asarray(rgb.convert("RGBA"))
        return resize_rgbx_storage(storage, size, self.resample).numpy()

    @seam("to_uint8")
    def pending(self, image: Image.Image) -> PendingImage:
        """An (already resized) image's pixels, with this transform's mean / std, to convert."""
        return pending_image(image if image.mode == "RGB" else image.convert("RGB"), self.image_mean, self.image_std)

    @seam("prepare")
    def prepare(self, image: Image.Image, img_num: int = 1) -> PendingImage:
        """Resize now, convert later: what the families hand to the packer, which writes
        the floats straight into the batch (`media/convert.py`). Same values as `__call__`."""
        size = self._size_for(image, img_num)
        if self.resize_backend == "torch" and size != image.size:  # the RGBX bytes, without a Pillow image
            return pending_rgbx(self._torch_resized(image, size), self.image_mean, self.image_std)
        return self.pending(self.resize(image, img_num=img_num))

    @seam("tensorize")
    def to_tensor(self, image: Image.Image) -> torch.Tensor:
        """`(x / 255 - mean) / std` in float32, `(C, H, W)`: ToTensor + Normalize, bit for bit."""
        return self.pending(image).tensor()

    def __call__(self, image: Image.Image, img_num: int = 1) -> torch.Tensor:
        return self.to_tensor(self.resize(image, img_num=img_num))

    def num_tokens(self, tensor: torch.Tensor) -> int:
        """Tokens an image tensor made by this transform counts for."""
        return image_tokens(tensor.shape[1], tensor.shape[2], self.stride)

    def __repr__(self) -> str:
        r = self.rule
        return (
            f"ImageTransform(max_image_size={r.max_size}, min_image_size={r.min_size}, "
            f"image_stride={r.stride}, max_pixels={r.max_pixels}"
            + (", fast_decode=True" if self.fast_decode else "")
            + (f", resample={self.resample!r}" if self.resample != "bicubic" else "")
            + (f", resize_backend={self.resize_backend!r})" if self.resize_backend != "pillow" else ")")
        )


def image_tokens(height: int, width: int, stride: int) -> int:
    """The tokens an image of `height` x `width` pixels counts for on a `stride` patch grid."""
    return height * width // stride**2


def fast_draft_size(*transforms: ImageTransform):
    """The `draft_size` to decode with for these transforms: None (exact decode) unless one
    of them asked for `fast_decode`; then the largest size any of them needs."""
    if not any(transform.fast_decode for transform in transforms):
        return None
    from .fast_decode import joint_draft_size

    return joint_draft_size(*transforms)
