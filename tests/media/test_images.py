"""Image decoding, RGB conversion and the resize/normalize transform (SPEC section 5)."""

from __future__ import annotations

import gc
import io
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFile

from bagel_data.media.images import (
    ImageDecodeError,
    ImageTooLargeError,
    ImageTransform,
    decode_image,
    pending_image,
    pil_img2rgb,
)
from helpers.builders import encode, png_bytes, solid_jpeg

PILLOW_DEFAULT_MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3


# -- the pixels of a resized image ----------------------------------------------------------
def rgb_pixels(image: Image.Image) -> np.ndarray:
    """The pixels a resized image is converted from."""
    return pending_image(image, (0.5,) * 3, (0.5,) * 3).pixels


def random_rgb(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_rgb_pixels_are_the_images_pixels_and_outlive_it():
    expected = random_rgb(37, 53)
    image = Image.fromarray(expected)
    pixels = rgb_pixels(image)
    assert pixels.shape == (37, 53, 3) and pixels.dtype == np.uint8
    assert not pixels.flags.writeable  # a view of the image: nobody may write through it
    del image
    gc.collect()
    [Image.fromarray(random_rgb(37, 53, seed)) for seed in range(1, 20)]  # reuse freed memory, if any
    assert np.array_equal(pixels, expected)


@pytest.mark.skipif(sys.byteorder != "little", reason="words are read little-endian")
def test_a_pending_image_holds_its_pixels_as_words_too():
    expected = random_rgb(8, 5)
    pending = pending_image(Image.fromarray(expected), (0.5,) * 3, (0.5,) * 3)
    assert pending.words is not None and pending.words.shape == (8, 5)
    for c in range(3):  # channel c is byte c of each word
        assert np.array_equal((pending.words >> (8 * c)) & 255, expected[:, :, c])
    reference = torch.from_numpy(expected).permute(2, 0, 1).float().div(255).sub(0.5).div(0.5)  # ToTensor, Normalize
    assert torch.equal(pending.tensor(), reference)


def test_rgb_pixels_of_an_image_in_several_memory_blocks_are_copied_right():
    expected = np.tile(random_rgb(1, 2048), (2049, 1, 1))  # over Pillow's 16 MiB block
    expected[:, :, 1] = np.arange(2049, dtype=np.uint32)[:, None] % 256  # rows tell apart
    assert np.array_equal(rgb_pixels(Image.fromarray(expected)), expected)


def test_rgb_pixels_without_arrow_export_fall_back_to_a_copy(monkeypatch):
    def no_export(*args, **kwargs):
        raise TypeError("this Pillow has no __arrow_c_array__")

    monkeypatch.setattr("bagel_data.media.images.pyarrow.array", no_export)
    expected = random_rgb(9, 11)
    assert np.array_equal(rgb_pixels(Image.fromarray(expected)), expected)


# -- resize geometry ------------------------------------------------------------------------
def spec_size(W, H, max_size, min_size, stride, max_pixels, img_num):
    """SPEC section 5, transcribed: the (w, h) an image of W x H is resized to."""

    def apply(w, h, s):
        return tuple(max(stride, int(round(round(side * s) / stride) * stride)) for side in (w, h))

    scale = max(min(max_size / max(W, H), 1.0), min_size / min(W, H))
    w, h = apply(W, H, scale)
    if w * h > max_pixels / img_num:
        w, h = apply(w, h, max_pixels / img_num / (w * h))
    if max(w, h) > max_size:
        w, h = apply(w, h, max_size / max(w, h))
    return w, h


@st.composite
def geometries(draw):
    stride = draw(st.sampled_from([14, 16]))
    max_size = draw(st.integers(stride, 2048))
    min_size = draw(st.integers(1, max_size))
    max_pixels = draw(st.integers(stride * stride, 14 * 14 * 9 * 1024 * 2))
    return stride, max_size, min_size, max_pixels


@settings(max_examples=400, deadline=None)
@given(
    W=st.integers(1, 5000),
    H=st.integers(1, 5000),
    geometry=geometries(),
    img_num=st.integers(1, 4),
)
@example(W=1000, H=500, geometry=(16, 512, 256, 14 * 14 * 9 * 1024), img_num=1)
@example(W=1, H=5000, geometry=(14, 980, 224, 14 * 14 * 9 * 1024), img_num=4)
def test_target_size_matches_spec_formula(W, H, geometry, img_num):
    stride, max_size, min_size, max_pixels = geometry
    transform = ImageTransform(max_size, min_size, stride, max_pixels=max_pixels)
    w, h = transform.target_size(W, H, img_num)
    assert (w, h) == spec_size(W, H, max_size, min_size, stride, max_pixels, img_num)
    assert w % stride == 0 and h % stride == 0
    assert w >= stride and h >= stride


@settings(max_examples=200, deadline=None)
@given(
    W=st.integers(1, 5000),
    H=st.integers(1, 5000),
    stride=st.sampled_from([14, 16]),
    k=st.integers(1, 100),
    img_num=st.integers(1, 4),
)
def test_long_side_bounded_when_max_size_is_a_stride_multiple(W, H, stride, k, img_num):
    max_size = stride * k
    w, h = ImageTransform(max_size, max_size // 2 or 1, stride).target_size(W, H, img_num)
    assert max(w, h) <= max_size


@pytest.mark.parametrize(
    "args, size, img_num, expected",
    [
        ((512, 256, 16), (1000, 500), 1, (512, 256)),  # long side bounded
        ((512, 256, 16), (100, 50), 1, (512, 256)),  # short side lifted
        ((980, 224, 14), (980, 980), 4, (462, 462)),  # pixel budget shared by 4 images
        ((64, 16, 16), (24, 24), 1, (32, 32)),  # 24 / 16 = 1.5 rounds (half to even) to 2
        ((980, 224, 14), (7, 700), 1, (14, 980)),  # thin: short side clamps to the stride
    ],
)
def test_target_size_hand_computed(args, size, img_num, expected):
    assert ImageTransform(*args).target_size(*size, img_num) == expected


# -- pixels -------------------------------------------------------------------------------
def _random_image(w, h, seed=0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")


def _expected_tensor(image, size, mean, std) -> np.ndarray:
    resized = image if image.size == size else image.resize(size, Image.Resampling.BICUBIC)
    pixels = np.asarray(resized, dtype=np.float64) / 255.0
    chw = pixels.transpose(2, 0, 1)
    return (chw - np.asarray(mean)[:, None, None]) / np.asarray(std)[:, None, None]


@pytest.mark.parametrize("source", [(37, 23), (64, 32), (300, 90)])
def test_transform_default_normalization(source):
    image = _random_image(*source)
    transform = ImageTransform(64, 32, 16)
    w, h = spec_size(*source, 64, 32, 16, 14 * 14 * 9 * 1024, 1)
    out = transform(image)
    assert isinstance(out, torch.Tensor)
    assert out.dtype == torch.float32
    assert tuple(out.shape) == (3, h, w)
    np.testing.assert_allclose(out.numpy(), _expected_tensor(image, (w, h), (0.5,) * 3, (0.5,) * 3), atol=1e-6)
    assert out.min() >= -1.0 and out.max() <= 1.0


def test_transform_known_pixel_values_without_resize():
    # Exactly at target size, so the values are (uint8 / 255 - 0.5) / 0.5 of the input.
    pixels = np.zeros((16, 32, 3), np.uint8)
    pixels[..., 0], pixels[..., 1], pixels[..., 2] = 0, 255, 51
    pixels[0, 0] = (128, 1, 254)
    out = ImageTransform(32, 16, 16)(Image.fromarray(pixels, "RGB")).numpy()
    assert out.shape == (3, 16, 32)
    assert out[0, 5, 5] == -1.0 and out[1, 5, 5] == 1.0
    assert out[2, 5, 5] == pytest.approx((51 / 255 - 0.5) / 0.5, abs=1e-7)
    np.testing.assert_allclose(out[:, 0, 0], [(v / 255 - 0.5) / 0.5 for v in (128, 1, 254)], atol=1e-7)


def test_transform_custom_mean_std():
    mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
    image = _random_image(50, 70, seed=3)
    transform = ImageTransform(56, 28, 14, image_mean=mean, image_std=std)
    w, h = spec_size(50, 70, 56, 28, 14, 14 * 14 * 9 * 1024, 1)
    out = transform(image)
    assert tuple(out.shape) == (3, h, w) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), _expected_tensor(image, (w, h), mean, std), atol=1e-5)
    # Bit-exact against the reference's float32 torch arithmetic (ToTensor, then Normalize).
    resized = image.resize((w, h), Image.Resampling.BICUBIC)
    x = torch.from_numpy(np.asarray(resized).copy()).permute(2, 0, 1).float().div(255)
    x = x.sub(torch.tensor(mean)[:, None, None]).div(torch.tensor(std)[:, None, None])
    assert torch.equal(out, x)


def test_transform_img_num_shrinks_the_budget():
    transform = ImageTransform(980, 224, 14)
    image = _random_image(980, 980)
    assert tuple(transform(image, img_num=1).shape) == (3, 980, 980)
    assert tuple(transform(image, img_num=4).shape) == (3, 462, 462)
    assert transform.rule.target_size(980, 980) == transform.target_size(980, 980) == (980, 980)


@pytest.mark.parametrize("mode", ["L", "RGBA", "CMYK"])
def test_prepare_of_an_image_not_in_rgb_gives_its_rgb_pixels(mode):
    """A family of one's own may hand `prepare` any Pillow image: its pixels are converted
    to RGB, as `__call__` converts them."""
    transform = ImageTransform(64, 32, 16)
    image = _random_image(64, 48).convert(mode)
    pending = transform.prepare(image)
    assert pending.shape == (3, 48, 64)
    assert torch.equal(pending.tensor(), transform.prepare(image.convert("RGB")).tensor())


# -- pil_img2rgb --------------------------------------------------------------------------
def _reopen(image: Image.Image) -> Image.Image:
    return Image.open(io.BytesIO(encode(image, "PNG")))


def test_rgba_transparent_becomes_white_opaque_kept():
    image = Image.new("RGBA", (3, 1), (10, 20, 30, 255))
    image.putpixel((1, 0), (10, 20, 30, 0))
    image.putpixel((2, 0), (0, 0, 0, 128))
    rgb = pil_img2rgb(image)
    assert rgb.mode == "RGB" and rgb.size == (3, 1)
    assert rgb.getpixel((0, 0)) == (10, 20, 30)
    assert rgb.getpixel((1, 0)) == (255, 255, 255)
    assert all(abs(v - 127) <= 1 for v in rgb.getpixel((2, 0)))  # half-transparent black on white


def test_palette_with_transparency_composited_on_white():
    image = Image.new("P", (2, 2), 0)
    image.putpalette([200, 0, 0, 0, 0, 200] + [0] * 762)
    image.putpixel((1, 1), 1)
    image.info["transparency"] = 0
    loaded = _reopen(image)
    assert loaded.mode == "P" and loaded.info.get("transparency") == 0
    rgb = pil_img2rgb(loaded)
    assert rgb.mode == "RGB"
    assert rgb.getpixel((0, 0)) == (255, 255, 255)
    assert rgb.getpixel((1, 1)) == (0, 0, 200)


def test_palette_without_transparency_converts():
    image = Image.new("P", (1, 1), 0)
    image.putpalette([1, 2, 3] + [0] * 765)
    assert pil_img2rgb(image).getpixel((0, 0)) == (1, 2, 3)


def test_grey_with_transparency_entry_composited_on_white():
    image = Image.new("L", (2, 1), 40)
    image.putpixel((1, 0), 90)
    image.info["transparency"] = 40
    loaded = _reopen(image)
    assert loaded.info.get("transparency") == 40
    rgb = pil_img2rgb(loaded)
    assert rgb.getpixel((0, 0)) == (255, 255, 255)
    assert rgb.getpixel((1, 0)) == (90, 90, 90)


def test_grey_converts_to_rgb():
    rgb = pil_img2rgb(Image.new("L", (2, 2), 77))
    assert rgb.mode == "RGB" and rgb.getpixel((1, 1)) == (77, 77, 77)


def test_cmyk_converts_to_rgb():
    rgb = pil_img2rgb(Image.new("CMYK", (2, 2), (0, 255, 255, 0)))
    assert rgb.mode == "RGB" and rgb.getpixel((0, 0)) == (255, 0, 0)


def test_la_alpha_is_dropped_not_composited():
    # SPEC: only RGBA or images with a transparency entry are composited; LA just converts.
    image = Image.new("LA", (2, 1), (10, 0))
    image.putpixel((1, 0), (60, 255))
    rgb = pil_img2rgb(image)
    assert rgb.mode == "RGB"
    assert rgb.getpixel((0, 0)) == (10, 10, 10)
    assert rgb.getpixel((1, 0)) == (60, 60, 60)


# -- decode_image -------------------------------------------------------------------------
def _png_header_only(w: int, h: int) -> bytes:
    """A PNG whose header declares w x h but whose pixel data is almost absent."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 8))


def test_decode_image_good_bytes_and_file_object():
    image = decode_image(png_bytes(5, 4, (1, 2, 3, 0), mode="RGBA"))
    assert image.mode == "RGB" and image.size == (5, 4)
    assert image.getpixel((0, 0)) == (255, 255, 255)
    assert decode_image(io.BytesIO(solid_jpeg(8, 6))).size == (8, 6)


def _rgb_files() -> dict[str, bytes]:
    rng = np.random.default_rng(3)
    frames = [Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)) for _ in range(2)]
    files = {fmt: encode(frames[0], fmt) for fmt in ("JPEG", "PNG", "WEBP", "BMP", "TIFF")}
    animated = io.BytesIO()  # an animated PNG in RGB: the reference keeps frame 0
    frames[0].save(animated, "PNG", save_all=True, append_images=frames[1:])
    files["APNG"] = animated.getvalue()
    return files


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "BMP", "TIFF", "APNG"])
def test_an_rgb_image_is_decoded_to_the_pixels_of_convert_rgb(fmt, tmp_path):
    """RGB sources skip `convert("RGB")` (a copy); the pixels are the ones it would give,
    from bytes, from a file object closed afterwards, and from a path."""
    data = _rgb_files()[fmt]
    expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    path = tmp_path / "image"
    path.write_bytes(data)
    with open(path, "rb") as handle:
        from_handle = decode_image(handle)
    for image in (decode_image(data), from_handle, decode_image(str(path))):
        assert image.mode == "RGB"
        assert np.array_equal(np.asarray(image), expected)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"definitely not an image",
        solid_jpeg(64, 48)[:200],
        png_bytes(64, 48)[:60],
        _png_header_only(40, 40),
    ],
    ids=["empty", "garbage", "truncated-jpeg", "truncated-png", "png-without-pixels"],
)
def test_decode_image_corrupt_raises_decode_error(data):
    with pytest.raises(ImageDecodeError):
        decode_image(data)


def test_decode_image_over_pixel_limit():
    data = png_bytes(100, 60)
    with pytest.raises(ImageTooLargeError):
        decode_image(data, max_pixels=5999)
    assert decode_image(data, max_pixels=6000).size == (100, 60)  # the limit itself is allowed
    with pytest.raises(ImageTooLargeError):  # checked from the header, before the pixels
        decode_image(_png_header_only(5000, 5000), max_pixels=1_000_000)


def test_decode_image_max_pixels_above_pillow_default_is_honoured():
    # 13500 x 13500 = 182.25 M pixels: under max_pixels, so it must fail only for the missing
    # pixel data (ImageDecodeError), not for its size.
    with pytest.raises(ImageDecodeError):
        decode_image(_png_header_only(13500, 13500), max_pixels=10**9)


def test_pillow_globals_unchanged_in_process():
    decode_image(png_bytes(10, 10))
    with pytest.raises(ImageDecodeError):
        decode_image(solid_jpeg(64, 48)[:300])
    with pytest.raises(ImageTooLargeError):
        decode_image(png_bytes(10, 10), max_pixels=10)
    assert Image.MAX_IMAGE_PIXELS == PILLOW_DEFAULT_MAX_IMAGE_PIXELS
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def test_pillow_globals_unchanged_by_import_and_decode(tmp_path):
    # A fresh interpreter, so the import itself is observed.
    script = """
import io
from PIL import Image, ImageFile, PngImagePlugin
before = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES, PngImagePlugin.MAX_TEXT_CHUNK)
import bagel_data, bagel_data.datasets, bagel_data.media.images
buf = io.BytesIO(); Image.new("RGB", (8, 8)).save(buf, "PNG")
bagel_data.media.images.decode_image(buf.getvalue())
try:
    bagel_data.media.images.decode_image(buf.getvalue()[:40])
except bagel_data.media.images.ImageDecodeError:
    pass
after = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES, PngImagePlugin.MAX_TEXT_CHUNK)
print(before == after, before, after)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("True"), result.stdout


# -- the opt-in resize filter -----------------------------------------------------------------
def test_bilinear_resample_is_pillows_bilinear_resize_and_bicubic_stays_the_default():
    image = _random_image(90, 70, seed=5)
    target = ImageTransform(48, 16, 16).target_size(90, 70)
    bilinear = ImageTransform(48, 16, 16, resample="bilinear")
    assert bilinear.target_size(90, 70) == target  # shapes and token counts do not change
    assert np.array_equal(
        np.asarray(bilinear.resize(image)), np.asarray(image.resize(target, Image.Resampling.BILINEAR))
    )
    exact = ImageTransform(48, 16, 16)
    assert np.array_equal(np.asarray(exact.resize(image)), np.asarray(image.resize(target, Image.Resampling.BICUBIC)))
    assert not np.array_equal(np.asarray(bilinear.resize(image)), np.asarray(exact.resize(image)))
    assert "resample='bilinear'" in repr(bilinear) and "resample" not in repr(exact)


def test_an_unknown_resample_filter_is_a_config_error_naming_the_choices():
    from bagel_data.errors import ConfigError

    with pytest.raises(ConfigError, match=r"resample.*lanczos.*bicubic.*bilinear"):
        ImageTransform(48, 16, 16, resample="lanczos")
