"""uint8 RGB pixels -> normalized float32, written once, straight into their final place.

A `PendingImage` is a resized image that is not converted yet: its HWC uint8 pixels and the
mean / std of the transform that made it (1 byte per value instead of 4 while a sample
waits in the packer's buffer). The conversion is the reference's `ToTensor` + `Normalize`,
`(x / 255 - mean) / std`, each step one IEEE float32 operation in that order, so every
writer here is bit-identical to it (tests/media/test_convert.py checks all 256 levels for
several mean / std). The writers:

* `write_chw(dest, pixels, ...)`: into a `(3, H, W)` view, e.g. a slot of `padded_images`
  (`write_chw_from_words` when the pixels are 4-byte words: faster, same values);
* `write_patches(dest, pixels, p, ...)`: into `(H/p * W/p, p*p*3)` rows in patch order
  (row, column, then (i, j, channel) within the patch), e.g. rows of `packed_vit_tokens`.

Both work in blocks of rows that stay in the cache, so memory sees one write per value.
`pixels` may be a strided view (the RGB bytes of Pillow's 4-byte RGBX storage): each
channel is read where it lies, or shifted out of the 32-bit words, with no separate
de-interleaving pass.

Speed: where two float32 operations, `x / (255 std) - mean / std`, give the reference's
three-step value for every one of the 256 levels (true of the BAGEL default 0.5 / 0.5:
`x / 127.5 - 1`), the writers use them, after casting in place.
`two_step_plan` proves that equality on this machine's kernels, once per (mean, std),
before it is used; otherwise the writers take the three steps.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

_BLOCK_VALUES = 1 << 18  # float32 values per block: 1 MiB, inside the L2 cache


@dataclasses.dataclass(frozen=True, eq=False)
class PendingImage:
    """A resized image awaiting conversion: `pixels` is `(H, W, 3)` uint8, possibly strided."""

    pixels: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]
    # The RGB Pillow image that `pixels` views, if any: Pillow packs its 4-byte pixels into
    # 3-byte ones several times faster than a strided copy does (see `packed_pixels`).
    source: Image.Image | None = None
    # The same pixels as `(H, W)` int32 words, R in the low byte (Pillow's RGBX storage on a
    # little-endian machine), if any: `write_into` then takes each channel out with
    # contiguous shifts and masks instead of a strided read.
    words: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """`(C, H, W)`, the shape of the float tensor it converts to."""
        height, width, channels = self.pixels.shape
        return (channels, height, width)

    def tensor(self) -> torch.Tensor:
        """The normalized float32 `(C, H, W)` tensor, in a fresh buffer."""
        out = torch.empty(self.shape, dtype=torch.float32)
        self.write_into(out)
        return out

    def write_into(self, dest: torch.Tensor) -> None:
        """Normalize into the float32 `(C, H, W)` view `dest`, e.g. a slot of `padded_images`."""
        if self.words is not None:
            write_chw_from_words(dest, self.words, self.mean, self.std)
        else:
            write_chw(dest, self.pixels, self.mean, self.std)

    def packed_pixels(self) -> np.ndarray:
        """`pixels`, C-contiguous: what patch order reads (whole pixels, not channels)."""
        if self.pixels.flags.c_contiguous:
            return self.pixels
        if self.source is not None:
            return np.asarray(self.source)
        if self.words is not None and self.words.flags.c_contiguous:
            return packed_rgb(self.words)
        return np.ascontiguousarray(self.pixels)


def packed_rgb(words: np.ndarray) -> np.ndarray:
    """`(H, W, 3)` uint8 RGB, C-contiguous, from the `(H, W)` C-contiguous RGBX `words` (R in
    the low byte): Pillow's RGBX -> RGB packer over the words' memory, several times faster
    than numpy's strided copy of the same bytes (docs/performance.md)."""
    height, width = words.shape
    rgbx = Image.frombuffer("RGBX", (width, height), words, "raw", "RGBX", 0, 1)
    return np.frombuffer(rgbx.tobytes("raw", "RGB"), dtype=np.uint8).reshape(height, width, 3)


def _as_tensor(pixels: np.ndarray) -> torch.Tensor:
    if pixels.flags.writeable:
        return torch.from_numpy(pixels)
    with warnings.catch_warnings():  # Pillow's arrays are read-only; these tensors are only read
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(pixels)


def _scalar(value: float) -> torch.Tensor:
    # A 0-dim float32 tensor: the kernels then use exactly float32(value), as Normalize does.
    return torch.tensor(value, dtype=torch.float32)


def _three_steps(dest: torch.Tensor, source: torch.Tensor, mean, std) -> None:
    """The reference's steps: cast, / 255, - mean, / std (`mean`, `std`: float32 tensors)."""
    dest.copy_(source)
    dest.div_(255).sub_(mean).div_(std)


@functools.lru_cache(maxsize=64)
def two_step_plan(mean: float, std: float) -> tuple[float, float] | None:
    """`(divisor, offset)` when `x / divisor - offset` equals `(x / 255 - mean) / std` in
    float32 for every uint8 `x`, as this process's kernels compute both; else None.

    Each output value depends only on its input level, so checking the 256 levels is a
    proof for any image. They are checked as the writers read them (contiguous and strided
    uint8, int32 words; long enough for the vector loops and their scalar tails)."""
    divisor, offset = float(np.float32(255.0) * np.float32(std)), float(np.float32(mean) / np.float32(std))
    if not (np.isfinite(divisor) and np.isfinite(offset)) or divisor == 0:
        return None
    levels = torch.arange(256, dtype=torch.uint8).repeat(67)[: 256 * 67 - 5]
    strided = torch.stack([levels, levels.flip(0), levels, levels], dim=1)[:, 1]
    for source in (levels, strided, levels.to(torch.int32)):
        expected = torch.empty(source.shape, dtype=torch.float32)
        _three_steps(expected, source, _scalar(mean), _scalar(std))
        got = torch.empty(source.shape, dtype=torch.float32)
        _two_steps(got, source, divisor, offset)
        if not torch.equal(got.view(torch.int32), expected.view(torch.int32)):  # bits: -0.0 is not 0.0
            return None
    # The numpy writer's two steps (write_chw_from_words), on int32 levels as it reads them.
    got_numpy = np.empty(len(levels), dtype=np.float32)
    np.divide(levels.numpy().astype(np.int32), np.float32(divisor), out=got_numpy, casting="unsafe", dtype=np.float32)
    np.subtract(got_numpy, np.float32(offset), out=got_numpy)
    if not np.array_equal(got_numpy.view(np.int32), expected.numpy().view(np.int32)):
        return None
    return divisor, offset


def _two_steps(dest: torch.Tensor, source: torch.Tensor, divisor: float, offset: float) -> None:
    # Cast in place first: `torch.div(uint8 or int32 source, out=float32)` would allocate a
    # float temporary per call for the promotion, which costs more than the division.
    dest.copy_(source)
    dest.div_(divisor).sub_(offset)


def _normalizer(mean: float, std: float) -> Callable[[torch.Tensor, torch.Tensor], object]:
    """`normalize(dest, source)` for one channel's mean / std (`source`: levels 0-255 as
    uint8 or int32): the proven two steps where `two_step_plan` allows, else the three.
    Made once per image and channel, outside the block loops."""
    plan = two_step_plan(float(mean), float(std))
    if plan is None:
        mean_t, std_t = _scalar(mean), _scalar(std)
        return lambda dest, source: _three_steps(dest, source, mean_t, std_t)
    divisor, offset = plan
    return lambda dest, source: _two_steps(dest, source, divisor, offset)


def write_chw(dest: torch.Tensor, pixels: np.ndarray, mean, std) -> None:
    """Normalize `(H, W, C)` uint8 `pixels` into the float32 view `dest` of shape `(C, H, W)`."""
    source = _as_tensor(pixels)
    height, width, channels = source.shape
    if tuple(dest.shape) != (channels, height, width):
        raise ValueError(f"destination {tuple(dest.shape)} does not fit an image of {(channels, height, width)}")
    normalize = [_normalizer(mean[c], std[c]) for c in range(channels)]
    rows = max(1, _BLOCK_VALUES // max(1, width))
    for top in range(0, height, rows):
        for c in range(channels):
            normalize[c](dest[c, top : top + rows], source[top : top + rows, :, c])


def _numpy_normalizer(mean: float, std: float) -> Callable[[np.ndarray, np.ndarray], object]:
    """`normalize(dest, source)` with numpy ufuncs, for int32 levels into float32 `dest`:
    the int -> float cast happens inside the division's own small buffers, so the channel
    is read once and the float block written twice (divide, subtract) while it is in cache.

    numpy and torch divide and subtract float32 with the same correctly rounded IEEE
    instructions, so the two-step plan proven on torch's kernels holds here too (and
    `two_step_plan` checks this writer as well)."""
    plan = two_step_plan(float(mean), float(std))
    if plan is None:
        mean32, std32 = np.float32(mean), np.float32(std)

        def three(dest: np.ndarray, source: np.ndarray) -> None:
            np.divide(source, np.float32(255), out=dest, casting="unsafe", dtype=np.float32)
            np.subtract(dest, mean32, out=dest)
            np.divide(dest, std32, out=dest)

        return three
    divisor, offset = np.float32(plan[0]), np.float32(plan[1])

    def two(dest: np.ndarray, source: np.ndarray) -> None:
        np.divide(source, divisor, out=dest, casting="unsafe", dtype=np.float32)
        np.subtract(dest, offset, out=dest)

    return two


# Rows of int32 words per block of `write_chw_from_words`: 64 K values, 256 KiB per channel
# block; measured fastest of 16-128 rows at 1024 px wide (smaller blocks pay numpy's per-call
# cost more often, larger ones leave the cache).
_WORD_BLOCK_VALUES = 1 << 16


def write_chw_from_words(dest: torch.Tensor, words: np.ndarray, mean, std) -> None:
    """`write_chw` of 4-byte pixels given as `(H, W)` int32 words, channel c in bits 8c..8c+7
    (the 4th byte is ignored): every pass reads and writes contiguously.

    numpy, not torch: its ufuncs cast inside the division and cost less per call, which
    brings the conversion to ~1.2x a plain casting copy (docs/performance.md)."""
    height, width = words.shape
    if tuple(dest.shape) != (3, height, width):
        raise ValueError(f"destination {tuple(dest.shape)} does not fit an image of {(3, height, width)}")
    out = dest.numpy()
    normalize = [_numpy_normalizer(mean[c], std[c]) for c in range(3)]
    rows = max(1, _WORD_BLOCK_VALUES // max(1, width))
    channel = np.empty((min(rows, height), width), dtype=np.int32)
    for top in range(0, height, rows):
        block = words[top : top + rows]
        part = channel[: block.shape[0]]
        for c in range(3):
            if c:
                np.right_shift(block, 8 * c, out=part)
                np.bitwise_and(part, 255, out=part)
            else:
                np.bitwise_and(block, 255, out=part)
            normalize[c](out[c, top : top + rows], part)


def write_patches(dest: torch.Tensor, pixels: np.ndarray, patch: int, mean, std) -> None:
    """Normalize `(H, W, C)` uint8 `pixels` into `dest`, `(H/p * W/p, p*p*C)` float32 rows in
    patch order: the same values as `patchify` of the converted `(C, H, W)` tensor. Fastest
    with C-contiguous `pixels` (`PendingImage.packed_pixels`)."""
    source = _as_tensor(pixels)
    height, width, channels = source.shape
    p = patch
    if height % p or width % p:
        raise ValueError(f"image of {height}x{width} is not a multiple of the patch size {p}")
    rows_p, cols_p = height // p, width // p
    if tuple(dest.shape) != (rows_p * cols_p, p * p * channels):
        raise ValueError(
            f"destination {tuple(dest.shape)} does not fit {rows_p * cols_p} patches of {p * p * channels}"
        )
    grid = dest.view(rows_p, cols_p, p, p, channels)
    patches = source.contiguous().view(rows_p, p, cols_p, p, channels).permute(0, 2, 1, 3, 4)
    step = max(1, _BLOCK_VALUES // max(1, width * p * channels))
    uniform = len(set(mean)) == 1 and len(set(std)) == 1
    normalize = _normalizer(mean[0], std[0])
    # A patch row interleaves the channels: otherwise one mean / std per column, three steps.
    per_column = None if uniform else (_per_column(mean, p), _per_column(std, p))
    for top in range(0, rows_p, step):
        if per_column is None:
            normalize(grid[top : top + step], patches[top : top + step])
        else:
            grid[top : top + step].copy_(patches[top : top + step])
            mean_row, std_row = per_column
            dest[top * cols_p : (top + step) * cols_p].div_(255).sub_(mean_row).div_(std_row)


def _per_column(values: tuple[float, ...], patch: int) -> torch.Tensor:
    """One value per column of a patch row, `(i, j, channel)` -> the channel's value."""
    return torch.tensor(values, dtype=torch.float32).repeat(patch * patch)


@dataclasses.dataclass(frozen=True, eq=False)
class PendingPatches:
    """`patchify` of a `PendingImage`: `len()` patches, written by `write_into`."""

    image: PendingImage
    patch: int

    def __len__(self) -> int:
        _, height, width = self.image.shape
        return (height // self.patch) * (width // self.patch)

    @property
    def width(self) -> int:
        return self.patch * self.patch * self.image.shape[0]

    def write_into(self, dest: torch.Tensor) -> None:
        image = self.image
        write_patches(dest, image.packed_pixels(), self.patch, image.mean, image.std)


def materialize(images: list) -> list[torch.Tensor]:
    """`image_tensor_list` with every `PendingImage` converted; one used twice stays one tensor."""
    done: dict[int, torch.Tensor] = {}
    out = []
    for image in images:
        if isinstance(image, PendingImage):
            if id(image) not in done:
                done[id(image)] = image.tensor()
            image = done[id(image)]
        out.append(image)
    return out
