"""What-if measurements for the benchmark: `fast_decode` and the proposed fixes, each against
the current code on the same inputs in the same run.

* `measure_fast_decode`: exact vs fast decode + transform, speed and pixel difference;
* `simplejpeg_check`: where the simplejpeg package is installed (the `dev` extra), whether it
  gives Pillow's pixels per JPEG mode, and what getting them into a Pillow image costs;
* `FreshZeroPool`: a buffer pool that lends a fresh `torch.zeros` per pack, the same-run
  baseline for `packing/buffers.py` (through `PackedDataset.pad_pool_factory`).
"""

from __future__ import annotations

import copy
import io
import time

import numpy as np
import torch
from PIL import Image

from bagel_data.media.fast_decode import ORIGINAL_SIZE_KEY, joint_draft_size
from bagel_data.media.images import ImageTransform, decode_image
from bagel_data.synthetic.dataset import encode_image, photo_like_image

_now = time.perf_counter


def fast_twin(transform: ImageTransform) -> ImageTransform:
    twin = copy.copy(transform)
    twin.fast_decode = True
    return twin


class _Diff:
    """Running pixel difference between exact and fast tensors (normalized and 8-bit units)."""

    def __init__(self):
        self.abs_sum = self.sq_sum = self.max_abs = 0.0
        self.count = 0
        self.same_shapes = True

    def add(self, transform, exact, fast) -> None:
        if exact.shape != fast.shape:
            self.same_shapes = False
            return
        diff = (exact - fast).abs().double()
        self.abs_sum += float(diff.sum())
        self.sq_sum += float((diff * (255 * float(np.mean(transform.image_std)))).pow(2).sum())
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.count += diff.numel()

    def report(self) -> dict:
        mse = self.sq_sum / max(self.count, 1)
        return {
            "same_shapes": self.same_shapes,
            "mean_abs_diff": self.abs_sum / max(self.count, 1),
            "max_abs_diff": self.max_abs,
            "psnr_db": None if mse == 0 else 10 * float(np.log10(255.0**2 / mse)),
        }


def measure_fast_decode(items: list[tuple[bytes, list]], rounds: int = 2) -> dict:
    """Exact vs fast_decode (decode + every transform of each image), best of `rounds`."""
    best_exact = best_fast = float("inf")
    diff, drafted = _Diff(), 0
    for round_index in range(rounds):
        exact_s = fast_s = 0.0
        for data, calls in items:
            twins = [(fast_twin(t), n) for t, n in calls]
            start = _now()
            image = decode_image(data)
            exact = [t(image, img_num=n) for t, n in calls]
            middle = _now()
            image = decode_image(data, draft_size=joint_draft_size(*(t for t, _ in twins)))
            fast = [t(image, img_num=n) for t, n in twins]
            exact_s, fast_s = exact_s + middle - start, fast_s + _now() - middle
            if round_index == 0:
                drafted += ORIGINAL_SIZE_KEY in image.info
                for (transform, _), a, b in zip(calls, exact, fast):
                    diff.add(transform, a, b)
        best_exact, best_fast = min(best_exact, exact_s), min(best_fast, fast_s)
    return {
        "images": len(items),
        "drafted": drafted,
        **diff.report(),
        "exact_seconds": best_exact,
        "fast_seconds": best_fast,
        "speedup": best_exact / max(best_fast, 1e-12),
    }


def twice_target_items(transforms: list[ImageTransform], count: int, seed: int = 0) -> list[tuple[bytes, list]]:
    """`count` photo-like JPEGs per transform at about twice its largest target (4:3 and 3:4)."""
    rng, items = np.random.default_rng(seed), []
    for transform in transforms:
        side = transform.rule.max_size
        for k in range(count):
            width, height = (side, side * 3 // 4) if k % 2 == 0 else (side * 3 // 4, side)
            image = photo_like_image(rng, 2 * width + int(rng.integers(0, 16)), 2 * height + int(rng.integers(0, 16)))
            items.append((encode_image(image, "JPEG", quality=90), [(transform, 1)]))
    return items


def simplejpeg_check(jpegs: list[bytes]) -> dict:
    """Pixel identity with Pillow (full and half DCT scale) per JPEG mode, and the decode
    speed: simplejpeg's alone, and with the copy into a Pillow image that the resize needs
    (Pillow's RGB images are 4 bytes per pixel, so its array cannot be wrapped in place)."""
    try:
        import simplejpeg
    except ImportError:
        return {"available": False}
    by_mode: dict[str, dict] = {}
    pil_s = alone_s = into_pillow_s = 0.0
    for data in jpegs:
        mode = Image.open(io.BytesIO(data)).mode
        start = _now()
        decoded = decode_image(data)
        first = _now()
        try:
            pixels = simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False)
        except ValueError:  # a JPEG it cannot read (e.g. CMYK): not identical
            pixels = None
        second = _now()
        if pixels is not None:
            Image.fromarray(pixels, "RGB")
        pil_s, alone_s, into_pillow_s = pil_s + first - start, alone_s + second - first, into_pillow_s + _now() - first
        exact, other = np.asarray(decoded), pixels
        image = Image.open(io.BytesIO(data))
        image.draft(None, (image.size[0] // 2, image.size[1] // 2))
        half = np.asarray(image.convert("RGB"))
        small = simplejpeg.decode_jpeg(data, colorspace="RGB", min_width=half.shape[1], min_height=half.shape[0])
        entry = by_mode.setdefault(mode, {"images": 0, "identical_full_scale": 0, "identical_half_scale": 0})
        entry["images"] += 1
        entry["identical_full_scale"] += bool(np.array_equal(exact, other))
        entry["identical_half_scale"] += bool(np.array_equal(half, small))
    return {"available": True, "version": simplejpeg.__version__, "by_mode": by_mode,
            "pillow_decode_seconds": pil_s, "simplejpeg_decode_seconds": alone_s,
            "simplejpeg_into_pillow_seconds": into_pillow_s, "decode_speedup": pil_s / max(alone_s, 1e-12),
            "into_pillow_speedup": pil_s / max(into_pillow_s, 1e-12)}  # fmt: skip


class FreshZeroPool:
    """A buffer pool that always lends a fresh `torch.zeros`: padding without reuse."""

    @staticmethod
    def float32(shape: tuple[int, ...]) -> tuple[torch.Tensor, bool]:
        return torch.zeros(shape, dtype=torch.float32), True
