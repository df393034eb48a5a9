"""The opt-in fast_decode mode: same shapes, small pixel differences, exact mode untouched."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from bagel_data.media.fast_decode import ORIGINAL_SIZE_KEY, draft_scale, joint_draft_size
from bagel_data.media.images import ImageDecodeError, ImageTransform, decode_image
from bagel_data.schema.checks import check_transform_args
from bagel_data.synthetic.dataset import encode_image, photo_like_image

# Measured on photo-like JPEGs at twice the target (benchmarks/NOTES.md): mean |diff| about
# 0.005 in normalized units (0.6 of an 8-bit level), PSNR 48-50 dB; the bounds leave 3x margin.
MEAN_ABS_BOUND = 0.015
PSNR_BOUND_DB = 42.0

VAE = {"max_image_size": 512, "min_image_size": 256, "image_stride": 16}
VIT = {"max_image_size": 378, "min_image_size": 224, "image_stride": 14}
VLM = {"max_image_size": 490, "min_image_size": 224, "image_stride": 14, "max_pixels": 490 * 490}


def _jpeg(width: int, height: int, seed: int, mode: str = "RGB", quality: int = 90) -> bytes:
    image = photo_like_image(np.random.default_rng(seed), width, height, mode)
    return encode_image(image, "JPEG", quality=quality)


@pytest.fixture(scope="module")
def twice_target() -> list[bytes]:
    """JPEGs at about twice the largest VAE target, landscape and portrait."""
    return [_jpeg(1040, 784, 1), _jpeg(784, 1040, 2), _jpeg(1100, 800, 3)]


def _reference(transform: ImageTransform, image: Image.Image, img_num: int = 1) -> torch.Tensor:
    """The exact transform as it was before fast_decode existed: resize rule + bicubic + normalize."""
    size = transform.rule.target_size(*image.size, img_num)
    if size != image.size:
        image = image.resize(size, Image.Resampling.BICUBIC)
    pixels = np.asarray(image.convert("RGB"), dtype=np.uint8).astype(np.float32) / np.float32(255)
    mean = np.asarray(transform.image_mean, dtype=np.float32)
    std = np.asarray(transform.image_std, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(((pixels - mean) / std).transpose(2, 0, 1)))


def _psnr(exact: torch.Tensor, fast: torch.Tensor) -> float:
    mse = float(((exact - fast).double() * 127.5).pow(2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


@pytest.mark.parametrize("args", [VAE, VIT, VLM])
def test_exact_mode_is_bit_identical_to_before(twice_target, args):
    exact = ImageTransform(**args)
    assert exact.fast_decode is False
    for data in twice_target:
        image = decode_image(data)
        assert ORIGINAL_SIZE_KEY not in image.info
        for img_num in (1, 2):
            assert torch.equal(exact(image, img_num=img_num), _reference(exact, image, img_num))
        # an exact transform's draft size is the full size, so passing it changes nothing
        drafted = decode_image(data, draft_size=exact.draft_size)
        assert np.array_equal(np.asarray(drafted), np.asarray(image))
        assert ORIGINAL_SIZE_KEY not in drafted.info


@pytest.mark.parametrize("args", [VAE, VIT, VLM])
def test_fast_decode_same_shapes_small_differences(twice_target, args):
    exact, fast = ImageTransform(**args), ImageTransform(**args, fast_decode=True)
    for data in twice_target:
        image = decode_image(data, draft_size=fast.draft_size)
        assert image.info[ORIGINAL_SIZE_KEY] == Image.open(io.BytesIO(data)).size
        assert image.size[0] < image.info[ORIGINAL_SIZE_KEY][0]  # really decoded smaller
        for img_num in (1, 2):  # the draft uses the img_num=1 target, which covers every img_num
            want = exact(decode_image(data), img_num=img_num)
            got = fast(image, img_num=img_num)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert float((got - want).abs().mean()) < MEAN_ABS_BOUND
            assert _psnr(want, got) > PSNR_BOUND_DB


def test_fast_transform_on_an_exact_decode_is_exact(twice_target):
    exact, fast = ImageTransform(**VAE), ImageTransform(**VAE, fast_decode=True)
    image = decode_image(twice_target[0])
    assert torch.equal(fast(image), exact(image))
    assert "fast_decode=True" in repr(fast) and "fast_decode" not in repr(exact)


def test_jpeg_under_twice_the_target_is_not_drafted():
    data = _jpeg(700, 520, 4)  # VAE target 512x384 is more than half of 700x520
    fast = ImageTransform(**VAE, fast_decode=True)
    image = decode_image(data, draft_size=fast.draft_size)
    assert ORIGINAL_SIZE_KEY not in image.info
    assert torch.equal(fast(image), ImageTransform(**VAE)(decode_image(data)))


@pytest.mark.parametrize("fmt,mode", [("PNG", "RGB"), ("PNG", "RGBA"), ("PNG", "P"), ("WEBP", "RGB")])
def test_non_jpeg_inputs_are_unaffected(fmt, mode):
    source = photo_like_image(np.random.default_rng(5), 1040, 784, mode)
    buffer = io.BytesIO()
    source.save(buffer, format=fmt)
    data = buffer.getvalue()
    exact, fast = ImageTransform(**VAE), ImageTransform(**VAE, fast_decode=True)
    image = decode_image(data, draft_size=fast.draft_size)
    assert ORIGINAL_SIZE_KEY not in image.info
    assert np.array_equal(np.asarray(image), np.asarray(decode_image(data)))
    assert torch.equal(fast(image), exact(decode_image(data)))


def test_file_object_source_and_cmyk(tmp_path):
    path = tmp_path / "photo.jpg"
    path.write_bytes(_jpeg(1040, 784, 6))
    fast = ImageTransform(**VAE, fast_decode=True)
    with open(path, "rb") as handle:
        from_file = fast(decode_image(handle, draft_size=fast.draft_size))
    assert torch.equal(from_file, fast(decode_image(path.read_bytes(), draft_size=fast.draft_size)))
    cmyk = _jpeg(1040, 784, 7, mode="CMYK")
    image = decode_image(cmyk, draft_size=fast.draft_size)
    assert image.mode == "RGB" and ORIGINAL_SIZE_KEY in image.info
    assert fast(image).shape == ImageTransform(**VAE)(decode_image(cmyk)).shape


def test_joint_draft_size_is_the_largest_need():
    vae, vit = ImageTransform(**VAE, fast_decode=True), ImageTransform(**VIT, fast_decode=True)
    joint = joint_draft_size(vae, vit)
    assert joint(1040, 784) == tuple(max(a, b) for a, b in zip(vae.draft_size(1040, 784), vit.draft_size(1040, 784)))
    # an exact transform among them needs the full size: no drafting
    assert joint_draft_size(vit, ImageTransform(**VAE))(1040, 784) == (1040, 784)
    assert draft_scale(1040, 784, (1040, 784)) == 1 and draft_scale(1040, 784, (2000, 2000)) == 1
    assert draft_scale(1040, 784, (512, 384)) == 2 and draft_scale(4200, 3200, (512, 384)) == 8


def test_corrupt_jpeg_is_a_decode_error_in_fast_mode(twice_target):
    fast = ImageTransform(**VAE, fast_decode=True)
    with pytest.raises(ImageDecodeError):
        decode_image(twice_target[0][: len(twice_target[0]) // 2], draft_size=fast.draft_size)


def test_config_accepts_fast_decode():
    args = check_transform_args("t2i_pretrain.image_transform_args", {**VAE, "fast_decode": True})
    assert ImageTransform(**args).fast_decode is True


def test_a_jpeg_at_twice_the_target_decodes_at_half_size(twice_target):
    """Scale 2 is the first that drafts: the decode is half the size, the original recorded."""
    fast = ImageTransform(**VAE, fast_decode=True)
    image = decode_image(twice_target[0], draft_size=fast.draft_size)
    assert image.size == (520, 392) and image.info[ORIGINAL_SIZE_KEY] == (1040, 784)


def test_draft_scale_of_a_one_pixel_target_and_of_a_short_side():
    assert draft_scale(15, 64, (1, 8)) == 8  # 15 // 1 and 64 // 8 both reach 8
    assert draft_scale(4200, 800, (512, 384)) == 2  # the short side decides


def test_a_fixed_draft_size_drafts_as_a_callable_one(twice_target):
    image = decode_image(twice_target[0], draft_size=(512, 384))
    assert image.size == (520, 392) and image.info[ORIGINAL_SIZE_KEY] == (1040, 784)


def test_the_draft_scale_keeps_both_sides_at_or_over_the_target():
    assert draft_scale(800, 400, (100, 100)) == 4  # the short side allows 4, not the long side's 8
    assert draft_scale(200, 200, (100, 100)) == 2  # exactly twice: drafted
    assert draft_scale(199, 400, (100, 100)) == 1


def test_the_largest_need_of_joint_transforms_wins():
    class Need:
        def __init__(self, size):
            self.size = size

        def draft_size(self, width, height):
            return self.size

    assert joint_draft_size(Need((100, 300)), Need((200, 150)))(800, 800) == (200, 300)


def test_a_drafted_jpeg_keeps_its_original_size_and_a_fixed_target_its_sides():
    buffer = io.BytesIO()
    Image.new("RGB", (800, 1600), (90, 120, 200)).save(buffer, "JPEG")
    image = decode_image(buffer.getvalue(), draft_size=(100, 400))
    assert image.info[ORIGINAL_SIZE_KEY] == (800, 1600)
    assert image.size == (200, 400)  # 1/4 scale: 100 wide needs no more; 400 high allows 4
