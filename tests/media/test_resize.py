"""The opt-in `resize_backend: torch` (issue 37): the exact path's shapes, Pillow's pixels
within 2 levels on photo-like images, and nothing changed unless asked for."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from bagel_data.errors import ConfigError
from bagel_data.media.images import RESAMPLE_FILTERS, ImageTransform, rgbx_storage
from bagel_data.media.pixels import pad_pixels
from bagel_data.media.resize import resize_rgbx


def photo_like(height: int, width: int, seed: int) -> Image.Image:
    """Smooth shading, an edge and sensor noise: what a resize filter meets in photos."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    phase = rng.uniform(0, 6, 3)
    shading = 120 + 70 * np.sin(x[..., None] / (9 + 4 * phase) + phase) * np.cos(y[..., None] / 23.0)
    shading[:, width // 3 :] += 40  # a hard edge
    noisy = shading + rng.normal(0, 6, (height, width, 3))
    return Image.fromarray(noisy.clip(0, 255).astype(np.uint8))


# (source width, height) -> target: shrinking by several factors, and enlarging
CASES = [((640, 480), (224, 168)), ((500, 333), (448, 294)), ((97, 61), (224, 140)), ((300, 800), (112, 298))]


@pytest.mark.parametrize("resample", ["bicubic", "bilinear"])
@pytest.mark.parametrize(("source", "target"), CASES)
def test_torch_resize_is_within_two_levels_of_pillows(source, target, resample):
    image = photo_like(source[1], source[0], seed=source[0])
    storage = rgbx_storage(image)
    assert storage is not None
    planes = resize_rgbx(storage, target, resample)
    assert planes.dtype == torch.uint8 and tuple(planes.shape) == (3, target[1], target[0])
    exact = np.asarray(image.resize(target, RESAMPLE_FILTERS[resample])).transpose(2, 0, 1)
    assert np.abs(planes.numpy().astype(int) - exact).max() <= 2


def test_the_two_filters_differ_by_more_than_the_tolerance():
    # So that the test above tells a swapped filter apart (and a missing antialias).
    image = photo_like(480, 640, seed=1)
    bicubic = resize_rgbx(rgbx_storage(image), (160, 120), "bicubic").numpy().astype(int)
    bilinear = np.asarray(image.resize((160, 120), Image.Resampling.BILINEAR)).transpose(2, 0, 1)
    assert np.abs(bicubic - bilinear).max() > 2


def test_resize_rgbx_refuses_pixels_that_are_not_rgbx():
    with pytest.raises(ValueError, match="expected"):
        resize_rgbx(np.zeros((4, 4, 3), np.uint8), (2, 2), "bicubic")


def test_the_transform_keeps_the_exact_shapes_and_near_values():
    image = photo_like(333, 500, seed=3)
    exact, fast = ImageTransform(224, 112, 14), ImageTransform(224, 112, 14, resize_backend="torch")
    for img_num in (1, 3):
        want, got = exact(image, img_num=img_num), fast(image, img_num=img_num)
        assert got.shape == want.shape
        assert (got - want).abs().max().item() <= 2 / 127.5 + 1e-6  # 2 levels after (x / 255 - 0.5) / 0.5
        assert fast.resize(image, img_num=img_num).size == exact.resize(image, img_num=img_num).size


def test_prepared_pixels_travel_as_uint8_and_an_unresized_image_is_exact():
    image = photo_like(100, 140, seed=4)
    fast = ImageTransform(112, 56, 14, resize_backend="torch")
    pending = fast.prepare(image)
    batch = pad_pixels([pending])
    assert batch["padded_images"].shape == (1, 3, *pending.pixels.shape[:2])
    np.testing.assert_array_equal(batch["padded_images"][0].numpy(), pending.pixels.transpose(2, 0, 1))
    same_size = ImageTransform(140, 14, 14, resize_backend="torch")  # 140 x 98 -> itself
    unchanged = photo_like(98, 140, seed=5)
    assert torch.equal(same_size(unchanged), ImageTransform(140, 14, 14)(unchanged))


def test_a_grey_image_is_resized_too():
    grey = photo_like(90, 120, seed=6).convert("L")
    fast = ImageTransform(56, 28, 14, resize_backend="torch")
    assert fast(grey).shape == ImageTransform(56, 28, 14)(grey.convert("RGB")).shape


def test_pillow_is_the_default_and_an_unknown_backend_is_named():
    assert ImageTransform(56, 28, 14).resize_backend == "pillow"
    assert "resize_backend='torch'" in repr(ImageTransform(56, 28, 14, resize_backend="torch"))
    with pytest.raises(ConfigError, match="resize_backend") as caught:
        ImageTransform(56, 28, 14, resize_backend="cuda")
    assert "cuda" in str(caught.value) and "pillow" in str(caught.value)
