"""The opt-in faster floor, measured on a run config's own images: what it saves and what
it costs in pixels, per group.

"Approximate" is every image transform with `OPTIONS`: `resize_backend: torch` (torch's
antialiased uint8 resize instead of Pillow's, the reference's bicubic filter kept: on torch
bilinear is no faster, media/resize.py) and `fast_decode: true` (JPEGs decoded at a reduced
DCT scale when the target is at most half the source).
Shapes, token counts and packs do not change; pixel values do, by what the PSNR says.

* `floor_seconds`: the measured packs' decodes and resizes replayed both ways, interleaved;
* `pixel_error`: per group, the PSNR of the approximate resized pixels against the exact
  ones over all those images (one MSE over every pixel of the group), and the worst image's;
  `all_groups` the same over every group;
* `approximate_grouped`: the run config's groups with both options set, for a pipeline run.
"""

from __future__ import annotations

import collections
import copy
import math
import time

import numpy as np

from bagel_data.media.images import ImageTransform, decode_image

from .floor import _decode
from .recorder import WorkRecorder, load_source

_now = time.perf_counter
OPTIONS: dict = {"resize_backend": "torch", "fast_decode": True}


def approximate_grouped(grouped: dict) -> dict:
    """`grouped` (a run config's `grouped_datasets`) with `OPTIONS` in every image transform."""
    grouped = copy.deepcopy(grouped)
    for group in grouped.values():
        for key in ("image_transform_args", "vit_image_transform_args"):
            if key in group:
                group[key].update(OPTIONS)
    return grouped


def approximate(transform: ImageTransform) -> ImageTransform:
    rule = transform.rule
    return ImageTransform(
        rule.max_size,
        rule.min_size,
        rule.stride,
        rule.max_pixels,
        transform.image_mean,
        transform.image_std,
        **{"resample": transform.resample, **OPTIONS},
    )


def group_of_transforms(dataset) -> dict[int, str]:
    """id(transform) -> the name of the group that owns it, for a built packed dataset."""
    owners: dict[int, str] = {}
    for group in dataset.grouped_datasets:
        for attribute in ("transform", "vit_transform"):
            transform = getattr(group, attribute, None)
            if transform is not None:
                owners.setdefault(id(transform), group.dataset_name)
    return owners


def _resized(source, transform: ImageTransform, img_num: int, video_cache: dict) -> np.ndarray:
    if transform.fast_decode and isinstance(source, bytes):
        image = decode_image(source, draft_size=transform.draft_size)
    else:
        image = _decode(source, video_cache)
    return np.asarray(transform.resize(image, img_num=img_num).convert("RGB"))


def _replay(recorder: WorkRecorder, work: dict, use_approximate: bool) -> float:
    """Seconds to decode + resize exactly `work`, each image decoded once (as floor.py)."""
    sources = {index: load_source(recorder.images[index].source) for index in work}
    cache: dict = {}
    video_cache: dict = {}
    start = _now()
    for index, calls in work.items():
        for call in sorted(calls):
            transform, img_num, _ = recorder.images[index].calls[call]
            if use_approximate:
                transform = cache.setdefault(id(transform), approximate(transform))
            _resized(sources[index], transform, img_num, video_cache)
    return _now() - start


def floor_seconds(recorder: WorkRecorder, work: dict, repeats: int) -> dict:
    """Best of `repeats` interleaved replays of the exact and the approximate floor."""
    exact, fast = [], []
    for _ in range(repeats):
        exact.append(_replay(recorder, work, False))
        fast.append(_replay(recorder, work, True))
    return {"exact_seconds": min(exact), "approximate_seconds": min(fast), "speedup": min(exact) / min(fast)}


def _psnr(squared_error: float, values: int) -> float:
    return math.inf if squared_error == 0 else 10 * math.log10(255**2 * values / squared_error)


def pixel_error(recorder: WorkRecorder, work: dict, owners: dict[int, str]) -> dict:
    """Per group: images, PSNR over all of them, the worst image's PSNR, max abs difference."""
    totals: dict = collections.defaultdict(lambda: {"images": 0, "se": 0.0, "values": 0, "worst": math.inf, "max": 0})
    cache: dict = {}
    video_cache: dict = {}
    for index, calls in work.items():
        source = load_source(recorder.images[index].source)
        for call in sorted(calls):
            transform, img_num, _ = recorder.images[index].calls[call]
            fast = cache.setdefault(id(transform), approximate(transform))
            exact = _resized(source, transform, img_num, video_cache).astype(np.int32)
            diff = exact - _resized(source, fast, img_num, video_cache)
            se = float(np.square(diff, dtype=np.int64).sum())
            group = totals[owners.get(id(transform), "unknown")]
            group["images"] += 1
            group["se"] += se
            group["values"] += diff.size
            group["worst"] = min(group["worst"], _psnr(se, diff.size))
            group["max"] = max(group["max"], int(np.abs(diff).max()))
    return {
        name: {"images": t["images"], "psnr_db": _psnr(t["se"], t["values"]), "worst_image_psnr_db": t["worst"],
               "max_abs_levels": t["max"], "squared_error": t["se"], "values": t["values"]}
        for name, t in sorted(totals.items())
    }  # fmt: skip


def all_groups(errors: dict) -> dict:
    """`pixel_error`'s groups taken together: one PSNR over every pixel of every image, the
    worst image's PSNR and the largest difference."""
    return {
        "images": sum(e["images"] for e in errors.values()),
        "psnr_db": _psnr(sum(e["squared_error"] for e in errors.values()), sum(e["values"] for e in errors.values())),
        "worst_image_psnr_db": min((e["worst_image_psnr_db"] for e in errors.values()), default=math.inf),
        "max_abs_levels": max((e["max_abs_levels"] for e in errors.values()), default=0),
    }
