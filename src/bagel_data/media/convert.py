"""uint8 RGB pixels -> normalized float32, written once, straight into their final place.

A `PendingImage` is a resized image that is not converted yet: its HWC uint8 pixels and the
mean / std of the transform that made it (1 byte per value instead of 4 while a sample
waits in the packer's buffer). The conversion is the reference's `ToTensor` + `Normalize`,
`(x / 255 - mean) / std`, each step one IEEE float32 operation in that order, so every
writer here is bit-identical to it (tests/media/test_convert.py checks all 256 levels for
several mean / std). The writers:

* `write_chw(dest, pixels, ...)`: into a `(3, H, W)` view, e.g. a slot of `padded_images`;
* `write_patches(dest, pixels, p, ...)`: into `(H/p * W/p, p*p*3)` rows in patch order
  (row, column, then (i, j, channel) within the patch), e.g. rows of `packed_vit_tokens`.

Both work in blocks of rows of at most 4 MiB of output, so the four passes (widen, divide,
subtract, divide) run in the cache and memory sees one write per value.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import torch

_BLOCK_VALUES = 1 << 20  # float32 values per block: 4 MiB, inside the L3 cache


@dataclasses.dataclass(frozen=True, eq=False)
class PendingImage:
    """A resized image awaiting conversion: `pixels` is `(H, W, 3)` uint8, C-contiguous."""

    pixels: np.ndarray
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, int, int]:
        """`(C, H, W)`, the shape of the float tensor it converts to."""
        height, width, channels = self.pixels.shape
        return (channels, height, width)

    def tensor(self) -> torch.Tensor:
        """The normalized float32 `(C, H, W)` tensor, in a fresh buffer."""
        out = torch.empty(self.shape, dtype=torch.float32)
        write_chw(out, self.pixels, self.mean, self.std)
        return out


def _as_tensor(pixels: np.ndarray) -> torch.Tensor:
    pixels = np.ascontiguousarray(pixels)
    if pixels.flags.writeable:
        return torch.from_numpy(pixels)
    with warnings.catch_warnings():  # Pillow's arrays are read-only; these tensors are only read
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(pixels)


def _scalars(values: tuple[float, ...]) -> list[torch.Tensor]:
    # 0-dim float32 tensors: the kernels then use exactly float32(mean), as Normalize does.
    return [torch.tensor(v, dtype=torch.float32) for v in values]


def _finish(block: torch.Tensor, mean, std) -> None:
    block.div_(255).sub_(mean).div_(std)


def write_chw(dest: torch.Tensor, pixels: np.ndarray, mean, std) -> None:
    """Normalize `(H, W, C)` uint8 `pixels` into the float32 view `dest` of shape `(C, H, W)`."""
    source = _as_tensor(pixels)
    height, width, channels = source.shape
    if tuple(dest.shape) != (channels, height, width):
        raise ValueError(f"destination {tuple(dest.shape)} does not fit an image of {(channels, height, width)}")
    means, stds = _scalars(mean), _scalars(std)
    same = len(set(mean)) == 1 and len(set(std)) == 1
    rows = max(1, _BLOCK_VALUES // max(1, width * channels))
    for top in range(0, height, rows):
        block = dest[:, top : top + rows]
        block.copy_(source[top : top + rows].permute(2, 0, 1))
        if same:
            _finish(block, means[0], stds[0])
        else:
            for c in range(channels):
                _finish(block[c], means[c], stds[c])


def write_patches(dest: torch.Tensor, pixels: np.ndarray, patch: int, mean, std) -> None:
    """Normalize `(H, W, C)` uint8 `pixels` into `dest`, `(H/p * W/p, p*p*C)` float32 rows in
    patch order: the same values as `patchify` of the converted `(C, H, W)` tensor."""
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
    patches = source.view(rows_p, p, cols_p, p, channels).permute(0, 2, 1, 3, 4)
    if len(set(mean)) == 1 and len(set(std)) == 1:
        mean_row, std_row = _scalars(mean[:1])[0], _scalars(std[:1])[0]
    else:  # one value per column of a patch row: (i, j, channel) -> the channel's mean / std
        mean_row = torch.tensor(mean, dtype=torch.float32).repeat(p * p)
        std_row = torch.tensor(std, dtype=torch.float32).repeat(p * p)
    step = max(1, _BLOCK_VALUES // max(1, width * p * channels))
    for top in range(0, rows_p, step):
        grid[top : top + step].copy_(patches[top : top + step])
        _finish(dest[top * cols_p : (top + step) * cols_p], mean_row, std_row)


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
        write_patches(dest, self.image.pixels, self.patch, self.image.mean, self.image.std)


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
