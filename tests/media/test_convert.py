"""The fused uint8 -> float32 writers are bit-identical to ToTensor + Normalize."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from bagel_data.media.convert import (
    PendingImage,
    materialize,
    packed_rgb,
    two_step_plan,
    write_chw,
    write_chw_from_words,
    write_patches,
)
from bagel_data.media.images import ImageTransform
from bagel_data.packing.buffers import PadBufferPool
from bagel_data.packing.layout import patchify
from bagel_data.packing.pack import pad_images, stack_patches

MEANS_STDS = [
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # ImageNet: per-channel, not exact in binary
    ((0.0, 0.1, 1.0 / 3.0), (1.0, 0.3, 0.7)),
    ((0.1, 0.2, 0.3), (0.5, 0.5, 0.5)),  # one std shared, a mean per channel (and the reverse):
    ((0.5, 0.5, 0.5), (0.2, 0.4, 0.8)),  # uniform only when both are
]


def reference(pixels: np.ndarray, mean, std) -> np.ndarray:
    """ToTensor + Normalize spelled out in numpy float32: x / 255, then - mean, then / std."""
    chw = np.transpose(pixels, (2, 0, 1)).astype(np.float32) / np.float32(255)
    return (chw - np.asarray(mean, np.float32)[:, None, None]) / np.asarray(std, np.float32)[:, None, None]


def every_level(height: int, width: int, seed: int = 0) -> np.ndarray:
    """Pixels holding each of the 256 levels in every channel, at shuffled positions."""
    rng = np.random.default_rng(seed)
    values = np.resize(np.arange(256, dtype=np.uint8), height * width * 3)
    return rng.permutation(values).reshape(height, width, 3)


@pytest.mark.parametrize("mean,std", MEANS_STDS)
@pytest.mark.parametrize("size", [(28, 42), (70, 1001), (700, 14)])
def test_write_chw_is_bit_identical(mean, std, size):
    pixels = every_level(*size)
    out = torch.full((3, *size), float("nan"))
    write_chw(out, pixels, mean, std)
    assert np.array_equal(out.numpy(), reference(pixels, mean, std))


def test_the_bagel_default_takes_two_steps_and_imagenet_three():
    # Which (mean, std) may skip a step decides the speed, not the values (checked above).
    assert two_step_plan(0.5, 0.5) == (127.5, 1.0)
    assert two_step_plan(0.485, 0.229) is None


@pytest.mark.parametrize("mean,std", [(0.485, 0.229), (0.1, 0.3)])
def test_a_two_step_plan_is_refused_where_it_would_change_a_value(mean, std):
    levels = np.arange(256, dtype=np.float32)
    naive = levels / (np.float32(255) * np.float32(std)) - np.float32(mean) / np.float32(std)
    exact = (levels / np.float32(255) - np.float32(mean)) / np.float32(std)
    assert not np.array_equal(naive, exact)  # the shortcut is wrong here ...
    assert two_step_plan(mean, std) is None  # ... and is not taken


def test_a_two_step_plan_that_changes_only_the_sign_of_zero_is_refused():
    """A mean of the smallest subnormal: level 0 is -0.0 in three steps ((0 - m) / 2 rounds to
    -0.0) and +0.0 in two (m / 2 rounds to 0.0, 0 - 0.0 is +0.0); equal as numbers, not as bits."""
    mean, std = float(np.float32(1.4e-45)), 2.0
    exact = (np.float32(0) / np.float32(255) - np.float32(mean)) / np.float32(std)
    assert np.signbit(exact)
    assert two_step_plan(mean, std) is None
    dest = torch.empty(3, 1, 1)
    write_chw(dest, np.zeros((1, 1, 3), dtype=np.uint8), (mean,) * 3, (std,) * 3)
    assert torch.signbit(dest).all()


def rgbx_view(pixels: np.ndarray) -> np.ndarray:
    """`pixels` as Pillow stores RGB: 4 bytes a pixel, read through a strided view."""
    rgbx = np.full((*pixels.shape[:2], 4), 77, dtype=np.uint8)  # the padding must not leak
    rgbx[:, :, :3] = pixels
    return rgbx[:, :, :3]


@pytest.mark.parametrize("mean,std", MEANS_STDS)
def test_write_chw_reads_strided_rgbx_pixels(mean, std):
    pixels = every_level(45, 61, seed=3)
    out = torch.full((3, 45, 61), float("nan"))
    write_chw(out, rgbx_view(pixels), mean, std)
    assert np.array_equal(out.numpy(), reference(pixels, mean, std))


@pytest.mark.parametrize("mean,std", MEANS_STDS)
def test_write_chw_from_words_takes_each_channel_from_its_byte(mean, std):
    pixels = every_level(33, 70, seed=5)
    rgbx = np.empty((33, 70, 4), dtype=np.uint8)
    rgbx[:, :, :3] = pixels
    rgbx[:, :, 3] = np.random.default_rng(1).integers(0, 256, (33, 70))  # padding, high bit too
    words = (rgbx.astype(np.int64) << np.array([0, 8, 16, 24])).sum(axis=2).astype(np.uint32).view(np.int32)
    out = torch.full((3, 33, 70), float("nan"))
    write_chw_from_words(out, words, mean, std)
    assert np.array_equal(out.numpy(), reference(pixels, mean, std))


@pytest.mark.parametrize("layout", [np.ascontiguousarray, rgbx_view])
@pytest.mark.parametrize("mean,std", MEANS_STDS)
def test_write_patches_is_patchify_of_the_reference(mean, std, layout):
    pixels = every_level(14 * 5, 14 * 93)
    out = torch.full((5 * 93, 14 * 14 * 3), float("nan"))
    write_patches(out, layout(pixels), 14, mean, std)
    expected = patchify(torch.from_numpy(reference(pixels, mean, std)), 14)
    assert torch.equal(out, expected)


def test_transform_call_and_prepare_agree_with_the_reference():
    transform = ImageTransform(64, 16, 16, image_mean=MEANS_STDS[1][0], image_std=MEANS_STDS[1][1])
    image = Image.fromarray(every_level(50, 70))
    tensor = transform(image)
    pending = transform.prepare(image)
    resized = np.asarray(image.resize((64, 48), Image.Resampling.BICUBIC))
    assert pending.shape == tuple(tensor.shape) == (3, 48, 64)
    assert np.array_equal(tensor.numpy(), reference(resized, *MEANS_STDS[1]))
    assert torch.equal(pending.tensor(), tensor)


def test_materialize_converts_once_per_object():
    pending = PendingImage(every_level(4, 6), (0.5,) * 3, (0.5,) * 3)
    plain = torch.zeros(3, 2, 2)
    a, b, c = materialize([pending, plain, pending])
    assert a is c and b is plain and torch.equal(a, torch.from_numpy(reference(pending.pixels, (0.5,) * 3, (0.5,) * 3)))


@pytest.mark.parametrize("reuse", [False, True])
def test_pad_images_writes_pending_images_into_their_slots(reuse):
    pool = PadBufferPool(shared=False)
    images = [PendingImage(every_level(h, w, seed=h), *MEANS_STDS[1]) for h, w in [(600, 1200), (1400, 900)]]
    tensors = [image.tensor() for image in images]
    if reuse:  # dirty a pooled buffer first, then release it
        first = pad_images(tensors[::-1], pool)
        first.fill_(7.0)
        del first
    padded = pad_images(images, pool)
    assert padded.shape == (2, 3, 1400, 1200)
    assert torch.equal(padded[0, :, :600, :1200], tensors[0]) and torch.equal(padded[1, :, :, :900], tensors[1])
    assert not padded[0, :, 600:].any() and not padded[1, :, :, 900:].any()


def test_stack_patches_mixes_pending_and_tensors_in_order():
    images = [PendingImage(every_level(28, 42, seed=s), (0.5,) * 3, (0.5,) * 3) for s in range(2)]
    parts = [patchify(images[0], 14), patchify(images[1].tensor(), 14)]
    for shared in (False, True):
        out = stack_patches(parts, PadBufferPool(shared=shared))
        assert out.is_shared() == shared
        assert torch.equal(out, torch.cat([patchify(image.tensor(), 14) for image in images]))


def test_shared_pool_allocates_shared_zeroed_memory():
    padded, zeroed = PadBufferPool(shared=True).float32((2, 3, 1024, 1024))
    assert zeroed and padded.is_shared() and not padded.any()


def words_of(pixels: np.ndarray, pad: int = 0) -> np.ndarray:
    """`pixels` as `(H, W)` int32 words, R in the low byte, `pad` in the 4th."""
    rgbx = np.full((*pixels.shape[:2], 4), pad, dtype=np.uint8)
    rgbx[:, :, :3] = pixels
    return rgbx.view(np.int32)[:, :, 0]


@pytest.mark.parametrize("block_values", [1, 10, 100, 3000])
@pytest.mark.parametrize("mean,std", MEANS_STDS[:2])  # two steps and three
def test_the_writers_work_block_by_block_without_a_seam(monkeypatch, block_values, mean, std):
    """Images many blocks high, the last one partial (37 rows of 28, patches of 2 and 14), or
    wider than a block: every row is written once, with its own values."""
    from bagel_data.media import convert

    monkeypatch.setattr(convert, "_BLOCK_VALUES", block_values)
    monkeypatch.setattr(convert, "_WORD_BLOCK_VALUES", block_values)  # the numpy writer's own blocks
    pixels = every_level(42, 28, seed=block_values)[:37]
    out = torch.full((3, 37, 28), float("nan"))
    write_chw(out, pixels, mean, std)
    assert np.array_equal(out.numpy(), reference(pixels, mean, std))
    out = torch.full((3, 37, 28), float("nan"))
    write_chw_from_words(out, words_of(pixels, pad=255), mean, std)
    assert np.array_equal(out.numpy(), reference(pixels, mean, std))
    square = every_level(42, 28, seed=block_values)
    for patch in (2, 14):
        out = torch.full((42 * 28 // patch**2, patch * patch * 3), float("nan"))
        write_patches(out, square, patch, mean, std)
        assert torch.equal(out, patchify(torch.from_numpy(reference(square, mean, std)), patch))


def test_the_writers_refuse_a_destination_of_another_shape():
    pixels = every_level(6, 8)
    with pytest.raises(ValueError, match=r"destination \(3, 8, 6\) does not fit an image of \(3, 6, 8\)"):
        write_chw(torch.empty(3, 8, 6), pixels, (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match=r"destination \(3, 6, 9\) does not fit"):
        write_chw_from_words(torch.empty(3, 6, 9), words_of(pixels), (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match=r"does not fit 12 patches of 12"):
        write_patches(torch.empty(12, 13), pixels, 2, (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match=r"6x8 is not a multiple of the patch size 4"):
        write_patches(torch.empty(3, 48), pixels, 4, (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match=r"8x6 is not a multiple of the patch size 4"):
        write_patches(torch.empty(3, 48), every_level(8, 6), 4, (0.5,) * 3, (0.5,) * 3)


@pytest.mark.parametrize("mean,std", MEANS_STDS)
def test_a_pending_image_converts_the_same_from_pixels_words_or_its_source(mean, std):
    pixels = every_level(9, 13, seed=2)
    image = Image.fromarray(pixels)
    plain = PendingImage(pixels, mean, std)
    strided = PendingImage(rgbx_view(pixels), mean, std, source=image, words=words_of(pixels, pad=9))
    copied = PendingImage(rgbx_view(pixels), mean, std)
    worded = PendingImage(rgbx_view(pixels), mean, std, words=words_of(pixels, pad=9))  # torch's resize output
    assert plain.shape == strided.shape == worded.shape == (3, 9, 13)
    expected = torch.from_numpy(reference(pixels, mean, std))
    for pending in (plain, strided, copied, worded):
        assert torch.equal(pending.tensor(), expected)
    assert plain.packed_pixels() is pixels  # contiguous already: no copy
    for pending in (strided, copied, worded):
        packed = pending.packed_pixels()
        assert packed.flags.c_contiguous and np.array_equal(packed, pixels)
    ragged = PendingImage(rgbx_view(pixels), mean, std, source=Image.fromarray(pixels[::-1].copy()))
    assert np.array_equal(ragged.packed_pixels(), pixels[::-1])  # the source is what is read


def test_two_step_plan_refuses_a_zero_or_infinite_std():
    assert two_step_plan(0.5, 0.0) is None
    assert two_step_plan(0.5, float("inf")) is None
    assert two_step_plan(float("nan"), 0.5) is None


@pytest.mark.parametrize("size", [(1, 1), (9, 13), (13, 9), (64, 3)])
def test_packed_rgb_drops_the_padding_byte_and_keeps_rows_and_columns(size):
    # Not square, so that a swapped width and height in Pillow's (width, height) is caught.
    pixels = every_level(*size, seed=5)
    packed = packed_rgb(words_of(pixels, pad=201))
    assert packed.shape == (*size, 3) and packed.flags.c_contiguous
    np.testing.assert_array_equal(packed, pixels)
