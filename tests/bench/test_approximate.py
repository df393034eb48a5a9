"""The faster floor's pixel error, pooled over groups (bagel_bench.approximate.all_groups)."""

from __future__ import annotations

import math

import numpy as np

from bagel_bench.approximate import _psnr, all_groups


def _group(diffs: list[np.ndarray]) -> dict:
    errors = [float(np.square(d.astype(np.int64)).sum()) for d in diffs]
    return {
        "images": len(diffs),
        "psnr_db": _psnr(sum(errors), sum(d.size for d in diffs)),
        "worst_image_psnr_db": min(_psnr(e, d.size) for e, d in zip(errors, diffs)),
        "max_abs_levels": max(int(np.abs(d).max()) for d in diffs),
        "squared_error": sum(errors),
        "values": sum(d.size for d in diffs),
    }


def test_groups_pool_into_one_psnr_over_every_pixel():
    rng = np.random.default_rng(0)
    exact_group = [np.zeros((8, 8, 3), np.int32)]  # identical pixels: an infinite PSNR alone
    noisy = [rng.integers(-3, 4, (16, 4, 3)), rng.integers(-1, 2, (5, 5, 3))]
    pooled = all_groups({"t2i": _group(exact_group), "vlm": _group(noisy)})
    every = np.concatenate([d.reshape(-1) for d in exact_group + noisy])
    expected = 10 * math.log10(255**2 * every.size / float(np.square(every).sum()))
    assert math.isclose(pooled["psnr_db"], expected, rel_tol=1e-12)
    assert pooled["images"] == 3
    assert pooled["worst_image_psnr_db"] == _group(noisy)["worst_image_psnr_db"] < pooled["psnr_db"]
    assert pooled["max_abs_levels"] == 3


def test_no_error_anywhere_is_an_infinite_psnr():
    pooled = all_groups({"a": _group([np.zeros((2, 2, 3), np.int32)])})
    assert pooled["psnr_db"] == math.inf and pooled["max_abs_levels"] == 0
