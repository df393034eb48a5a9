"""The opt-in approximate resize (`resize_backend: torch`): torch's antialiased `interpolate`
on uint8 pixels instead of Pillow's `Image.resize`.

Both are the same separable convolution (Pillow's bicubic with a = -0.5, or its triangle
filter for bilinear, stretched by the scale when shrinking), computed with different
fixed-point rounding: on photos every value lies within 2 levels of Pillow's, and torch's
uint8 kernel (AVX2 on x86, for 3 or 4 channels in channels-last order) is several times
faster on one thread (docs/performance.md has the measured speed and PSNR). Shapes and
token counts are the exact path's; pixel values are not, so the exact path (`pillow`) stays
the default and `compat="bagel"` does not change this setting.

The input is Pillow's RGBX storage viewed in place (4 bytes a pixel): no copy before the
kernel. Its batch dimension is added before the permute, so that torch sees a channels-last
tensor (a batch stride of H*W*4; unsqueezing after the permute gives a stride of 4, which
torch does not count as channels-last): the kernel then writes RGBX out as well, about twice
as fast as when it is asked for planes, and the output is a Pillow-shaped storage that the
packer reads whole pixels from (docs/performance.md).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .convert import _as_tensor

RESIZE_BACKENDS = ("pillow", "torch")


def resize_rgbx_storage(pixels: np.ndarray, size: tuple[int, int], resample: str) -> torch.Tensor:
    """`(H, W, 4)` uint8 RGBX `pixels` resized to `size` = (width, height) with torch's
    antialiased `resample` ("bicubic" or "bilinear"): `(h, w, 4)` uint8 RGBX, C-contiguous
    (the fourth byte is the resized padding byte, meaningless)."""
    if pixels.ndim != 3 or pixels.shape[2] != 4 or pixels.dtype != np.uint8:
        raise ValueError(f"expected (H, W, 4) uint8 pixels, got {pixels.dtype} {pixels.shape}")
    width, height = size
    channels_last = _as_tensor(pixels).unsqueeze(0).permute(0, 3, 1, 2)
    resized = F.interpolate(channels_last, size=(height, width), mode=resample, antialias=True)
    return resized[0].permute(1, 2, 0).contiguous()  # no copy where the kernel wrote RGBX


def resize_rgbx(pixels: np.ndarray, size: tuple[int, int], resample: str) -> torch.Tensor:
    """`resize_rgbx_storage` as `(3, h, w)` uint8 RGB planes (a strided view of it)."""
    return resize_rgbx_storage(pixels, size, resample).permute(2, 0, 1)[:3]
