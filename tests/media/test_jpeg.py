"""The exact decode path: simplejpeg where its pixels are Pillow's, Pillow everywhere else."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from bagel_data.media import jpeg
from bagel_data.media.images import ImageDecodeError, decode_image
from bagel_data.synthetic.dataset import photo_like_image

pytestmark = pytest.mark.skipif(not jpeg.available(), reason="simplejpeg is not installed")

SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}


def encode(image: Image.Image, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def pillow_pixels(data: bytes) -> np.ndarray:
    """What Pillow alone decodes (RGB), the reference of the exact path."""
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def photo(width: int, height: int, seed: int, mode: str = "RGB") -> Image.Image:
    return photo_like_image(np.random.default_rng(seed), width, height, mode)


def assert_identical_and_used(data: bytes, used: bool = True, monkeypatch=None) -> None:
    calls = []
    original = jpeg._simplejpeg.decode_jpeg
    monkeypatch.setattr(jpeg._simplejpeg, "decode_jpeg", lambda *a, **k: calls.append(1) or original(*a, **k))
    decoded = decode_image(data)
    assert decoded.mode == "RGB"
    assert np.array_equal(np.asarray(decoded), pillow_pixels(data))
    assert bool(calls) == used


@pytest.mark.parametrize("subsampling", list(SUBSAMPLING))
@pytest.mark.parametrize("progressive", [False, True])
@pytest.mark.parametrize("size", [(640, 480), (333, 517), (17, 9)])
def test_identical_to_pillow(subsampling, progressive, size, monkeypatch):
    data = encode(photo(*size, seed=size[0]), quality=88, subsampling=SUBSAMPLING[subsampling], progressive=progressive)
    assert_identical_and_used(data, monkeypatch=monkeypatch)


@pytest.mark.parametrize("subsampling", list(SUBSAMPLING))
def test_identical_with_restart_markers(subsampling, monkeypatch):
    data = encode(photo(401, 299, seed=3), quality=90, subsampling=SUBSAMPLING[subsampling], restart_marker_blocks=3)
    assert b"\xff\xdd" in data  # a DRI segment: the file has restart markers
    assert_identical_and_used(data, monkeypatch=monkeypatch)


@pytest.mark.parametrize("quality", [20, 75, 95, 100])
def test_identical_across_qualities(quality, monkeypatch):
    assert_identical_and_used(encode(photo(512, 384, seed=quality), quality=quality), monkeypatch=monkeypatch)


def test_exif_orientation_is_applied_by_neither(monkeypatch):
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    data = encode(photo(320, 200, seed=5), quality=90, exif=exif.tobytes())
    assert_identical_and_used(data, monkeypatch=monkeypatch)
    assert decode_image(data).size == (320, 200)


@pytest.mark.parametrize("mode", ["CMYK", "L"])
def test_cmyk_and_grayscale_go_through_pillow(mode, monkeypatch):
    data = encode(photo(200, 150, seed=7, mode="RGB").convert(mode), quality=90)
    assert_identical_and_used(data, used=False, monkeypatch=monkeypatch)


def test_file_objects_are_decoded_and_left_where_they_were(tmp_path, monkeypatch):
    data = encode(photo(96, 64, seed=9), quality=90)
    (tmp_path / "a.jpg").write_bytes(data)
    with open(tmp_path / "a.jpg", "rb") as handle:
        assert np.array_equal(np.asarray(decode_image(handle)), pillow_pixels(data))
        assert handle.tell() > 0  # where Image.open left it


def test_truncated_jpeg_falls_back_to_pillow_and_fails_there():
    data = encode(photo(300, 200, seed=11), quality=90)
    with pytest.raises(ImageDecodeError):
        decode_image(data[: len(data) // 2])


def test_fast_decode_path_does_not_go_through_the_exact_decoder(monkeypatch):
    monkeypatch.setattr(jpeg, "decode_exact", lambda *a: pytest.fail("exact decoder used with draft_size"))
    data = encode(photo(256, 256, seed=13), quality=90)
    assert decode_image(data, draft_size=(128, 128)).size == (128, 128)
