"""The opt-in approximate resize (`resize_backend: torch`): torch's antialiased `interpolate`
on uint8 pixels instead of Pillow's `Image.resize`.

Both are the same separable convolution (Pillow's bicubic with a = -0.5, or its triangle
filter for bilinear, stretched by the scale when shrinking), computed with different
fixed-point rounding: on photos every value lies within 2 levels of Pillow's, and torch's
uint8 kernel (AVX2 on x86, for 3 or 4 channels in channels-last order) is several times
faster on one thread (docs/performance.md has the measured speed and PSNR). Shapes and
token counts are the exact path's; pixel values are not, so the exact path (`pillow`) stays
the default and `compat="bagel"` does not change this setting.

The input is Pillow's RGBX storage viewed in place (4 bytes a pixel, which is channels-last
`(1, 4, H, W)` as torch sees it): no copy before the kernel.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .convert import _as_tensor

RESIZE_BACKENDS = ("pillow", "torch")


def resize_rgbx(pixels: np.ndarray, size: tuple[int, int], resample: str) -> torch.Tensor:
    """`(H, W, 4)` uint8 RGBX `pixels` resized to `size` = (width, height) with torch's
    antialiased `resample` ("bicubic" or "bilinear"): the `(3, h, w)` uint8 RGB planes."""
    if pixels.ndim != 3 or pixels.shape[2] != 4 or pixels.dtype != np.uint8:
        raise ValueError(f"expected (H, W, 4) uint8 pixels, got {pixels.dtype} {pixels.shape}")
    width, height = size
    channels_last = _as_tensor(pixels).permute(2, 0, 1).unsqueeze(0)
    resized = F.interpolate(channels_last, size=(height, width), mode=resample, antialias=True)
    return resized[0, :3]
