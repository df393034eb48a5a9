"""What the nested-mask mode costs: dense-mask build time against the image work of the
same packed samples (`mask_report`), from the rows `WorkRecorder.mask_rows` gives."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

_now = time.perf_counter


def best_seconds(fn, *args, rounds: int) -> float:
    """The fastest of `rounds` calls of `fn(*args)`; each result is dropped before the next."""
    best = float("inf")
    for _ in range(rounds):
        start = _now()
        result = fn(*args)
        best = min(best, _now() - start)
        del result
    return best


def mask_report(runs: list[list[tuple]]) -> dict:
    """Dense-mask build time against the image work of the same packed samples, per group.

    `runs` are `mask_rows` of repeated identical runs; each sample keeps its fastest times.
    """
    rows = [(r[0][0], r[0][1], min(x[2] for x in r), min(x[3] for x in r)) for r in zip(*runs)]
    report: dict[str, Any] = {"text_only_samples": sum(not r[1] for r in rows), "by_group": {}}
    for group in sorted({r[0] for r in rows}) + ["all"]:
        report["by_group"][group] = _mask_stats([(r[2], r[3]) for r in rows if r[1] and group in ("all", r[0])])
    return report


def _mask_stats(pairs: list[tuple[float, float]]) -> dict:
    ratios = [mask / image for mask, image in pairs if image > 0]
    return {
        "samples": len(pairs),
        "mask_cheaper_than_images": sum(mask < image for mask, image in pairs),
        "max_mask_to_image_ratio": max(ratios, default=0.0),
        "median_mask_to_image_ratio": float(np.median(ratios)) if ratios else 0.0,
        "mask_seconds": sum(mask for mask, _ in pairs),
        "image_seconds": sum(image for _, image in pairs),
    }
