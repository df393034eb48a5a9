"""uint8 pixel transport (`pixel_format: uint8`): the resized pixels leave as bytes, with the
mean / std each image needs, and `normalize_pixels` makes the float32 tensors of the default
format from them, bit for bit, on whatever device they are on.

Why: the float32 batch is 4 bytes per pixel value, written on the CPU through a strided,
casting copy, sent through shared memory and then to the GPU, where the model casts it to
bf16 anyway. As bytes, each of those costs a quarter (docs/performance.md has the figures).

The batch with `pixel_format: uint8` (docs/formats/batch.md):

* `padded_images`: `uint8 [N, C, H_max, W_max]`, the resized pixels, padding bytes zero;
  `padded_images_mean` / `padded_images_std`: `float32 [N, C]`, each image's transform mean /
  std; `padded_images_sizes`: `int64 [N, 2]`, each image's `(H, W)` (its padding is normalized
  to 0.0, as the float path pads, which no byte value would normalize to).
* `packed_vit_tokens`: `uint8 [P, p*p*C]` in patch order; `packed_vit_tokens_mean` /
  `packed_vit_tokens_std`: `float32 [N_vit, C]`, one row per ViT image, expanded over its
  `vit_token_seqlens[i]` patch rows.

`normalize_pixels(batch)` replaces the two uint8 tensors by float32 ones and removes the five
side keys, so the dict holds exactly the default format's keys again (BAGEL's trainer passes
every key to the model). Exactness: the float path computes each value as
`float32(x) / 255 - mean`, then `/ std`, one IEEE float32 operation each (convert.py; its two-step
shortcut is used only where proven equal to that). `normalize_pixels` runs the same three
elementwise operations in the same order, with every operand a tensor on the pixels' device:
CUDA divides by a CPU scalar as a multiply by its reciprocal, which rounds differently, while a
tensor divisor is a true division. Nothing is fused, and the padding is set, not computed.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import ConfigError
from ..instruments import seam
from .convert import PendingImage, PendingPatches

SIDE_KEYS = {
    "padded_images": ("padded_images_mean", "padded_images_std", "padded_images_sizes"),
    "packed_vit_tokens": ("packed_vit_tokens_mean", "packed_vit_tokens_std"),
}


def _not_pending(what: str, image) -> ConfigError:
    return ConfigError(
        "pixel_format",
        "uint8",
        f"a {what} arrived as a {type(image).__name__}, not as resized pixels (a family that makes its own "
        "float tensors); uint8 needs images from ImageTransform.prepare, or use pixel_format: float32",
    )


def _write_chw(dest: np.ndarray, image: PendingImage) -> None:
    """The `(H, W, C)` pixels of `image` into the `(C, H, W)` uint8 view `dest` (a plain,
    possibly strided byte copy: numpy's is the fastest measured)."""
    np.copyto(dest, image.pixels.transpose(2, 0, 1))


@seam("convert_vae")
def pad_pixels(images: list, pool=None) -> dict[str, torch.Tensor]:
    """`padded_images` as bytes (zero-padded bottom/right) with its side tensors, in a buffer
    of the packer's `pool` (`packing/buffers.py`) when given, else in a fresh tensor."""
    for image in images:
        if not isinstance(image, PendingImage):
            raise _not_pending("VAE image", image)
    channels = {image.shape[0] for image in images}
    if len(channels) != 1:
        raise ValueError(f"VAE images of {sorted(channels)} channels in one pack")
    c = channels.pop()
    height = max(image.shape[1] for image in images)
    width = max(image.shape[2] for image in images)
    shape = (len(images), c, height, width)
    if pool is not None:
        padded, zeroed = pool.float32(shape, dtype=torch.uint8)
    else:
        padded, zeroed = torch.zeros(shape, dtype=torch.uint8), True
    array = padded.numpy()
    for index, image in enumerate(images):
        _, h, w = image.shape
        _write_chw(array[index, :, :h, :w], image)
        if not zeroed:  # a reused buffer: clear only what the image does not cover
            array[index, :, :h, w:] = 0
            array[index, :, h:, :] = 0
    return {
        "padded_images": padded,
        "padded_images_mean": torch.tensor([image.mean for image in images], dtype=torch.float32),
        "padded_images_std": torch.tensor([image.std for image in images], dtype=torch.float32),
        "padded_images_sizes": torch.tensor([image.shape[1:] for image in images], dtype=torch.int64),
    }


def _write_patches(dest: np.ndarray, image: PendingImage, p: int) -> None:
    """The pixels of `image` into `(H/p * W/p, p*p*C)` uint8 rows in patch order (row,
    column, then (i, j, channel) within the patch): `patchify`'s order. From packed RGB
    (`packed_pixels`): whole pixels are copied, several times faster than from RGBX."""
    pixels = image.packed_pixels()
    height, width, c = pixels.shape
    rows_p, cols_p = height // p, width // p
    grid = dest.reshape(rows_p, cols_p, p, p, c)
    np.copyto(grid, pixels.reshape(rows_p, p, cols_p, p, c).transpose(0, 2, 1, 3, 4))


@seam("convert_vit")
def stack_pixel_patches(parts: list, pool=None) -> dict[str, torch.Tensor]:
    """`packed_vit_tokens` as bytes with its side tensors (`parts`: `PendingPatches`), in a
    buffer of the packer's `pool` when given, else in a fresh tensor."""
    for part in parts:
        if not isinstance(part, PendingPatches):
            raise _not_pending("ViT image", part)
    shape = (sum(len(part) for part in parts), parts[0].width)
    out = pool.empty(shape, dtype=torch.uint8) if pool is not None else torch.empty(shape, dtype=torch.uint8)
    array, row = out.numpy(), 0
    for part in parts:
        _write_patches(array[row : row + len(part)], part.image, part.patch)
        row += len(part)
    return {
        "packed_vit_tokens": out,
        "packed_vit_tokens_mean": torch.tensor([part.image.mean for part in parts], dtype=torch.float32),
        "packed_vit_tokens_std": torch.tensor([part.image.std for part in parts], dtype=torch.float32),
    }


def _normalized(pixels: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """`(float32(x) / 255 - mean) / std`, three float32 operations in this order; `mean` /
    `std` broadcast against `pixels` and live on its device, as does the 255."""
    out = pixels.to(torch.float32)
    out.div_(torch.full((), 255.0, dtype=torch.float32, device=pixels.device))
    out.sub_(mean)
    out.div_(std)
    return out


def _normalized_padded(batch: dict) -> torch.Tensor:
    pixels = batch["padded_images"]
    mean, std, sizes = (batch[key] for key in SIDE_KEYS["padded_images"])
    out = _normalized(pixels, mean[:, :, None, None], std[:, :, None, None])
    # Padding is 0.0 in the float path: set here (no byte normalizes to it), no host sync.
    _, _, height, width = pixels.shape
    rows = torch.arange(height, device=pixels.device)
    cols = torch.arange(width, device=pixels.device)
    outside = (rows[None, :, None] >= sizes[:, 0, None, None]) | (cols[None, None, :] >= sizes[:, 1, None, None])
    return out.masked_fill_(outside[:, None], 0.0)


def _normalized_tokens(batch: dict) -> torch.Tensor:
    tokens = batch["packed_vit_tokens"]
    mean, std = (batch[key] for key in SIDE_KEYS["packed_vit_tokens"])
    channels = mean.shape[1]
    seqlens = batch["vit_token_seqlens"].to(tokens.device)
    rows = tokens.shape[0]  # output_size: no host sync to learn the expanded length
    mean_rows = torch.repeat_interleave(mean, seqlens, dim=0, output_size=rows)[:, None, :]
    std_rows = torch.repeat_interleave(std, seqlens, dim=0, output_size=rows)[:, None, :]
    # A row is (i, j, channel) within the patch: channel is the fastest-moving index.
    out = _normalized(tokens.view(rows, -1, channels), mean_rows, std_rows)
    return out.view(tokens.shape)


def normalize_pixels(batch: dict) -> dict:
    """The float32 batch of the default format from a `pixel_format: uint8` batch, in place
    (also returned): `padded_images` and `packed_vit_tokens` become float32, bit-identical to
    what `pixel_format: float32` gives, and their side keys are removed. Run it after moving
    the batch to the GPU (4x fewer bytes to move). A float32 batch is returned unchanged."""
    for key, normalize in (("padded_images", _normalized_padded), ("packed_vit_tokens", _normalized_tokens)):
        value = batch.get(key)
        if value is None or value.dtype != torch.uint8:
            continue
        missing = [side for side in SIDE_KEYS[key] if side not in batch]
        if missing:
            raise KeyError(f"a uint8 {key} needs {missing} in the batch (pixel_format: uint8 puts them there)")
        batch[key] = normalize(batch)
        for side in SIDE_KEYS[key]:
            del batch[side]
    return batch


def has_raw_pixels(batch: dict) -> bool:
    """Whether `batch` still holds uint8 pixels that `normalize_pixels` has to convert."""
    return any(isinstance(batch.get(key), torch.Tensor) and batch[key].dtype == torch.uint8 for key in SIDE_KEYS)


def raw_pixel_problem(batch: dict) -> str | None:
    """What is wrong with a `pixel_format: uint8` batch's pixel fields (dtypes, side-tensor
    shapes), or None: `check_batch` runs it before checking the normalized batch."""
    counts = {"padded_images": lambda: batch["padded_images"].shape[0]}
    counts["packed_vit_tokens"] = lambda: len(batch["vit_token_seqlens"])
    for key, sides in SIDE_KEYS.items():
        if key not in batch:
            present = [side for side in sides if side in batch]
            if present:
                return f"{present} present without {key}"
            continue
        if batch[key].dtype != torch.uint8:
            return f"{key} is {batch[key].dtype}, not uint8 (pixel_format: uint8)"
        channels = batch[key].shape[1] if key == "padded_images" else None
        for side in sides:
            if side not in batch:
                return f"{key} is uint8 but {side!r} is missing"
            value, want = batch[side], (counts[key](), 2 if side.endswith("sizes") else channels)
            dtype = torch.int64 if side.endswith("sizes") else torch.float32
            if value.dtype != dtype or value.dim() != 2 or value.shape[0] != want[0]:
                return f"{side} is {value.dtype} {tuple(value.shape)}, not {dtype} with {want[0]} rows"
            if want[1] is not None and value.shape[1] != want[1]:
                return f"{side} has {value.shape[1]} columns, not {want[1]}"
    return None
