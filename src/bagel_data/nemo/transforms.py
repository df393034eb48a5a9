"""Mirrors `nemo_automodel.components.datasets.multimodal.transforms`: the image transforms,
and the reference's resize module `MaxLongEdgeMinShortEdgeResize` (Pillow, no torchvision)."""

from __future__ import annotations

import torch
from PIL import Image

from ..media.images import DEFAULT_MAX_PIXELS, ImageTransform, ResizeRule, pil_img2rgb

_PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}


def _mode_name(interpolation) -> str:
    """'bicubic' from a string or from an enum such as torchvision's InterpolationMode."""
    name = getattr(interpolation, "value", interpolation)
    name = str(name).lower()
    if name not in _PIL_FILTERS:
        raise ValueError(f"interpolation {interpolation!r}: use one of {sorted(_PIL_FILTERS)}")
    return name


class MaxLongEdgeMinShortEdgeResize(torch.nn.Module):
    """Aspect-preserving resize: long side at most `max_size`, short side at least
    `min_size`, at most `max_pixels / img_num` pixels, both sides multiples of `stride`.

    The geometry is `ImageTransform`'s. `forward` takes a PIL image (resized with Pillow)
    or a `(..., C, H, W)` tensor (resized with torch's interpolate); `interpolation` is a
    name ("bicubic") or any enum whose value is one, such as torchvision's InterpolationMode.
    """

    def __init__(
        self,
        max_size: int,
        min_size: int,
        stride: int,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        interpolation="bicubic",
        antialias: bool = True,
    ):
        super().__init__()
        self.max_size, self.min_size, self.stride, self.max_pixels = max_size, min_size, stride, max_pixels
        self.interpolation = _mode_name(interpolation)
        self.antialias = antialias
        self.rule = ResizeRule(max_size, min_size, stride, max_pixels)

    def forward(self, img, img_num: int = 1):
        if isinstance(img, torch.Tensor):
            height, width = img.shape[-2:]
            new_w, new_h = self.rule.target_size(int(width), int(height), img_num)
            return self._resize_tensor(img, new_h, new_w)
        width, height = img.size
        new_w, new_h = self.rule.target_size(width, height, img_num)
        return img.resize((new_w, new_h), _PIL_FILTERS[self.interpolation])

    def _resize_tensor(self, img: torch.Tensor, height: int, width: int) -> torch.Tensor:
        batched = img if img.dim() == 4 else img.reshape(-1, *img.shape[-3:])
        mode = "nearest" if self.interpolation == "nearest" else self.interpolation
        if mode == "lanczos":
            raise ValueError("lanczos resizing is only available for PIL images")
        antialias = self.antialias and mode in ("bilinear", "bicubic")
        out = torch.nn.functional.interpolate(
            batched.float(), size=(height, width), mode=mode, antialias=antialias, align_corners=None
        )
        out = out.to(img.dtype) if img.dtype.is_floating_point else out.round().clamp(0, 255).to(img.dtype)
        return out.reshape(*img.shape[:-2], height, width)


__all__ = ["ImageTransform", "MaxLongEdgeMinShortEdgeResize", "pil_img2rgb"]
