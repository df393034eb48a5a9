"""The arithmetic of a pack: patches, rotary/position ids, loss weights, attention masks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..instruments import seam
from ..media.convert import PendingImage, PendingPatches


def patchify(image: torch.Tensor, patch_size: int) -> torch.Tensor:
    """`(C, H, W)` -> `(H/p * W/p, p*p*C)`, each patch ordered (row, column, channel).

    A `PendingImage` gives a `PendingPatches`, written later straight into the batch."""
    p = patch_size
    c, h, w = image.shape
    if h % p or w % p:
        raise ValueError(f"image of {h}x{w} is not a multiple of the patch size {p}")
    if isinstance(image, PendingImage):
        return PendingPatches(image, p)
    patches = image.reshape(c, h // p, p, w // p, p).permute(1, 3, 2, 4, 0)
    return patches.reshape(-1, p * p * c)


def get_flattened_position_ids_extrapolate(img_h: int, img_w: int, patch_size: int, max_num_patches_per_side: int):
    """`row * m + col` for each patch, row-major."""
    rows = torch.arange(img_h // patch_size)
    cols = torch.arange(img_w // patch_size)
    return (rows[:, None] * max_num_patches_per_side + cols).flatten()


def get_flattened_position_ids_interpolate(img_h: int, img_w: int, patch_size: int, max_num_patches_per_side: int):
    """Patch coordinates scaled to [0, 1) and bucketed onto an `m x m` grid."""
    m = max_num_patches_per_side
    boundaries = torch.arange(1 / m, 1.0, 1 / m)
    rows = torch.bucketize(torch.arange(0, 1 - 1e-6, 1 / (img_h // patch_size)), boundaries, right=True)
    cols = torch.bucketize(torch.arange(0, 1 - 1e-6, 1 / (img_w // patch_size)), boundaries, right=True)
    return (rows[:, None] * m + cols).flatten()


def len2weight(x: int, loss_reduction: str = "square") -> float:
    """Per-token loss weight of a text of `x` tokens: `1/sqrt(x)` by default."""
    if x == 0:
        return 0
    if loss_reduction == "token":
        return 1
    if loss_reduction == "sample":
        return 1 / x
    if loss_reduction == "square":
        return 1 / (x**0.5)
    raise ValueError(f"loss_reduction={loss_reduction!r}: use 'square', 'sample' or 'token'")


def attention_allowed(split_lens: Sequence[int], attn_modes: Sequence[str]) -> np.ndarray:
    """Boolean `L x L` matrix, True where query row may attend to key column.

    Causal splits see earlier positions and themselves causally; full and noise splits see
    earlier positions and their whole split; nothing outside a noise split sees into it.
    """
    total = int(sum(split_lens))
    allowed = np.zeros((total, total), dtype=bool)
    start = 0
    noise_spans = []
    for length, mode in zip(split_lens, attn_modes):
        if mode not in ("causal", "full", "noise"):
            raise ValueError(f"attention mode {mode!r}: use 'causal', 'full' or 'noise'")
        end = start + length
        allowed[start:end, :start] = True
        if mode == "causal":
            allowed[start:end, start:end] = np.tri(length, dtype=bool)
        else:
            allowed[start:end, start:end] = True
        if mode == "noise":
            noise_spans.append((start, end))
        start = end
    for start, end in noise_spans:
        allowed[:, start:end] = False
        allowed[start:end, start:end] = True
    return allowed


@seam("mask")
def prepare_attention_mask_per_sample(split_lens: Sequence[int], attn_modes: Sequence[str], device="cpu"):
    """Additive float mask of one sample: 0 where attention is allowed, -inf elsewhere.

    Same rule as `attention_allowed`, built by writing only the -inf entries into zeros:
    the zero pages are mapped lazily, so the allowed region costs nothing and no boolean
    or second float `L x L` matrix is made (about 10x faster; `benchmarks/NOTES.md`).
    """
    total = int(sum(split_lens))
    mask = np.zeros((total, total), dtype=np.float32)
    start, noise_spans = 0, []
    for length, mode in zip(split_lens, attn_modes):
        if mode not in ("causal", "full", "noise"):
            raise ValueError(f"attention mode {mode!r}: use 'causal', 'full' or 'noise'")
        end = start + length
        mask[start:end, end:] = -np.inf  # no position sees a later split
        if mode == "causal":
            positions = np.arange(length)
            mask[start:end, start:end][positions[None, :] > positions[:, None]] = -np.inf
        elif mode == "noise":
            noise_spans.append((start, end))
        start = end
    for start, end in noise_spans:
        mask[end:, start:end] = -np.inf  # nothing after a noise split sees into it
    return torch.from_numpy(mask).to(device)
